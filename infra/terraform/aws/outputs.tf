output "nodes" {
  description = "Every managed node by name: instance id, group, request and state"
  value = {
    for name, i in aws_instance.node : name => {
      id      = i.id
      group   = var.nodes[name].group
      request = var.nodes[name].request
      state   = i.instance_state
    }
  }
}

output "launch_template_name" {
  value = aws_launch_template.worker.name
}
