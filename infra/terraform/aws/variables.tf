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
  description = "One endpoint for EC2, IAM, SSM and STS (provider.endpoint_url); null for AWS itself"
  type        = string
  default     = null
}

variable "ami_id" {
  description = "An image with NVIDIA drivers, Ray and the AWS CLI installed (head and workers)"
  type        = string
}

variable "vpc_id" {
  description = "An existing VPC (with subnet_ids); null: the module makes a VPC, one subnet per zone, and a route out"
  type        = string
  default     = null
}

variable "vpc_cidr" {
  description = "The CIDR of the VPC the module makes (when vpc_id is null)"
  type        = string
  default     = "10.42.0.0/16"
}

variable "zones" {
  description = "Availability zones for the subnets the module makes; empty: one subnet, AWS picks the zone"
  type        = list(string)
  default     = []
}

variable "subnet_ids" {
  description = "Existing subnets in vpc_id; instances are spread over them in order"
  type        = list(string)
  default     = []
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

variable "instance_profile_name" {
  description = "An existing instance profile for every node; null: the module makes a role that may read only the Ray token"
  type        = string
  default     = null
}

variable "ray_auth_token_parameter" {
  description = "Name of an SSM SecureString holding the Ray auth token the controller uses; nodes read it at boot (it never enters Terraform state)"
  type        = string
  validation {
    condition     = startswith(var.ray_auth_token_parameter, "/")
    error_message = "ray_auth_token_parameter must be an SSM parameter name starting with /."
  }
}

variable "head" {
  description = "The site's Ray head. enabled = false: workers join ray_address, an existing cluster's head"
  type = object({
    enabled       = optional(bool, true)
    instance_type = optional(string, "m6i.xlarge")
    public_ip     = optional(bool, false)
  })
  default = {}
}

variable "ray_address" {
  description = "An existing head's GCS address (host:6379) for workers to join; only when head.enabled is false"
  type        = string
  default     = null
}

variable "launch_template_name" {
  description = "The template the boto3 provider launches workers from (provider.launch_template)"
  type        = string
  default     = "ray-gpu-worker"
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
  description = "Extra tags for every resource"
  type        = map(string)
  default     = {}
}
