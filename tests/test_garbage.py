"""The shells freeze what is tracked before each cycle and collect it all once a period
(federation.garbage): garbage in reference cycles is reclaimed all the same, only later."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

from federation import garbage


class _Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the collector frees it


def test_cyclic_garbage_frozen_before_a_cycle_is_collected_once_the_period_is_over(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(garbage, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(garbage, "_collected_s", clock[0])
    try:
        obj = _Node()
        gone = weakref.ref(obj)
        garbage.settle()
        assert gc.get_freeze_count() > 0
        del obj
        gc.collect()
        assert gone() is not None  # frozen: out of the collector's walks
        clock[0] += garbage.COLLECT_EVERY_S - 1
        garbage.settle()
        assert gone() is not None
        clock[0] += 1
        garbage.settle()  # the period is over: everything unfrozen and collected, then frozen again
        assert gone() is None
        assert garbage._collected_s == clock[0]
    finally:
        gc.unfreeze()


def test_acyclic_objects_frozen_are_still_freed_when_nothing_refers_to_them():
    try:
        obj = type("Plain", (), {})()
        gone = weakref.ref(obj)
        garbage.settle()
        del obj
        assert gone() is None
    finally:
        gc.unfreeze()
