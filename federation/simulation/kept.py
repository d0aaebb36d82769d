"""A dict that hands out its values as one tuple, kept until it changes."""

from __future__ import annotations


class Kept(dict):
    """A dict whose values each cycle observes as one tuple, rebuilt only after a change: nodes
    rarely change, running jobs not on arrivals, and at 10,000 nodes building both every cycle
    was a large share of a replay."""

    __slots__ = ("_view",)

    def __init__(self):
        super().__init__()
        self._view: tuple | None = None

    def view(self) -> tuple:
        if self._view is None:
            self._view = tuple(self.values())
        return self._view

    def __setitem__(self, key, value):
        self._view = None
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self._view = None
        super().__delitem__(key)

    def pop(self, *args):
        self._view = None
        return super().pop(*args)

    def setdefault(self, *args):
        self._view = None
        return super().setdefault(*args)

    def update(self, *args, **kwargs):
        self._view = None
        super().update(*args, **kwargs)

    def popitem(self):
        self._view = None
        return super().popitem()

    def clear(self):
        self._view = None
        super().clear()
