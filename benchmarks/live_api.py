"""The live API beside Ray's own: submit-to-RUNNING latency, and submissions per second with 5,000 queued.

    python benchmarks/live_api.py [--latency-jobs 10] [--queued 5000] [--measured 1000] [--clients 8]

Starts `fedctl up` on a copy of configs/local.yaml (a local Ray cluster with logical GPUs, the
controller ticking every second, the API on 127.0.0.1:18266) with one more queue, `parked`, capped
at one GPU. Then, through Ray's own `JobSubmissionClient`:

1. first, the stock client's own ceiling: `--measured` submissions from `--clients` threads
   against a server that does nothing but answer (another process, as `fedctl up` is), so the
   client's cost on this machine is known apart from the federation's;
2. latency: the same one-GPU job (`sleep 2`) is submitted alternately to the federation and
   directly to the site's Ray dashboard, and its status polled every 20 ms until RUNNING;
3. throughput: one job fills `parked`, then `--queued` one-GPU jobs are submitted to it (they
   queue: ExceedsCapability), then `--measured` more from `--clients` threads, timed one by one
   while at least `--queued` jobs wait: once with the stock client, once posting the same body
   over kept-alive connections. The load runs on the same 2 cores as the server and Ray.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
import yaml
from ray.job_submission import JobStatus, JobSubmissionClient

ROOT = Path(__file__).parent.parent
PORT = 18266


def config(tmp: Path) -> Path:
    doc = yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())
    doc["api"]["listen"] = f"127.0.0.1:{PORT}"
    doc["queues"].append({"name": "parked", "deserved": {"gpu": 1}, "capability": {"gpu": 1}, "sites": ["local-idc"]})
    path = tmp / "bench.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def start(tmp: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen([sys.executable, "-m", "federation.cli", "up", "--config", str(config(tmp)), "--state", str(tmp / "state.sqlite")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    ray_address = None
    for line in proc.stdout:
        m = re.search(r"local Ray cluster at (https?://[^\s,:]+:\d+)", line)
        if m and ray_address is None:  # the IDC site's, not a burst site's that starts after it
            ray_address = m.group(1)
        if "serving the Ray Jobs API" in line:
            break
    if ray_address is None:
        proc.kill()
        raise SystemExit("fedctl up did not start")
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # keep its pipe drained
    return proc, ray_address


def site_headers(tmp: Path) -> dict:
    """The site's Ray cluster runs with token auth: the direct client carries its token."""
    from federation.runtime.localray import LocalCluster, temp_dir_for

    return LocalCluster(temp_dir_for(str((tmp / "state.sqlite").resolve())), "", "", []).headers()


def until_running(client: JobSubmissionClient, job: str) -> None:
    while (s := client.get_job_status(job)) not in (JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.FAILED):
        time.sleep(0.02)
    if s == JobStatus.FAILED:
        raise SystemExit(f"{job} failed: {client.get_job_info(job).message}")


def until_done(client: JobSubmissionClient, job: str) -> None:
    while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        time.sleep(0.1)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * (len(xs) - 1)))]


# Answers what JobSubmissionClient.submit_job asks (GET /api/version before every submission
# that names GPUs, then the POST) and nothing else.
NULL_SERVER = """
import sys
from aiohttp import web
app = web.Application()
async def version(_):
    return web.json_response({"version": "2", "ray_version": "2.40.0", "ray_commit": "", "session_name": "null"})
async def submit(req):
    body = await req.json()
    return web.json_response({"job_id": body.get("submission_id"), "submission_id": body.get("submission_id")})
app.router.add_get("/api/version", version)
app.router.add_post("/api/jobs/", submit)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=lambda *_: print("ready", flush=True))
"""


