"""The MIG tide in the simulator: inference on 1g slices by day, training on whole GPUs at night.

    python benchmarks/mig_tide.py [--jobs 600] [--days 2] [--seed 3]

Runs configs/mig-tide.yaml (10 nodes x 8 A100-80GB, MIG enabled; a day window slicing 4 GPUs
into 7 x 1g.10gb; a warm pool of 4 idle 1g.10gb) as it is, without the warm pool, without
either, and with neither but a forecast pre-warm (15 min ahead), on one generated trace; prints reconfigurations, GPU-seconds spent draining, inference
warm and cold starts (a cold start waited for a reconfiguration), waits and the MIG invariants.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import yaml

from federation.config import parse
from federation.simulation.engine import SimOptions
from federation.simulation.run import simulate
from federation.simulation.traces import generate, read_jsonl

CONFIG = Path(__file__).parent.parent / "configs" / "mig-tide.yaml"


def variants() -> dict[str, str]:
    base = yaml.safe_load(CONFIG.read_text())
    no_warm = json.loads(json.dumps(base))
    no_warm["policies"]["mig"]["warm_pool"] = {}
    bare = json.loads(json.dumps(no_warm))
    bare["policies"]["tidal"] = []
    learned = json.loads(json.dumps(bare))
    learned["policies"]["tidal"] = [{"name": "prewarm", "forecast": {"history_days": 14, "lead_s": 900}}]
    return {"window + warm pool": CONFIG.read_text(), "window only": yaml.safe_dump(no_warm), "neither": yaml.safe_dump(bare),
            "forecast only": yaml.safe_dump(learned)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=600)
    ap.add_argument("--days", type=float, default=2)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    recs = generate({"inference": "online", "training": "research", "batch": "research"}, jobs=a.jobs, days=a.days, seed=a.seed,
                    inference_mig="1g.10gb")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "tide.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        print(f"{a.jobs} jobs over {a.days:g} days, seed {a.seed}: {sum(1 for r in recs if r.get('mig_profile'))} on 1g.10gb")
        for name, text in variants().items():
            fed = parse(text, "mig-tide.yaml")
            t0 = time.perf_counter()
            rep, _ = simulate(fed, read_jsonl(path, fed), None, SimOptions(seed=1), html=False)
            m, q = rep["mig"], rep["per_queue"]
            fc = m.get("forecast")
            learned = f"; forecast MAE {fc['profile_mae']} (last hour {fc['last_hour_mae']}) over {fc['scored_hours']} h" if fc else ""
            print(f"{name:20s}: {m['reconfigurations']} reconfigurations, {m['drains']} drains ({m['drain_gpu_s']:.0f} GPU-s), "
                  f"warm {m['warm_starts']} / cold {m['cold_starts']}; online wait p99 {q['online']['wait_s']['p99']:.0f} s, "
                  f"research wait p50 {q['research']['wait_s']['p50']:.0f} s; completed {rep['jobs']['completed']}/{rep['jobs']['submitted']}; "
                  f"mig_violations {rep['invariants']['mig_violations']}, overcommitted {rep['invariants']['overcommitted_nodes']}; "
                  f"{time.perf_counter() - t0:.1f} s{learned}")


if __name__ == "__main__":
    main()
