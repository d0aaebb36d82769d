"""AWS EC2 burst nodes through boto3.

Each request is one `run_instances` call with MinCount = MaxCount (all or nothing: a gang cannot
use half its nodes), from the site's launch template (made by `infra/terraform/aws`), with the
federation's tags applied at launch, so an instance is never untagged. Subnets are tried in
order on a capacity error (zone failover); past that the request fails as data and the decision
cycle fails over to the group's `fallback` (spot -> on-demand) or another option. botocore's own retries are off: retries happen once, in
`providers.retrying`, after classification.
"""

from __future__ import annotations

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
)

from federation.model import NodeGroup
from federation.schema import AwsProvider as AwsSpec
from providers.base import TAG_FEDERATION, TAG_GROUP, TAG_REQUEST, TAG_SITE, CloudProvider, Instance
from providers.errors import (
    AUTH,
    CAPACITY,
    INVALID,
    QUOTA,
    TRANSIENT,
    ProviderFailure,
    kind_from_status,
)

CODES = {
    TRANSIENT: {"RequestLimitExceeded", "Throttling", "ThrottlingException", "InternalError", "InternalFailure",
                "ServiceUnavailable", "Unavailable", "RequestTimeout"},
    CAPACITY: {"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity", "SpotMaxPriceTooLow",
               "InsufficientReservedInstanceCapacity", "Unsupported"},
    QUOTA: {"MaxSpotInstanceCountExceeded", "InstanceLimitExceeded", "VcpuLimitExceeded", "InsufficientFreeAddressesInSubnet"},
    AUTH: {"AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", "OptInRequired"},
}


def classify(exc: Exception) -> ProviderFailure:
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        msg = exc.response.get("Error", {}).get("Message", str(exc))
        kind = next((k for k, codes in CODES.items() if code in codes), None)
        return ProviderFailure(kind or kind_from_status(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")), f"{code}: {msg}")
    if isinstance(exc, NoCredentialsError):
        return ProviderFailure(AUTH, "no AWS credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile)")
    if isinstance(exc, EndpointConnectionError):
        return ProviderFailure(TRANSIENT, str(exc))
    return ProviderFailure(TRANSIENT if isinstance(exc, BotoCoreError) else INVALID, str(exc))


def ec2_client(spec: AwsSpec):
    return boto3.client("ec2", region_name=spec.region, endpoint_url=spec.endpoint_url,
                        config=Config(retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=60))


class Ec2Provider(CloudProvider):
    def __init__(self, federation: str, site: str, spec: AwsSpec, groups: dict[str, NodeGroup], client=None, **kw):
        super().__init__(federation, site, groups, **kw)
        self.spec = spec
        self.ec2 = client or ec2_client(spec)

    def _call(self, method: str, **kwargs):
        try:
            return getattr(self.ec2, method)(**kwargs)
        except (ClientError, BotoCoreError) as e:
            raise classify(e) from None

    def _instances(self) -> list[Instance]:
        filters = [{"Name": f"tag:{TAG_FEDERATION}", "Values": [self.federation]}, {"Name": f"tag:{TAG_SITE}", "Values": [self.site]},
                   {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        out, token = [], None
        while True:
            page = self._call("describe_instances", Filters=filters, **({"NextToken": token} if token else {}))
            for res in page.get("Reservations", []):
                for inst in res.get("Instances", []):
                    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                    out.append(Instance(inst["InstanceId"], tags.get(TAG_GROUP, ""), tags.get(TAG_REQUEST, ""), inst["State"]["Name"] == "running"))
            token = page.get("NextToken")
            if not token:
                return out

    def _launch(self, request_id: str, group: NodeGroup, count: int, existing: list[str]) -> list[str]:
        if not self.spec.launch_template:
            raise ProviderFailure(INVALID, f"sites.{self.site}.provider.launch_template: required to launch instances "
                                           "(name the template infra/terraform/aws creates)")
        tags = [{"Key": k, "Value": v} for k, v in self.tags(group.name, request_id).items()]
        tags.append({"Key": "Name", "Value": f"{self.federation}-{self.site}-{group.name}"})
        args = {"MinCount": count, "MaxCount": count, "LaunchTemplate": {"LaunchTemplateName": self.spec.launch_template},
                "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}]}
        if group.instance_type:
            args["InstanceType"] = group.instance_type
        if group.spot:
            args["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time",
                                                                                    "InstanceInterruptionBehavior": "terminate"}}
        last = None
        for subnet in self.spec.subnet_ids or [None]:
            try:
                resp = self._call("run_instances", **args, **({"SubnetId": subnet} if subnet else {}))
                return [i["InstanceId"] for i in resp["Instances"]]
            except ProviderFailure as f:
                if f.kind != CAPACITY:
                    raise
                last = f  # this zone is out of it: the next subnet is another zone
        raise last

    def _terminate(self, ids: list[str]) -> None:
        try:
            self._call("terminate_instances", InstanceIds=ids)
        except ProviderFailure as f:
            if "InvalidInstanceID.NotFound" not in f.message:
                raise
            for i in ids:  # one of them is gone already: terminate the rest one by one
                try:
                    self._call("terminate_instances", InstanceIds=[i])
                except ProviderFailure as g:
                    if "InvalidInstanceID.NotFound" not in g.message:
                        raise
