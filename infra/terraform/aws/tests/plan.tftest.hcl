# Plans and applies with a mocked AWS provider: no credentials, no network.
mock_provider "aws" {
  mock_resource "aws_instance" {
    defaults = {
      private_ip = "10.42.0.7"
      public_ip  = "203.0.113.7"
    }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_data "aws_caller_identity" {
    defaults = { account_id = "123456789012" }
  }
}

variables {
  federation               = "acme-gpu"
  site                     = "aws-us-east-1"
  ami_id                   = "ami-12c6146b"
  zones                    = ["us-east-1a", "us-east-1b"]
  controller_cidrs         = ["198.51.100.4/32"]
  ray_auth_token_parameter = "/acme-gpu/ray-token"
  node_groups = {
    p4d-spot      = { instance_type = "p4d.24xlarge", spot = true, gpus = 8, cpus = 96 }
    p4d-on-demand = { instance_type = "p4d.24xlarge", gpus = 8, cpus = 96 }
  }
  nodes = {
    "p4d-spot-r1-0"      = { group = "p4d-spot", request = "r1" }
    "p4d-spot-r1-1"      = { group = "p4d-spot", request = "r1" }
    "p4d-on-demand-r2-0" = { group = "p4d-on-demand", request = "r2" }
  }
}

run "a_whole_cluster_network_head_and_workers" {
  command = apply
  assert {
    condition     = length(aws_vpc.site) == 1 && length(aws_subnet.site) == 2 && length(aws_route_table_association.site) == 2
    error_message = "without vpc_id the module makes a VPC and one routed subnet per zone"
  }
  assert {
    condition     = length(aws_instance.head) == 1 && aws_instance.head[0].instance_type == "m6i.xlarge"
    error_message = "a site's cluster has one head"
  }
  assert {
    condition     = strcontains(aws_instance.head[0].user_data, "ray start --head --port=6379") && strcontains(aws_instance.head[0].user_data, "--num-gpus=0")
    error_message = "the head starts Ray's head and takes no GPU work"
  }
  assert {
    condition     = output.ray_address == "10.42.0.7:6379" && output.jobs_api_url == "http://10.42.0.7:8265"
    error_message = "the outputs name the head's GCS address and Jobs API"
  }
  assert {
    condition     = strcontains(aws_instance.node["p4d-spot-r1-1"].user_data, "until ray start --address=10.42.0.7:6379")
    error_message = "workers join the module's own head, waiting for it while it starts"
  }
  assert {
    condition     = length(aws_instance.node) == 3 && aws_instance.node["p4d-spot-r1-0"].instance_type == "p4d.24xlarge"
    error_message = "one instance per entry of var.nodes, of its group's type"
  }
}

run "only_members_and_the_controller_reach_ray" {
  command = apply
  assert {
    condition     = aws_security_group_rule.members.self && aws_security_group_rule.members.security_group_id == aws_security_group.ray.id
    error_message = "nodes of the cluster reach each other on every port"
  }
  assert {
    condition     = toset([for r in aws_vpc_security_group_ingress_rule.controller : "${r.cidr_ipv4}:${r.from_port}"]) == toset(["198.51.100.4/32:6379", "198.51.100.4/32:8265", "198.51.100.4/32:10001"])
    error_message = "the controller's CIDRs reach the GCS, Jobs API and client ports, and nothing else does"
  }
  assert {
    condition     = alltrue([for i in concat(values(aws_instance.node), aws_instance.head) : i.vpc_security_group_ids == toset([aws_security_group.ray.id])])
    error_message = "every node is in the cluster's security group"
  }
}

run "nodes_read_the_token_and_only_the_token" {
  command = apply
  assert {
    condition     = strcontains(aws_iam_role_policy.token[0].policy, "arn:aws:ssm:us-east-1:123456789012:parameter/acme-gpu/ray-token") && strcontains(aws_iam_role_policy.token[0].policy, "\"ssm:GetParameter\"")
    error_message = "the node role may read the Ray token parameter alone"
  }
  assert {
    condition     = alltrue([for i in values(aws_instance.node) : i.iam_instance_profile == aws_iam_instance_profile.node[0].name])
    error_message = "workers run with the module's instance profile"
  }
  assert {
    condition     = strcontains(aws_instance.head[0].user_data, "RAY_AUTH_MODE=token") && strcontains(aws_instance.head[0].user_data, "--name /acme-gpu/ray-token --with-decryption")
    error_message = "Ray runs with token auth, the token read from SSM at boot"
  }
}

run "spot_only_where_the_group_says" {
  command = plan
  assert {
    condition     = aws_instance.node["p4d-spot-r1-0"].instance_market_options[0].market_type == "spot"
    error_message = "a spot group's nodes must be spot"
  }
  assert {
    condition     = length(aws_instance.node["p4d-on-demand-r2-0"].instance_market_options) == 0
    error_message = "an on-demand group's nodes must not be spot"
  }
}

run "tags_name_the_node_and_spread_it" {
  command = apply
  assert {
    condition     = aws_instance.node["p4d-spot-r1-1"].tags["federation"] == "acme-gpu" && aws_instance.node["p4d-spot-r1-1"].tags["federation-site"] == "aws-us-east-1"
    error_message = "instances must carry the federation and federation-site tags"
  }
  assert {
    condition     = aws_instance.node["p4d-spot-r1-1"].tags["federation-request"] == "r1" && aws_instance.node["p4d-spot-r1-1"].tags["federation-group"] == "p4d-spot"
    error_message = "instances must carry their request and group"
  }
  assert {
    condition     = strcontains(aws_instance.node["p4d-spot-r1-1"].user_data, "FEDERATION_NODE=p4d-spot-r1-1") && strcontains(aws_instance.node["p4d-spot-r1-1"].user_data, "federation-node/$NAME")
    error_message = "a node must join the site's Ray cluster under its own name"
  }
  assert {
    condition     = aws_instance.node["p4d-spot-r1-0"].subnet_id != aws_instance.node["p4d-spot-r1-1"].subnet_id
    error_message = "nodes must be spread over the subnets"
  }
}

run "workers_only_join_an_existing_cluster_in_an_existing_vpc" {
  command = plan
  variables {
    vpc_id                = "vpc-1"
    subnet_ids            = ["subnet-a", "subnet-b"]
    instance_profile_name = "existing-profile"
    head                  = { enabled = false }
    ray_address           = "10.0.0.10:6379"
  }
  assert {
    condition     = length(aws_vpc.site) == 0 && length(aws_instance.head) == 0 && length(aws_iam_role.node) == 0
    error_message = "an existing VPC, head and profile are used, not made"
  }
  assert {
    condition     = strcontains(aws_instance.node["p4d-spot-r1-0"].user_data, "ray start --address=10.0.0.10:6379") && aws_instance.node["p4d-spot-r1-0"].iam_instance_profile == "existing-profile"
    error_message = "workers join the given head with the given profile"
  }
  assert {
    condition     = output.jobs_api_url == null
    error_message = "without a head of its own the module names no Jobs API"
  }
}

run "no_nodes_means_no_workers" {
  command = apply
  variables {
    nodes = {}
  }
  assert {
    condition     = length(aws_instance.node) == 0 && length(aws_instance.head) == 1 && aws_launch_template.worker.name == "ray-gpu-worker"
    error_message = "with no desired nodes the cluster is its head (and the template) alone"
  }
}

run "a_node_of_an_unknown_group_is_rejected" {
  command = plan
  variables {
    nodes = { "x-0" = { group = "nope", request = "r" } }
  }
  expect_failures = [var.nodes]
}

run "ray_is_never_opened_to_the_internet" {
  command = plan
  variables {
    controller_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.controller_cidrs]
}

run "a_head_and_an_existing_address_are_exclusive" {
  command = plan
  variables {
    ray_address = "10.0.0.10:6379"
  }
  expect_failures = [aws_launch_template.worker]
}
