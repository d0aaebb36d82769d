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
  description = "Nodes are spread over these zones in order"
  type        = list(string)
}

variable "image" {
  description = "A GPU image with NVIDIA drivers and Ray installed"
  type        = string
  default     = "projects/deeplearning-platform-release/global/images/family/common-cu124"
}

variable "network" {
  type    = string
  default = "global/networks/default"
}

variable "ray_address" {
  description = "The site's Ray GCS address (head:6379) that workers join at boot"
  type        = string
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
  description = "The desired nodes, by node name: the federation adds and removes entries"
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
