output "nodes" {
  description = "Every managed worker by name: instance id, group, request and state"
  value = {
    for name, i in google_compute_instance.node : name => {
      id      = i.instance_id
      group   = var.nodes[name].group
      request = var.nodes[name].request
      state   = i.current_status
    }
  }
}

output "ray_address" {
  description = "The site's Ray GCS address (host:6379), where workers join"
  value       = local.ray_address
}

output "jobs_api_url" {
  description = "The site's Ray Jobs API (sites.<name>.ray_address in the federation config); null without a head"
  value       = var.head.enabled ? "http://${var.head.public_ip ? google_compute_instance.head[0].network_interface[0].access_config[0].nat_ip : google_compute_instance.head[0].network_interface[0].network_ip}:8265" : null
}

output "network" {
  value = local.network
}

output "service_account" {
  value = local.sa_email
}
