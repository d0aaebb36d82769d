# The site's network (an existing one, or one made here) and who may reach Ray in it.
locals {
  make_network = var.network == null
  region       = join("-", slice(split("-", var.zones[0]), 0, 2))
  network      = local.make_network ? google_compute_network.site[0].self_link : var.network
  ray_tag      = "${var.federation}-${var.site}-ray"
}

resource "google_compute_network" "site" {
  count                   = local.make_network ? 1 : 0
  name                    = "${var.federation}-${var.site}"
  auto_create_subnetworks = false
}

resource "google_compute_subnetwork" "site" {
  count         = local.make_network ? 1 : 0
  name          = "${var.federation}-${var.site}"
  region        = local.region
  network       = google_compute_network.site[0].id
  ip_cidr_range = var.subnet_cidr
}

# Ray's nodes talk to each other on many ports: every port between the cluster's own nodes
# (by network tag), and the head's GCS, Jobs API and client ports from controller_cidrs alone.
resource "google_compute_firewall" "members" {
  name        = "${local.ray_tag}-members"
  network     = local.network
  source_tags = [local.ray_tag]
  target_tags = [local.ray_tag]
  allow {
    protocol = "all"
  }
}

resource "google_compute_firewall" "controller" {
  count         = length(var.controller_cidrs) > 0 ? 1 : 0
  name          = "${local.ray_tag}-controller"
  network       = local.network
  source_ranges = var.controller_cidrs
  target_tags   = [local.ray_tag]
  allow {
    protocol = "tcp"
    ports    = ["6379", "8265", "10001"]
  }
}

# The nodes' identity may read the Ray token and nothing else.
resource "google_service_account" "node" {
  count        = var.service_account == null ? 1 : 0
  account_id   = substr("${var.federation}-${var.site}", 0, 30)
  display_name = "Ray nodes of federation site ${var.site}"
}

resource "google_secret_manager_secret_iam_member" "token" {
  count     = var.service_account == null && var.ray_auth_token_secret != null ? 1 : 0
  secret_id = var.ray_auth_token_secret
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.node[0].email}"
}
