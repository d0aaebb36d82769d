"""Faults against `fedctl up` as users run it: jobs lost, run twice, ghosted or orphaned.

    python benchmarks/faults.py [--runs 3] [--jobs 40] [--kills 3] [--seed 1]

Each run starts `fedctl up` on configs/local.yaml (a local IDC and a local burst site, so gangs
also run on burst workers), submits `--jobs` short jobs (1-4 GPUs, gangs of 1-2, `sleep 1-6`)
from a client thread through Ray's own `JobSubmissionClient`, and meanwhile:
- `crash` runs: `kill -9` the `fedctl up` process `--kills` times at random moments (so mid-cycle,
  mid-dispatch and mid-scale-up at random) and start it again on the same `--state`;
- the `cluster` run: end the controller's own Ray cluster under it once (its processes, SIGKILL);
  `fedctl up` notices and exits, and is started again (with a new cluster).
A submission the API could not take (it was down) is retried with the same submission id, as a
client would. When every job the journal knows has ended, the run counts:
- lost: submitted jobs that did not succeed;
- duplicated: jobs with more than one successful Ray job at the site (run twice);
- ghosted: jobs the journal still calls running, or admitted, at the end;
- orphaned: Ray jobs still running at the site for no live federation job, and processes of the
  federation's Ray cluster left after its final clean stop;
and, for the record, how many jobs were queued again and why (from the controller's log).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import requests
import yaml
from ray.job_submission import JobSubmissionClient

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))

from federation.runtime.localray import LocalCluster, free_port, temp_dir_for  # noqa: E402
from federation.store import Store  # noqa: E402

SHAPES = [("training", "2", "2"), ("training", "1", "4"), ("batch", "1", "1"), ("batch", "1", "2"), ("online", "1", "1")]


class Up:
    def __init__(self, tmp: Path, port: int):
        self.tmp, self.port, self.url = tmp, port, f"http://127.0.0.1:{port}"
        doc = yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())
        doc["api"]["listen"] = f"127.0.0.1:{port}"
        (tmp / "fed.yaml").write_text(yaml.safe_dump(doc))
        self.state = tmp / "state.sqlite"
        self.cluster = LocalCluster(temp_dir_for(str(self.state.resolve())), "", "", [])
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.tmp / f"up-{self.starts}.log", "w")  # noqa: SIM115 - the child holds it
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        self.proc = subprocess.Popen([sys.executable, "-m", "federation.cli", "up", "--config", str(self.tmp / "fed.yaml"),
                                      "--state", str(self.state)], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if requests.get(f"{self.url}/api/version", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        raise SystemExit(f"fedctl up did not start; see {log.name}")

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(180)


def submitter(up: Up, jobs: int, rng: random.Random, submitted: list[str], done: threading.Event) -> None:
    for i in range(jobs):
        queue, tasks, gpus = rng.choice(SHAPES)
        job_id = f"f-{i}"
        while True:
            try:
                JobSubmissionClient(up.url).submit_job(entrypoint=f"python -c \"import time; time.sleep({rng.uniform(1, 6):.1f})\"", submission_id=job_id,
                                  metadata={"queue": queue, "tasks": tasks, "gpus_per_task": gpus})
                break
            except Exception as e:  # the API is down (killed): retry the same id, as a client would
                if "exists already" in str(e):
                    break
                time.sleep(0.5)
        submitted.append(job_id)
        time.sleep(rng.uniform(0.1, 0.8))
    done.set()


def run(kind: str, jobs: int, kills: int, seed: int) -> dict:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="faults-") as d:
        up = Up(Path(d), free_port())
        up.start()
        began = time.time()
        submitted: list[str] = []
        done = threading.Event()
        threading.Thread(target=submitter, args=(up, jobs, rng, submitted, done), daemon=True).start()
        faults = 0
        for _ in range(kills if kind == "crash" else 1):
            time.sleep(rng.uniform(4, 15))
            if kind == "crash":
                up.kill9()
            else:
                up.cluster.stop(grace_s=0)  # the controller's cluster dies under it
                up.proc.wait(120)  # fedctl up notices and exits
            faults += 1
            up.start()
        done.wait(600)
        store = Store(up.state)
        deadline = time.time() + 600
        while time.time() < deadline and any(r.status not in ("SUCCEEDED", "FAILED", "STOPPED") for r in store.jobs()):
            time.sleep(1)
        rows = {r.id: r for r in store.jobs()}
        site = JobSubmissionClient(json.loads((Path(up.cluster.temp_dir) / "federation-cluster.json").read_text())["dashboard"],
                                   headers=up.cluster.headers())
        site_jobs = [j for j in site.list_jobs() if (j.metadata or {}).get("federation-job")]
        runs: dict[str, int] = {}
        for j in site_jobs:
            if str(j.status.value) == "SUCCEEDED":
                runs[j.metadata["federation-job"]] = runs.get(j.metadata["federation-job"], 0) + 1
        live = {i for i, r in rows.items() if r.status in ("PENDING", "ADMITTED", "RUNNING")}
        result = {
            "kind": kind, "seed": seed, "jobs": len(submitted), "faults": faults, "wall_s": round(time.time() - began),
            "requeued": dict(Counter(re.findall(r"requeued \((\w+)\)", Path(f"{up.state}.log").read_text()))),
            "lost": sum(1 for i in submitted if i not in rows or rows[i].status != "SUCCEEDED"),
            "duplicated": sum(1 for n in runs.values() if n > 1),
            "ghosted": len(live),
            "orphaned_site_jobs": sum(1 for j in site_jobs if str(j.status.value) in ("PENDING", "RUNNING") and j.metadata["federation-job"] not in live),
        }
        up.stop()
        result["orphaned_processes"] = len(up.cluster.processes())
        up.cluster.stop()
        return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3, help="crash runs (each also seeds the next)")
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    results = [run("crash", a.jobs, a.kills, a.seed + i) for i in range(a.runs)] + [run("cluster", a.jobs, 1, a.seed + a.runs)]
    cols = list(results[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in results:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
