"""Python's cyclic garbage collector and the federation's long-lived state.

A full collection walks every object the collector tracks. A controller or a replay holds its
whole world (in `fedctl bench scale`: 50,000 waiting jobs, 10,000 nodes, 1,000 queues, ~170,000
tracked objects and millions of references between them), and a full cycle leaves enough new
objects behind to set off one or two full collections of it, ~150-200 ms each, 15-18% of the
cycle. Nearly all of that state lives on from cycle to cycle. So each shell, before each cycle,
freezes what is tracked (`gc.freeze`: out of the collector's walks, still freed by reference
counting as usual, in O(1)) and, once every COLLECT_EVERY_S of the process's time, unfreezes and
collects it all, so what is garbage only in reference cycles is reclaimed all the same, at most
that much later (Instagram's use of `gc.freeze`, with a timer). No decision depends on it.
"""

from __future__ import annotations

import gc
import time

#: how long cyclic garbage may wait: the full collection it takes (~200 ms at the scale above)
#: is paid once a minute instead of in every full cycle
COLLECT_EVERY_S = 60.0

_collected_s = time.monotonic()  # one timer for the process, however many shells run in it


def settle() -> None:
    """Before a cycle: freeze what is tracked now; once a period, collect everything first."""
    global _collected_s
    now = time.monotonic()
    if now - _collected_s >= COLLECT_EVERY_S:
        gc.unfreeze()
        gc.collect()
        _collected_s = now
    gc.freeze()
