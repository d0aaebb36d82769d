output "nodes" {
  description = "Every managed node by name: instance id, group, request and state"
  value = {
    for name, i in google_compute_instance.node : name => {
      id      = i.instance_id
      group   = var.nodes[name].group
      request = var.nodes[name].request
      state   = i.current_status
    }
  }
}
