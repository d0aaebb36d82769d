terraform {
  required_version = ">= 1.7"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

# A null endpoint means the real AWS; set it for private endpoints and for moto in tests.
provider "aws" {
  region                      = var.region
  skip_credentials_validation = var.endpoint != null
  skip_requesting_account_id  = var.endpoint != null
  skip_metadata_api_check     = var.endpoint != null
  endpoints {
    ec2 = var.endpoint
    iam = var.endpoint
    ssm = var.endpoint
    sts = var.endpoint
  }
}
