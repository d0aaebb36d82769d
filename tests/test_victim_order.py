"""What reclaim may take (`Reclaimable`) is put in victim order lazily, as far as searches read:
every reader must see the order a full sort gives, however far it reads and however readers
interleave, and the earliest young start must be the one a scan finds."""

from __future__ import annotations

import random
from itertools import islice

import pytest

from federation.model import RunningJob, TaskPlacement
from federation.preemption import Reclaimable, _victim_order

from .builders import job


def _running(rng: random.Random, n: int) -> list[RunningJob]:
    out = []
    for i in range(n):
        spec = job(f"j{i:03d}", rng.choice("abc"), gpus=rng.choice([0.5, 1, 2]), priority=rng.choice([50, 100, 100, 200]),
                   preemptible=rng.random() > 0.1)
        tasks = rng.randint(1, 3)
        out.append(RunningJob(spec, rng.choice(["idc", "aws"]), tuple(TaskPlacement(f"n{t}", (0,)) for t in range(tasks)),
                              started_s=float(rng.randint(0, 20)), preempting=rng.random() < 0.1))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_every_reader_sees_the_full_sort_however_far_and_interleaved(seed):
    rng = random.Random(seed)
    running = _running(rng, rng.randint(0, 60))
    sites = {"idc"}
    expected = sorted((r for r in running if not r.preempting and r.spec.preemptible and r.site in sites), key=_victim_order)
    rec = Reclaimable(running, sites)
    readers = [rec.ordered() for _ in range(3)]
    seen: list[list[RunningJob]] = [[] for _ in readers]
    while readers:  # each reader reads a few at a time, in turns, some stopping early
        i = rng.randrange(len(readers))
        got = list(islice(readers[i], rng.randint(1, 7)))
        seen[i] += got
        if not got or rng.random() < 0.1:
            assert seen[i] == expected[:len(seen[i])]
            readers.pop(i), seen.pop(i)
    assert list(rec.ordered()) == expected


@pytest.mark.parametrize("seed", range(20))
def test_the_first_young_start_is_the_earliest_the_predicate_takes(seed):
    rng = random.Random(seed)
    running = _running(rng, rng.randint(0, 60))
    rec = Reclaimable(running, {"idc", "aws"})
    list(islice(rec.ordered(), rng.randint(0, 30)))  # some already read into order
    takes = lambda r: r.spec.queue != "a"  # noqa: E731
    for after in {-1.0, 99.0} | {r.started_s - d for r in running for d in (0.0, 0.5)}:
        starts = [r.started_s for r in running if not r.preempting and r.spec.preemptible and r.started_s > after and takes(r)]
        assert rec.first_start_after(after, takes) == (min(starts) if starts else None)
