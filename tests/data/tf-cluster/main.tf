# A stand-in for a cloud module with the AWS module's interface (nodes in, head and nodes out),
# made of Terraform's built-in terraform_data: real terraform runs, applies and destroys it here
# in seconds, with no provider to install and no cloud.
variable "federation" { type = string }
variable "site" { type = string }
variable "nodes" {
  type = map(object({
    group   = string
    request = string
  }))
  default = {}
}

resource "terraform_data" "head" {
  input = "${var.federation}-${var.site}-head"
}

resource "terraform_data" "node" {
  for_each = var.nodes
  input    = each.value
}

output "nodes" {
  value = { for name, n in terraform_data.node : name => { id = name, group = n.output.group, request = n.output.request, state = "running" } }
}

output "jobs_api_url" {
  value = "http://127.0.0.1:9"
}
