locals {
  tags = merge(var.labels, {
    "federation"      = var.federation
    "federation-site" = var.site
  })
  # A node joins the site's Ray cluster with its GPUs and a resource naming it, so the
  # federation can pin a gang's bundles to exactly the nodes it allocated.
  join = <<-EOT
    #!/bin/bash
    NAME="$${FEDERATION_NODE:-$(curl -s http://169.254.169.254/latest/meta-data/instance-id)}"
    ray start --address=${var.ray_address} --num-gpus=$(nvidia-smi -L | wc -l) \
      --resources="{\"federation-node/$NAME\": 1}" --disable-usage-stats
  EOT
}

# The template the boto3 provider launches from; the instance id names the node.
resource "aws_launch_template" "worker" {
  name      = var.launch_template_name
  image_id  = var.ami_id
  user_data = base64encode(local.join)
  tag_specifications {
    resource_type = "instance"
    tags          = local.tags
  }
  tags = local.tags
}

# Nodes this module manages itself (sites with provider.terraform_dir): one per entry of var.nodes.
resource "aws_instance" "node" {
  for_each      = var.nodes
  ami           = var.ami_id
  instance_type = var.node_groups[each.value.group].instance_type
  subnet_id     = length(var.subnet_ids) > 0 ? var.subnet_ids[index(sort(keys(var.nodes)), each.key) % length(var.subnet_ids)] : null
  user_data     = "#!/bin/bash\nexport FEDERATION_NODE=${each.key}\n${replace(local.join, "#!/bin/bash\n", "")}"

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
    "federation-group"   = each.value.group
    "federation-request" = each.value.request
  })
}
