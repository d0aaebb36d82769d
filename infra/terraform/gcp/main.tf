locals {
  labels = merge(var.labels, {
    "federation"      = var.federation
    "federation-site" = var.site
  })
  names       = sort(keys(var.nodes))
  subnetwork  = local.make_network ? google_compute_subnetwork.site[0].self_link : null
  sa_email    = var.service_account != null ? var.service_account : google_service_account.node[0].email
  ray_address = var.head.enabled ? "${google_compute_instance.head[0].network_interface[0].network_ip}:6379" : var.ray_address
  # Ray with token authentication, the token read at boot from Secret Manager (so it is in
  # neither the metadata nor Terraform's state); it is the token the controller sends.
  auth = var.ray_auth_token_secret == null ? "" : <<-EOT
    export RAY_AUTH_MODE=token
    RAY_AUTH_TOKEN="$(gcloud secrets versions access latest --secret=${var.ray_auth_token_secret} --project=${var.project})"
    export RAY_AUTH_TOKEN
  EOT
}

# The head runs no GPU work: it holds the GCS and the Jobs API the controller dispatches to.
resource "google_compute_instance" "head" {
  count        = var.head.enabled ? 1 : 0
  name         = "${var.federation}-${var.site}-head"
  zone         = var.zones[0]
  machine_type = var.head.machine_type
  tags         = [local.ray_tag]

  boot_disk {
    auto_delete = true
    initialize_params {
      image = var.image
      size  = 100
    }
  }

  network_interface {
    network    = local.network
    subnetwork = local.subnetwork
    dynamic "access_config" {
      for_each = var.head.public_ip ? [1] : []
      content {}
    }
  }

  service_account {
    email  = local.sa_email
    scopes = ["cloud-platform"]
  }

  metadata = {
    startup-script = <<-EOT
      #!/bin/bash
      set -euo pipefail
      ${local.auth}
      ray start --head --port=6379 --dashboard-host=0.0.0.0 --dashboard-port=8265 \
        --ray-client-server-port=10001 --num-gpus=0 --disable-usage-stats
    EOT
  }

  labels = merge(local.labels, { "federation-role" = "head" })

  lifecycle {
    precondition {
      condition     = var.head.enabled != (var.ray_address != null)
      error_message = "Give ray_address (an existing cluster's head) exactly when head.enabled is false."
    }
  }
}

# Workers: one per entry of var.nodes, so the federation sets each worker group's size.
resource "google_compute_instance" "node" {
  for_each     = var.nodes
  name         = each.key
  zone         = var.zones[index(local.names, each.key) % length(var.zones)]
  machine_type = var.node_groups[each.value.group].machine_type
  tags         = [local.ray_tag]

  boot_disk {
    auto_delete = true
    initialize_params {
      image = var.image
      size  = 200
    }
  }

  network_interface {
    network    = local.network
    subnetwork = local.subnetwork
  }

  service_account {
    email  = local.sa_email
    scopes = ["cloud-platform"]
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
      set -euo pipefail
      ${local.auth}
      # a cluster brought up with its first workers: the head may still be starting
      until ray start --address=${local.ray_address} --num-gpus=${var.node_groups[each.value.group].gpus} \
        --num-cpus=${var.node_groups[each.value.group].cpus} \
        --resources='{"federation-node/${each.key}": 1}' --disable-usage-stats; do sleep 10; done
    EOT
  }

  # label values allow only [a-z0-9_-]; the outputs keep the request id exactly as given
  labels = merge(local.labels, {
    "federation-role"    = "worker"
    "federation-group"   = replace(lower(each.value.group), "/[^a-z0-9_-]/", "-")
    "federation-request" = replace(lower(each.value.request), "/[^a-z0-9_-]/", "-")
  })
}
