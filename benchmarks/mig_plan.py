"""Planning a site of 512 MIG GPUs for a mixed demand of 7 profiles (target: under 1 s).

    python benchmarks/mig_plan.py
"""

from __future__ import annotations

import random
import time

from federation.mig.planner import plan, table


def main(gpus: int = 512, seed: int = 0) -> None:
    rng = random.Random(seed)
    t = table("A100-80GB")
    t0 = time.perf_counter()
    table.cache_clear()
    t = table("A100-80GB")
    enum_s = time.perf_counter() - t0
    # a site half partitioned already, with a third of its instances busy
    current = []
    for _ in range(gpus):
        lay = rng.choice(t.layouts) if rng.random() < 0.5 else ()
        current.append([{"profile": p, "start": s, "busy": rng.random() < 0.33} for p, s in lay])
    demand = {p: rng.randint(20, 300) for p in t.profiles}  # all 7 profiles
    t0 = time.perf_counter()
    r = plan("A100-80GB", gpus, demand, current)
    plan_s = time.perf_counter() - t0
    print(f"enumerated {len(t.layouts)} A100-80GB layouts in {enum_s * 1000:.0f} ms (once, then cached)")
    print(f"planned {gpus} GPUs for {sum(demand.values())} instances of {len(demand)} profiles in {plan_s * 1000:.0f} ms: "
          f"satisfied {sum(r.satisfied.values())}, unsatisfied {sum(r.unsatisfied.values())}, reconfigured {r.reconfigured_gpus} GPUs")


if __name__ == "__main__":
    main()
