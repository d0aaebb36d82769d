"""The live controller; inside a dispatched job, `federation.runtime.gang()` pins its tasks."""

from federation.runtime.pinning import allocation, gang

__all__ = ["allocation", "gang"]
