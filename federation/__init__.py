"""gpu-federation: federate GPU capacity across an on-premises cluster and public clouds."""

__version__ = "0.1.0"
