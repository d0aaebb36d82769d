"""The interface every site kind's provider implements.

Contract (the shape of Ray autoscaler v2's cloud interface):
- `request(request_id, group, count)` asks for capacity and returns at once; it is idempotent
  per request id (asking twice with one id starts the nodes once).
- `list_nodes()` reports the nodes that are up and can hold work, each with the request that
  made it; capacity that never arrives simply never shows up here (the caller times it out).
- `release(names)` gives nodes back; releasing a node that is gone is not an error.
- Problems come back as data (`errors()`), classified once at this edge, never as exceptions
  in the controller's loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from federation.model import NodeGroup


@dataclass(frozen=True)
class ProvidedNode:
    name: str
    site: str
    group: str
    request_id: str


@dataclass(frozen=True)
class ProviderError:
    request_id: str
    kind: str  # Transient | Capacity | Quota | Auth | InvalidRequest
    message: str


class Provider(ABC):
    @abstractmethod
    def request(self, request_id: str, group: NodeGroup, count: int) -> None: ...

    @abstractmethod
    def list_nodes(self) -> list[ProvidedNode]: ...

    @abstractmethod
    def release(self, names: list[str]) -> None: ...

    def errors(self) -> list[ProviderError]:
        return []
