output "nodes" {
  description = "Every managed worker by name: instance id, group, request and state"
  value = {
    for name, i in aws_instance.node : name => {
      id      = i.id
      group   = var.nodes[name].group
      request = var.nodes[name].request
      state   = i.instance_state
    }
  }
}

output "ray_address" {
  description = "The site's Ray GCS address (host:6379), where workers join"
  value       = local.ray_address
}

output "jobs_api_url" {
  description = "The site's Ray Jobs API (sites.<name>.ray_address in the federation config); null without a head"
  value       = var.head.enabled ? "http://${var.head.public_ip ? aws_instance.head[0].public_ip : aws_instance.head[0].private_ip}:8265" : null
}

output "security_group_id" {
  value = aws_security_group.ray.id
}

output "subnet_ids" {
  value = local.subnet_ids
}

output "instance_profile" {
  value = local.profile
}

output "launch_template_name" {
  value = aws_launch_template.worker.name
}
