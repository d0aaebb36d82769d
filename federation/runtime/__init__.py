"""The live controller; inside a dispatched job, `federation.runtime.gang()` pins its tasks and
`federation.runtime.mig_device()` names a MIG task's slice."""

from federation.runtime.pinning import allocation, gang, mig_device

__all__ = ["allocation", "gang", "mig_device"]
