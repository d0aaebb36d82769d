# Plans with a mocked AWS provider: no credentials, no network.
mock_provider "aws" {}

variables {
  federation  = "acme-gpu"
  site        = "aws-us-east-1"
  ami_id      = "ami-12c6146b"
  ray_address = "10.0.0.10:6379"
  subnet_ids  = ["subnet-a", "subnet-b"]
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

run "one_instance_per_desired_node" {
  command = plan
  assert {
    condition     = length(aws_instance.node) == 3
    error_message = "expected one instance per entry of var.nodes"
  }
  assert {
    condition     = aws_instance.node["p4d-spot-r1-0"].instance_type == "p4d.24xlarge"
    error_message = "instance type must come from the node group"
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

run "tags_and_ray_join" {
  command = plan
  assert {
    condition     = aws_instance.node["p4d-spot-r1-1"].tags["federation"] == "acme-gpu" && aws_instance.node["p4d-spot-r1-1"].tags["federation-site"] == "aws-us-east-1"
    error_message = "instances must carry the federation and federation-site tags"
  }
  assert {
    condition     = aws_instance.node["p4d-spot-r1-1"].tags["federation-request"] == "r1" && aws_instance.node["p4d-spot-r1-1"].tags["federation-group"] == "p4d-spot"
    error_message = "instances must carry their request and group"
  }
  assert {
    condition     = strcontains(aws_instance.node["p4d-spot-r1-1"].user_data, "FEDERATION_NODE=p4d-spot-r1-1") && strcontains(aws_instance.node["p4d-spot-r1-1"].user_data, "ray start --address=10.0.0.10:6379")
    error_message = "a node must join the site's Ray cluster under its own name"
  }
  assert {
    condition     = aws_instance.node["p4d-spot-r1-0"].subnet_id != aws_instance.node["p4d-spot-r1-1"].subnet_id
    error_message = "nodes must be spread over the subnets"
  }
}

run "no_nodes_means_only_the_template" {
  command = plan
  variables {
    nodes = {}
  }
  assert {
    condition     = length(aws_instance.node) == 0 && aws_launch_template.worker.name == "ray-gpu-worker"
    error_message = "with no desired nodes only the launch template is planned"
  }
}

run "a_node_of_an_unknown_group_is_rejected" {
  command = plan
  variables {
    nodes = { "x-0" = { group = "nope", request = "r" } }
  }
  expect_failures = [var.nodes]
}
