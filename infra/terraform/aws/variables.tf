variable "federation" {
  description = "federation.name: tags every resource this module creates"
  type        = string
}

variable "site" {
  description = "The site's name in the federation config"
  type        = string
}

variable "region" {
  type    = string
  default = "us-east-1"
}

variable "endpoint" {
  description = "EC2 endpoint override (provider.endpoint_url); null for AWS itself"
  type        = string
  default     = null
}

variable "ami_id" {
  description = "A GPU image with NVIDIA drivers and Ray installed"
  type        = string
}

variable "subnet_ids" {
  description = "Instances are spread over these subnets in order"
  type        = list(string)
  default     = []
}

variable "launch_template_name" {
  description = "The template the boto3 provider launches from (provider.launch_template)"
  type        = string
  default     = "ray-gpu-worker"
}

variable "ray_address" {
  description = "The site's Ray GCS address (head:6379) that workers join at boot"
  type        = string
}

variable "node_groups" {
  description = "The site's node groups: instance type, spot, GPUs and CPUs per node"
  type = map(object({
    instance_type = string
    spot          = optional(bool, false)
    gpus          = number
    cpus          = number
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
  description = "Extra tags for every instance"
  type        = map(string)
  default     = {}
}
