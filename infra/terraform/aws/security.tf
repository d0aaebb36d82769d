# Who may reach the cluster, and what its nodes may do.

# Ray's nodes talk to each other on many ports (GCS, raylets, object manager, workers), so the
# group opens every port to its own members and nothing else; the controller gets the head's
# GCS, Jobs API and client ports from controller_cidrs alone. Egress is open (images, packages).
resource "aws_security_group" "ray" {
  name        = "${var.federation}-${var.site}-ray"
  description = "Ray cluster of federation site ${var.site}"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

resource "aws_security_group_rule" "members" {
  type              = "ingress"
  security_group_id = aws_security_group.ray.id
  description       = "Ray between the nodes of the cluster"
  self              = true
  protocol          = "-1"
  from_port         = 0
  to_port           = 0
}

resource "aws_vpc_security_group_ingress_rule" "controller" {
  for_each          = { for pair in setproduct(var.controller_cidrs, local.controller_ports) : "${pair[0]}:${pair[1]}" => pair }
  security_group_id = aws_security_group.ray.id
  description       = "federation controller to the Ray head"
  cidr_ipv4         = each.value[0]
  ip_protocol       = "tcp"
  from_port         = each.value[1]
  to_port           = each.value[1]
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "out" {
  security_group_id = aws_security_group.ray.id
  description       = "images, packages and the Ray token"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
  tags              = local.tags
}

# The nodes' role may read the Ray token and nothing else.
data "aws_partition" "current" {}
data "aws_caller_identity" "current" {}

resource "aws_iam_role" "node" {
  count = var.instance_profile_name == null ? 1 : 0
  name  = "${var.federation}-${var.site}-node"
  assume_role_policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Effect = "Allow", Principal = { Service = "ec2.amazonaws.com" }, Action = "sts:AssumeRole" }]
  })
  tags = local.tags
}

resource "aws_iam_role_policy" "token" {
  count = var.instance_profile_name == null ? 1 : 0
  name  = "read-ray-token"
  role  = aws_iam_role.node[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect   = "Allow"
      Action   = "ssm:GetParameter"
      Resource = "arn:${data.aws_partition.current.partition}:ssm:${var.region}:${data.aws_caller_identity.current.account_id}:parameter${var.ray_auth_token_parameter}"
    }]
  })
}

resource "aws_iam_instance_profile" "node" {
  count = var.instance_profile_name == null ? 1 : 0
  name  = "${var.federation}-${var.site}-node"
  role  = aws_iam_role.node[0].name
  tags  = local.tags
}
