variable "federation" {
  description = "federation.name: labels every resource this module creates"
  type        = string
}

variable "site" {
  description = "The site's name in the federation config"
  type        = string
}

variable "project" {
  type = string
}

variable "zones" {
  description = "Nodes are spread over these zones in order (one region)"
  type        = list(string)
}

variable "image" {
  description = "A GPU image with NVIDIA drivers, Ray and gcloud installed (head and workers)"
  type        = string
  default     = "projects/deeplearning-platform-release/global/images/family/common-cu124"
}

variable "network" {
  description = "An existing network (self link or name); null: the module makes one with a subnet in the zones' region"
  type        = string
  default     = null
}

variable "subnet_cidr" {
  description = "The CIDR of the subnet the module makes (when network is null)"
  type        = string
  default     = "10.43.0.0/20"
}

variable "controller_cidrs" {
  description = "Where the federation's controller reaches the head from (Ray's GCS, Jobs API and client ports)"
  type        = list(string)
  default     = []
  validation {
    # Ray runs whatever a client sends it: its ports must never face the whole internet.
    condition     = alltrue([for c in var.controller_cidrs : !endswith(c, "/0")])
    error_message = "controller_cidrs must not open Ray to the whole internet (a /0): name the controller's own addresses."
  }
}

variable "service_account" {
  description = "An existing service account email for every node; null: the module makes one that may read only the Ray token"
  type        = string
  default     = null
}

variable "ray_auth_token_secret" {
  description = "Secret Manager secret id holding the Ray auth token the controller uses; nodes read it at boot (null: Ray without token auth)"
  type        = string
  default     = null
}

variable "head" {
  description = "The site's Ray head. enabled = false: workers join ray_address, an existing cluster's head"
  type = object({
    enabled      = optional(bool, false)
    machine_type = optional(string, "n2-standard-4")
    public_ip    = optional(bool, false)
  })
  default = {}
}

variable "ray_address" {
  description = "An existing head's GCS address (host:6379) for workers to join; only when head.enabled is false"
  type        = string
  default     = null
}

variable "node_groups" {
  description = "The site's node groups: machine type, accelerator, spot, GPUs and CPUs per node"
  type = map(object({
    machine_type     = string
    accelerator_type = string
    spot             = optional(bool, false)
    gpus             = number
    cpus             = number
  }))
}

variable "nodes" {
  description = "The desired worker nodes, by node name: the federation adds and removes entries"
  type = map(object({
    group   = string
    request = string
  }))
  default = {}
  validation {
    condition     = alltrue([for n in values(var.nodes) : contains(keys(var.node_groups), n.group)])
    error_message = "Every node's group must be a key of node_groups."
  }
}

variable "labels" {
  description = "Extra labels for every instance"
  type        = map(string)
  default     = {}
}
