locals {
  labels = merge(var.labels, {
    "federation"      = var.federation
    "federation-site" = var.site
  })
  names = sort(keys(var.nodes))
}

resource "google_compute_instance" "node" {
  for_each     = var.nodes
  name         = each.key
  zone         = var.zones[index(local.names, each.key) % length(var.zones)]
  machine_type = var.node_groups[each.value.group].machine_type

  boot_disk {
    auto_delete = true
    initialize_params {
      image = var.image
      size  = 200
    }
  }

  network_interface {
    network = var.network
  }

  guest_accelerator {
    type  = var.node_groups[each.value.group].accelerator_type
    count = var.node_groups[each.value.group].gpus
  }

  scheduling {
    on_host_maintenance         = "TERMINATE"
    automatic_restart           = !var.node_groups[each.value.group].spot
    preemptible                 = var.node_groups[each.value.group].spot
    provisioning_model          = var.node_groups[each.value.group].spot ? "SPOT" : "STANDARD"
    instance_termination_action = var.node_groups[each.value.group].spot ? "DELETE" : null
  }

  # The node joins the site's Ray cluster with its GPUs and a resource naming it, so the
  # federation can pin a gang's bundles to exactly the nodes it allocated.
  metadata = {
    startup-script = <<-EOT
      #!/bin/bash
      ray start --address=${var.ray_address} --num-gpus=${var.node_groups[each.value.group].gpus} \
        --num-cpus=${var.node_groups[each.value.group].cpus} \
        --resources='{"federation-node/${each.key}": 1}' --disable-usage-stats
    EOT
  }

  # label values allow only [a-z0-9_-]; the outputs keep the request id exactly as given
  labels = merge(local.labels, {
    "federation-group"   = replace(lower(each.value.group), "/[^a-z0-9_-]/", "-")
    "federation-request" = replace(lower(each.value.request), "/[^a-z0-9_-]/", "-")
  })
}
