locals {
  tags = merge(var.labels, {
    "federation"      = var.federation
    "federation-site" = var.site
  })
  controller_ports = [6379, 8265, 10001] # Ray's GCS, Jobs API (dashboard) and client server
  profile          = var.instance_profile_name != null ? var.instance_profile_name : aws_iam_instance_profile.node[0].name
  ray_address      = var.head.enabled ? "${aws_instance.head[0].private_ip}:6379" : var.ray_address
  # Every node runs Ray with token authentication, the token read at boot from SSM (so it is
  # in neither the user data nor Terraform's state); it is the token the controller sends.
  auth = <<-EOT
    export RAY_AUTH_MODE=token
    RAY_AUTH_TOKEN="$(aws ssm get-parameter --region ${var.region} --name ${var.ray_auth_token_parameter} --with-decryption --query Parameter.Value --output text)"
    export RAY_AUTH_TOKEN
  EOT
  # A worker joins the site's Ray cluster with its GPUs and a resource naming it, so the
  # federation can pin a gang's bundles to exactly the nodes it allocated.
  join = <<-EOT
    #!/bin/bash
    set -euo pipefail
    ${local.auth}
    NAME="$${FEDERATION_NODE:-$(curl -s http://169.254.169.254/latest/meta-data/instance-id)}"
    # a cluster brought up with its first workers: the head may still be starting
    until ray start --address=${local.ray_address} --num-gpus=$(nvidia-smi -L | wc -l) \
      --resources="{\"federation-node/$NAME\": 1}" --disable-usage-stats; do sleep 10; done
  EOT
}

# The head runs no GPU work: it holds the GCS and the Jobs API the controller dispatches to.
resource "aws_instance" "head" {
  count                       = var.head.enabled ? 1 : 0
  ami                         = var.ami_id
  instance_type               = var.head.instance_type
  subnet_id                   = local.subnet_ids[0]
  vpc_security_group_ids      = [aws_security_group.ray.id]
  iam_instance_profile        = local.profile
  associate_public_ip_address = var.head.public_ip ? true : null # unset unless asked: the subnet decides
  user_data                   = <<-EOT
    #!/bin/bash
    set -euo pipefail
    ${local.auth}
    ray start --head --port=6379 --dashboard-host=0.0.0.0 --dashboard-port=8265 \
      --ray-client-server-port=10001 --num-gpus=0 --disable-usage-stats
  EOT
  tags                        = merge(local.tags, { "Name" = "${var.federation}-${var.site}-head", "federation-role" = "head" })

  lifecycle {
    precondition {
      condition     = length(local.subnet_ids) > 0
      error_message = "vpc_id names an existing VPC: give its subnets in subnet_ids."
    }
  }
}

# The template the boto3 provider launches workers from; the instance id names the node.
resource "aws_launch_template" "worker" {
  name                   = var.launch_template_name
  image_id               = var.ami_id
  user_data              = base64encode(local.join)
  vpc_security_group_ids = [aws_security_group.ray.id]
  iam_instance_profile {
    name = local.profile
  }
  tag_specifications {
    resource_type = "instance"
    tags          = local.tags
  }
  tags = local.tags

  lifecycle {
    precondition {
      condition     = var.head.enabled != (var.ray_address != null)
      error_message = "Give ray_address (an existing cluster's head) exactly when head.enabled is false."
    }
  }
}

# Workers this module manages itself (sites with provider.terraform_dir): one per entry of
# var.nodes, so the federation sets each worker group's size.
resource "aws_instance" "node" {
  for_each               = var.nodes
  ami                    = var.ami_id
  instance_type          = var.node_groups[each.value.group].instance_type
  subnet_id              = local.subnet_ids[index(sort(keys(var.nodes)), each.key) % length(local.subnet_ids)]
  vpc_security_group_ids = [aws_security_group.ray.id]
  iam_instance_profile   = local.profile
  user_data              = "#!/bin/bash\nexport FEDERATION_NODE=${each.key}\n${replace(local.join, "#!/bin/bash\n", "")}"

  dynamic "instance_market_options" {
    for_each = var.node_groups[each.value.group].spot ? [1] : []
    content {
      market_type = "spot"
      spot_options {
        spot_instance_type             = "one-time"
        instance_interruption_behavior = "terminate"
      }
    }
  }

  # A node's market never changes in place: the federation replaces nodes through var.nodes.
  # (Some EC2 API implementations, moto among them, do not read the market back.)
  lifecycle {
    ignore_changes = [instance_market_options]
  }

  tags = merge(local.tags, {
    "Name"               = "${var.federation}-${each.key}"
    "federation-role"    = "worker"
    "federation-group"   = each.value.group
    "federation-request" = each.value.request
  })
}