def client_ceiling(measured: int, clients: int) -> None:
    from federation.runtime.localray import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", NULL_SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()
        client = JobSubmissionClient(f"http://127.0.0.1:{port}")

        def one(i: int) -> float:
            t0 = time.perf_counter()
            client.submit_job(entrypoint="echo queued", entrypoint_num_gpus=1, metadata={"queue": "parked"}, submission_id=f"n-{i}")
            return time.perf_counter() - t0

        with ThreadPoolExecutor(clients) as pool:
            t0 = time.perf_counter()
            times = list(pool.map(one, range(measured)))
            span = time.perf_counter() - t0
        print(f"{measured}, stock JobSubmissionClient, {clients} threads, against a server that only answers: {measured / span:.0f} submissions/s, "
              f"latency p50 {pct(times, 0.5) * 1000:.1f} ms, p99 {pct(times, 0.99) * 1000:.1f} ms")
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency-jobs", type=int, default=10)
    ap.add_argument("--queued", type=int, default=5000)
    ap.add_argument("--measured", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=8)
    a = ap.parse_args()
    client_ceiling(a.measured, a.clients)  # first: nothing else runs yet (a Ray cluster takes a while to wind down)
    with tempfile.TemporaryDirectory() as d:
        proc, ray_address = start(Path(d))
        try:
            fed, direct = JobSubmissionClient(f"http://127.0.0.1:{PORT}"), JobSubmissionClient(ray_address, headers=site_headers(Path(d)))
            lat = {"federation": [], "direct": []}
            for i in range(a.latency_jobs):
                for name, client in (("federation", fed), ("direct", direct)):
                    t0 = time.perf_counter()
                    job = client.submit_job(entrypoint="python -c 'import time; time.sleep(2)'", entrypoint_num_gpus=1,
                                            metadata={"queue": "batch"}, submission_id=f"lat-{name}-{i}")
                    until_running(client, job)
                    lat[name].append(time.perf_counter() - t0)
                    until_done(client, job)
            for name, xs in lat.items():
                print(f"submit to RUNNING, {name:10s}: p50 {statistics.median(xs) * 1000:7.1f} ms, max {max(xs) * 1000:7.1f} ms ({len(xs)} jobs)")
            ratio = statistics.median(lat["federation"]) / statistics.median(lat["direct"])
            print(f"  federation adds {(statistics.median(lat['federation']) - statistics.median(lat['direct'])) * 1000:.1f} ms at p50 (ratio {ratio:.2f})")

            until_running(fed, fed.submit_job(entrypoint="sleep 3600", entrypoint_num_gpus=1, metadata={"queue": "parked"}, submission_id="filler"))

            def stock(i: int) -> float:
                t0 = time.perf_counter()
                fed.submit_job(entrypoint="echo queued", entrypoint_num_gpus=1, metadata={"queue": "parked"}, submission_id=f"q-{i}")
                return time.perf_counter() - t0

            sessions = threading.local()

            def keep_alive(i: int) -> float:
                # the body JobSubmissionClient posts, over one kept-alive connection per client thread
                # (the stock client opens a connection per call, which costs the client more than the server)
                if not hasattr(sessions, "http"):
                    sessions.http = requests.Session()
                http = sessions.http
                t0 = time.perf_counter()
                r = http.post(f"http://127.0.0.1:{PORT}/api/jobs/", json={"entrypoint": "echo queued", "entrypoint_num_gpus": 1,
                                                                          "metadata": {"queue": "parked"}, "submission_id": f"q-{i}"})
                r.raise_for_status()
                return time.perf_counter() - t0

            with ThreadPoolExecutor(a.clients) as pool:
                t0 = time.perf_counter()
                list(pool.map(keep_alive, range(a.queued)))
                fill_s = time.perf_counter() - t0
                print(f"queued {a.queued} jobs in {fill_s:.1f} s ({a.queued / fill_s:.0f}/s)")
                n = a.queued
                for name, fn in (("stock JobSubmissionClient", stock), ("kept-alive HTTP", keep_alive)):
                    t0 = time.perf_counter()
                    times = list(pool.map(fn, range(n, n + a.measured)))
                    span = time.perf_counter() - t0
                    print(f"{a.measured} more, {name}, {a.clients} threads, while {n}+ wait: {a.measured / span:.0f} submissions/s, "
                          f"latency p50 {pct(times, 0.5) * 1000:.1f} ms, p99 {pct(times, 0.99) * 1000:.1f} ms")
                    n += a.measured
            listed = fed.get_job_status("q-0")
            print(f"a queued job's status: {listed}")
        finally:
            proc.terminate()
            proc.wait(timeout=180)


if __name__ == "__main__":
    main()
