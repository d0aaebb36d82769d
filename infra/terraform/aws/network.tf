# The site's network: an existing VPC and subnets by id, or one made here with a route out
# (nodes fetch images, packages and the Ray token).
locals {
  make_network = var.vpc_id == null
  zones        = length(var.zones) > 0 ? var.zones : [null]
  vpc_id       = local.make_network ? aws_vpc.site[0].id : var.vpc_id
  subnet_ids   = local.make_network ? aws_subnet.site[*].id : var.subnet_ids
}

resource "aws_vpc" "site" {
  count                = local.make_network ? 1 : 0
  cidr_block           = var.vpc_cidr
  enable_dns_hostnames = true
  tags                 = merge(local.tags, { "Name" = "${var.federation}-${var.site}" })
}

resource "aws_subnet" "site" {
  count                   = local.make_network ? length(local.zones) : 0
  vpc_id                  = aws_vpc.site[0].id
  cidr_block              = cidrsubnet(var.vpc_cidr, 8, count.index)
  availability_zone       = local.zones[count.index]
  map_public_ip_on_launch = var.head.public_ip
  tags                    = merge(local.tags, { "Name" = "${var.federation}-${var.site}-${count.index}" })
}

resource "aws_internet_gateway" "site" {
  count  = local.make_network ? 1 : 0
  vpc_id = aws_vpc.site[0].id
  tags   = local.tags
}

resource "aws_route_table" "site" {
  count  = local.make_network ? 1 : 0
  vpc_id = aws_vpc.site[0].id
  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.site[0].id
  }
  tags = local.tags
}

resource "aws_route_table_association" "site" {
  count          = local.make_network ? length(local.zones) : 0
  subnet_id      = aws_subnet.site[count.index].id
  route_table_id = aws_route_table.site[0].id
}
