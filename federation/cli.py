"""`fedctl`: the command line. Each command is a thin shell over a library call.

Users never see a traceback: project errors print their message (exit 2 for bad input), and an
unexpected error prints one line (set FEDCTL_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from federation import config as config_mod
from federation.console import err, out, print_json, progress, redraw
from federation.errors import ConfigError, FederationError, Unreachable
from federation.mig.catalog import MAX_PLAN_GPUS

app = typer.Typer(no_args_is_help=True, help="Federate GPU capacity across an IDC and public clouds.")
mig_app = typer.Typer(no_args_is_help=True, help="MIG profiles and partition planning.")
app.add_typer(mig_app, name="mig")
trace_app = typer.Typer(no_args_is_help=True, help="Job traces.")
app.add_typer(trace_app, name="trace")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (figures in benchmarks/README.md).")
app.add_typer(bench_app, name="bench")
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="FEDERATION_TOKEN",
                                             help="A token from api.tokens_file, when the federation has one (or FEDERATION_TOKEN).")]


def api_get(address: str, path: str, token: str | None, method: str = "GET"):
    """Call the federation's API; a clear error when nobody answers or the token is refused."""
    import requests

    try:
        r = requests.request(method, f"{address}{path}", headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=10)
    except requests.RequestException as e:
        raise Unreachable(f"--address: no federation answers at {address} ({e}); is fedctl up running?") from None
    if r.status_code in (401, 403):
        raise FederationError(f"--token: the federation at {address} said {r.status_code}: {r.text}")
    return r


ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="Federation config (default: the embedded configs/local.yaml).")]


def _version(value: bool) -> None:
    if value:
        import ray

        from federation.runtime.metrics import package_version

        typer.echo(f"gpu-federation {package_version()} (Ray {ray.__version__}, Python {sys.version.split()[0]})")
        raise typer.Exit(0)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False) -> None:
    """Federate GPU capacity across an IDC and public clouds."""


def load_config(path: Path | None):
    """Load a config or exit 2 with one line per problem."""
    return config_mod.load(path or config_mod.default_config_path())


@app.command()
def validate(files: Annotated[list[Path], typer.Argument(help="Config files to check.")],
             explain: Annotated[bool, typer.Option("--explain", help="Print what each queue effectively gets, resource by resource.")] = False) -> None:
    """Check config files: exit 0 when all are valid, 2 with `FILE:LINE:COLUMN: path: message` lines."""
    bad = False
    for f in files:
        try:
            fed = config_mod.load(f)
        except ConfigError as e:
            bad = True
            for p in e.problems:
                typer.echo(str(p))
            continue
        err.print(f"{f}: valid ({len(fed.sites)} sites, {len(fed.queues)} queues)")
        if explain:
            from federation.explain import explain_quotas

            typer.echo(explain_quotas(fed))
    raise typer.Exit(2 if bad else 0)


@app.command()
def schema(markdown: Annotated[bool, typer.Option("--markdown", help="The config reference (docs/config.md) instead.")] = False) -> None:
    """Print the config's JSON Schema, for editors (e.g. yaml-language-server's `$schema`)."""
    if markdown:
        from federation.config_reference import markdown as reference

        typer.echo(reference(), nl=False)
        return
    from federation.schema import FederationSpec

    print_json(FederationSpec.model_json_schema())


@app.command()
def simulate(
    config: Annotated[Path, typer.Option("--config", "-c", help="Federation config.")],
    trace: Annotated[Path, typer.Option("--trace", help="Job trace (JSONL, or an openb pod CSV).")],
    out: Annotated[Path, typer.Option("--out", help="Directory for report.json, events.jsonl, report.html.")],
    trace_format: Annotated[str, typer.Option("--trace-format", help="jsonl or openb.")] = "jsonl",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    start: Annotated[str | None, typer.Option("--start", help="Wall-clock time of t=0 in the federation's timezone.")] = None,
    qos_queue: Annotated[list[str] | None, typer.Option("--qos-queue", help="openb: QOS=QUEUE (e.g. LS=online, *=batch).")] = None,
    skip_bad_lines: Annotated[bool, typer.Option("--skip-bad-lines", help="Skip malformed trace lines (counted in the report).")] = False,
    no_html: Annotated[bool, typer.Option("--no-html", help="Skip report.html.")] = False,
    outage: Annotated[list[str] | None, typer.Option("--outage", help="SITE@AT_S+FOR_S: the site does not answer for FOR_S seconds from AT_S (repeatable).")] = None,
) -> None:
    """Replay a trace through the real scheduling core on a virtual clock."""
    from federation.simulation.engine import SimOptions, parse_outage
    from federation.simulation.run import parse_start
    from federation.simulation.run import simulate as run_sim

    fed = load_config(config)
    outages = tuple(parse_outage(o, fed) for o in outage or ())
    trace_obj = _read_trace(fed, trace, trace_format, qos_queue, skip_bad_lines)
    with progress("simulating", "jobs done", len(trace_obj.jobs)) as update:
        opts = SimOptions(seed=seed, start=parse_start(start), progress=lambda t, done, total: update(done), outages=outages)
        report, _ = run_sim(fed, trace_obj, out, opts, html=not no_html)
    err.print(f"wrote {out}/report.json, events.jsonl{'' if no_html else ', report.html'} in {report['wall_s']} s")
    print_json({k: report[k] for k in ("jobs", "wait_s", "gpu_utilization", "invariants")})


def _read_trace(fed, path: Path, fmt: str, qos_queue: list[str] | None, skip_bad_lines: bool):
    from federation.simulation.traces import read_jsonl, read_openb

    if fmt == "jsonl":
        return read_jsonl(path, fed, skip_bad_lines)
    if fmt == "openb":
        mapping: dict[str, str] = {}
        for item in qos_queue or []:
            k, sep, v = (x.strip() for x in item.partition("="))
            if not sep or not k or not v:
                raise FederationError(f"--qos-queue: {item!r} is not QOS=QUEUE")
            if k in mapping:
                raise FederationError(f"--qos-queue: {k} is mapped twice")
            if v not in fed.leaf_queues:
                raise FederationError(f"--qos-queue: {item!r}: {v!r} is not a leaf queue; they are {', '.join(fed.leaf_queues)}")
            mapping[k] = v
        return read_openb(path, fed, mapping, skip_bad_lines)
    raise FederationError(f"--trace-format: {fmt!r} is not jsonl or openb")


@trace_app.command("generate")
def trace_generate(
    out: Annotated[Path, typer.Option("--out", help="JSONL file to write.")],
    jobs: Annotated[int, typer.Option("--jobs", min=1)] = 1000,
    days: Annotated[float, typer.Option("--days", help="The span the submissions spread over (more than 0).")] = 1.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    pattern: Annotated[str, typer.Option("--pattern", help="tidal or uniform.")] = "tidal",
    inference_queue: Annotated[str, typer.Option("--inference-queue")] = "online",
    training_queue: Annotated[str, typer.Option("--training-queue")] = "research-nlp",
    batch_queue: Annotated[str, typer.Option("--batch-queue")] = "batch",
    inference_mig: Annotated[str | None, typer.Option("--inference-mig", help="Run inference on MIG instances of this profile, e.g. 1g.10gb.")] = None,
    inference_mig_share: Annotated[float, typer.Option("--inference-mig-share", min=0, max=1, help="The share of inference on --inference-mig.")] = 1.0,
    max_gang_nodes: Annotated[int, typer.Option("--max-gang-nodes", min=1, help="The most whole nodes a training gang spans.")] = 8,
) -> None:
    """Write a synthetic trace: a diurnal tide of inference by day, training and batch by night."""
    from federation.simulation.traces import generate

    if pattern not in ("tidal", "uniform"):
        raise FederationError(f"--pattern: {pattern!r} is not tidal or uniform")
    if not 0 < days < 3650:  # NaN fails this too; a negative span wrote submit times below 0 that simulate refused
        raise FederationError(f"--days: {days!r} is not a number of days between 0 and 3650")
    records = generate({"inference": inference_queue, "training": training_queue, "batch": batch_queue}, jobs=jobs, days=days, seed=seed, pattern=pattern,
                       inference_mig=inference_mig, inference_mig_share=inference_mig_share, max_gang_nodes=max_gang_nodes)
    out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    err.print(f"wrote {len(records)} jobs to {out}")


@app.command()
def compare(a: Annotated[Path, typer.Argument(help="A simulation output directory.")], b: Annotated[Path, typer.Argument(help="Another one.")],
            as_json: Annotated[bool, typer.Option("--json", help="Print {figure: {a, b, change}} as JSON.")] = False) -> None:
    """Two simulation reports side by side (a what-if)."""
    from federation.simulation.compare import compare_figures, compare_reports

    if as_json:
        print_json(compare_figures(a, b))
        return
    out().print(compare_reports(a, b))


@app.command()
def up(
    config: ConfigOpt = None,
    state: Annotated[Path, typer.Option("--state", help="The controller's SQLite journal.")] = Path("federation-state.sqlite"),
    cycle_s: Annotated[float, typer.Option("--cycle-s", help="Seconds between scheduling cycles.")] = 1.0,
) -> None:
    """Start the controller and serve the Ray Jobs API (local Ray cluster for local sites)."""
    from federation.runtime.up import run_up

    run_up(load_config(config), state, cycle_s, lambda m: err.print(m, markup=False, highlight=False))


provider_app = typer.Typer(no_args_is_help=True, help="Site providers (cloud SDKs, Terraform, Kubernetes).")
app.add_typer(provider_app, name="provider")


@provider_app.command("check")
def provider_check(
    site: Annotated[str, typer.Option("--site", help="The site to check.")],
    config: ConfigOpt = None,
    count: Annotated[int, typer.Option("--count", min=1, help="Nodes to request.")] = 1,
    state: Annotated[Path, typer.Option("--state", help="The controller's SQLite journal (its request ledger).")] = Path("federation-state.sqlite"),
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="How long to wait for the nodes.")] = 900.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Request N nodes of the site's first scalable node group, wait until listed, release them."""
    from federation.store import RequestLedger
    from providers.check import check
    from providers.factory import build_provider, terraform_work_dir

    fed = load_config(config)
    try:
        s = fed.site(site)
    except KeyError:
        raise FederationError(f"--site: no site {site!r} in {fed.source} (sites: {', '.join(x.name for x in fed.sites)})") from None
    group = next((g for g in s.node_groups if g.elastic), None)
    if group is None:
        raise FederationError(f"--site: {site} has no node group with max_nodes > 0; a fixed fleet cannot be asked for nodes")
    provider = build_provider(fed, s, RequestLedger(state), terraform_work_dir(state))
    if provider is None:
        raise FederationError(f"--site: {site} is a {s.kind} site; provider check needs an aws, gcp or kubernetes provider")
    try:
        report, problems = check(provider, site, group, count, timeout_s=timeout_s, log=lambda m: err.print(m, markup=False, highlight=False))
    finally:
        provider.close()
    for p in problems:
        print(p, file=sys.stderr)
    if as_json:
        print_json(report)
    else:
        out().print(f"{site}: requested {count}, listed {len(report['listed'])}, released {len(report['released'])}, "
                    f"left running {report['left_running'] or 'nothing'}")
    if report["left_running"] or len(report["listed"]) < count:
        raise typer.Exit(1)


site_app = typer.Typer(no_args_is_help=True, help="Burst sites whose whole Ray cluster the Terraform module makes.")
app.add_typer(site_app, name="site")
StateOpt = Annotated[Path, typer.Option("--state", help="The controller's SQLite journal (the Terraform states live beside it).")]


def _cluster_site(config: Path | None, site: str, state: Path):
    from providers.factory import cluster_provider

    fed = load_config(config)
    try:
        s = fed.site(site)
    except KeyError:
        raise FederationError(f"SITE: no site {site!r} in {fed.source} (sites: {', '.join(x.name for x in fed.sites)})") from None
    return cluster_provider(fed, s, state)


@contextmanager
def _cloud_step(site: str, provider):
    """A failed Terraform run is the cloud's answer, not bad input: its kind and text, exit 1."""
    from providers.errors import ProviderFailure

    try:
        yield
    except ProviderFailure as f:
        print(f"error: site {site}: {f.kind}: {f.message}", file=sys.stderr)
        raise typer.Exit(1) from None
    finally:
        provider.close()


@site_app.command("up")
def site_up(site: Annotated[str, typer.Argument(help="The site, as the config names it.")], config: ConfigOpt = None,
            state: StateOpt = Path("federation-state.sqlite"),
            as_json: Annotated[bool, typer.Option("--json", help="Print the module's outputs as JSON.")] = False) -> None:
    """Apply the site's cluster (network, security group, instance profile, Ray head); idempotent."""
    provider = _cluster_site(config, site, state)
    with _cloud_step(site, provider), err.status(f"terraform apply for site {site} (a few minutes on a cloud)"):
        outputs = provider.up()
    if as_json:
        print_json(outputs)
        return
    out().print(f"{site}: Ray head at {outputs.get('ray_address')}, Jobs API {outputs.get('jobs_api_url')}, "
                f"{len(outputs.get('nodes') or {})} worker(s); `fedctl up` dispatches there", markup=False, highlight=False)


@site_app.command("down")
def site_down(site: Annotated[str, typer.Argument(help="The site, as the config names it.")], config: ConfigOpt = None,
              state: StateOpt = Path("federation-state.sqlite"),
              force: Annotated[bool, typer.Option("--force", help="Destroy the cluster even with workers in it (their jobs end).")] = False) -> None:
    """Destroy everything the module made for the site; refuses while workers run unless --force."""
    provider = _cluster_site(config, site, state)
    with _cloud_step(site, provider):
        workers = sorted(provider.outputs().get("nodes") or {})
        if workers and not force:
            raise FederationError(f"SITE: {site} still has {len(workers)} worker(s) ({', '.join(workers[:5])}{' ...' if len(workers) > 5 else ''}); "
                                  "let the federation scale them in, or pass --force to end them and their jobs")
        with err.status(f"terraform destroy for site {site}"):
            provider.down()
    out().print(f"{site}: its cluster is gone", markup=False, highlight=False)


@app.command()
def status(address: Annotated[str, typer.Option("--address", help="The federation's API.")] = "http://127.0.0.1:8266",
           token: TokenOpt = None, as_json: Annotated[bool, typer.Option("--json", help="Print the status document (sites, queues, jobs, ...) as JSON.")] = False,
           watch: Annotated[float | None, typer.Option("--watch", min=0.5, help="Redraw every this many seconds until Ctrl-C.")] = None) -> None:
    """Queues, sites, running and waiting jobs (with their reasons), MIG layouts, cloud and spend, for a person."""
    try:
        doc = api_get(address, "/api/federation/status", token).json()
    except ValueError as e:
        raise Unreachable(f"--address: what answers at {address} is not a federation ({e})") from None
    if as_json:
        print_json({**doc, "jobs": {"pending": doc["pending"], "running": doc["running"]}})
        return
    from federation.status_view import renderables

    con = out()
    if watch is None:
        for item in renderables(doc):
            con.print(item)
        return
    redraw(con, lambda: renderables(api_get(address, "/api/federation/status", token).json()), watch)


@app.command()
def explain(
    job: Annotated[str, typer.Argument(help="The job's submission id.")],
    address: Annotated[str, typer.Option("--address", help="The federation's API.")] = "http://127.0.0.1:8266",
    token: TokenOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the explanation as JSON.")] = False,
) -> None:
    """Why a job is where it is: its status, pending reason, site and placements."""
    from urllib.parse import quote

    r = api_get(address, f"/api/federation/jobs/{quote(job, safe='')}/explain", token)
    if r.status_code == 404:
        raise FederationError(f"job {job!r} is not known to the federation at {address}")
    doc = r.json()
    if as_json:
        print_json(doc)
        return
    out().print(f"{doc['job']}: {doc['status']}" + (f" at {doc['site']}" if doc["site"] else ""))
    if doc["message"]:
        out().print(f"  {doc['message']}", markup=False)
    from federation.reasons import MEANING, Reason

    if doc["status"] == "PENDING" and doc.get("reason") in Reason.__members__:
        out().print(f"  {doc['reason']}: {MEANING[Reason(doc['reason'])]}", markup=False)
    for p in doc["placements"] or []:
        out().print(f"  task on {p['node']}, GPUs {p['gpus']}", markup=False)


queue_app = typer.Typer(no_args_is_help=True, help="Pause, drain or resume a queue (and the queues under it).")
app.add_typer(queue_app, name="queue")


def _stop_queue(name: str, action: str, address: str, token: str | None) -> None:
    from urllib.parse import quote

    r = api_get(address, f"/api/federation/queues/{quote(name, safe='')}/{action}", token, method="POST")
    if r.status_code != 200:
        raise FederationError(f"{name}: the federation at {address} said {r.status_code}: {r.text}")
    err.print({"pause": f"queue {name} paused: its waiting jobs stay waiting (QueuePaused); what runs goes on",
               "drain": f"queue {name} drained: nothing new starts, and what runs is stopped and queued again",
               "resume": f"queue {name} resumed"}[action])


AddressOpt = Annotated[str, typer.Option("--address", help="The federation's API.")]


@queue_app.command("pause")
def queue_pause(name: str, address: AddressOpt = "http://127.0.0.1:8266", token: TokenOpt = None) -> None:
    """Admit nothing more from the queue; what runs goes on (Kueue's stopPolicy Hold)."""
    _stop_queue(name, "pause", address, token)


@queue_app.command("drain")
def queue_drain(name: str, address: AddressOpt = "http://127.0.0.1:8266", token: TokenOpt = None) -> None:
    """Admit nothing more, and stop and requeue what runs (Kueue's HoldAndDrain)."""
    _stop_queue(name, "drain", address, token)


@queue_app.command("resume")
def queue_resume(name: str, address: AddressOpt = "http://127.0.0.1:8266", token: TokenOpt = None) -> None:
    """Let the queue's jobs run again."""
    _stop_queue(name, "resume", address, token)


tidal_app = typer.Typer(no_args_is_help=True, help="Tidal (time-window) policies.")
app.add_typer(tidal_app, name="tidal")


@tidal_app.command("preview")
def tidal_preview(
    config: ConfigOpt = None,
    start: Annotated[str | None, typer.Option("--from", help="Local start time, ISO 8601 (default: the next Monday 00:00).")] = None,
    hours: Annotated[int, typer.Option("--hours", min=1, max=24 * 14)] = 48,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The effective GPU quotas hour by hour, with the windows active in each hour."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    from rich.table import Table

    from federation.simulation.run import parse_start
    from policies.tidal import active_policies, effective_burst, effective_queues

    fed = load_config(config)
    tz = ZoneInfo(fed.timezone)
    today = datetime.now(tz).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    t0 = parse_start(start, "--from") or today + timedelta(days=(7 - today.weekday()) % 7 or 7)  # the next Monday, 00:00
    t0 = t0.replace(tzinfo=tz) if t0.tzinfo is None else t0.astimezone(tz)
    rows = []
    for h in range(hours):
        t = t0 + timedelta(hours=h)
        queues = effective_queues(fed, t)
        enabled, budget = effective_burst(fed, t)
        rows.append({"time": t.isoformat(timespec="minutes"), "windows": [p.name for p in active_policies(fed, t)],
                     "burst_budget_usd_per_hour": budget if enabled else 0.0,
                     "queues": {q.name: {"guarantee_gpu": q.guarantee.gpu, "deserved_gpu": q.deserved.gpu} for q in queues}})
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"effective quotas of {fed.name} ({fed.timezone}), guarantee/deserved GPUs")
    table.add_column("time")
    table.add_column("windows")
    for q in fed.queues:
        table.add_column(q.name)
    table.add_column("burst $/h")
    for r in rows:
        table.add_row(r["time"], ", ".join(r["windows"]) or "-", *(f"{v['guarantee_gpu']:g}/{v['deserved_gpu']:g}" for v in r["queues"].values()), f"{r['burst_budget_usd_per_hour']:g}")
    out().print(table)


@app.command()
def demo(
    config: ConfigOpt = None,
    simulate_only: Annotated[bool, typer.Option("--simulate", help="Replay the demo workload on a virtual clock instead.")] = False,
) -> None:
    """The main job on the embedded default: real Ray jobs through the federation, with a burst."""
    fed = load_config(config)
    if simulate_only:
        from federation.simulation.demo import run_demo as run_simulated

        run_simulated(fed, out())
        return
    from federation.runtime.demo import run_demo

    if not run_demo(fed, out()):
        raise typer.Exit(1)


@app.command()
def frag(
    nodes: Annotated[Path, typer.Option("--nodes", help="Node CSV (openb_node_list_gpu_node.csv).")],
    pods: Annotated[Path, typer.Option("--pods", help="Pod CSV (openb_pod_list_*.csv).")],
    policy: Annotated[str, typer.Option("--policy", help="The paper's random, dotprod, bestfit, packing, clustering or fgd; or fragmentation-aware, the scheduler's own placement.")],
    out: Annotated[Path, typer.Option("--out", help="CSV to write: arrived_pct,allocated_pct,frag_pct.")],
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seeds the node order and the pods' shuffle, as the published simulator's seed does (numpy's generator takes none below 0).")] = 42,
    tune: Annotated[float, typer.Option("--tune", help="Top the arrivals up (or cut them) to this x GPU capacity.")] = 1.3,
) -> None:
    """The FGD fill experiment (USENIX ATC'23 protocol) on the openb CSVs."""
    from federation.fragsim import POLICIES, run_frag, write_csv

    if policy not in POLICIES:
        raise FederationError(f"--policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if not 0 < tune <= 5:
        raise FederationError("--tune: give a factor between 0 and 5, e.g. 1.3")
    with progress(f"{policy}, seed {seed}", "pods", None) as update:
        rows = run_frag(nodes, pods, policy, seed, tune, progress=update)
    write_csv(rows, out)
    at100 = next(a for b, a, _ in rows if b == 100)
    err.print(f"{policy}, seed {seed}: {100 - at100:.2f}% of GPUs unallocated at 100% arrived; wrote {out}")


@bench_app.command("scale")
def bench_scale(
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Pending gangs at the start.")] = 50_000,
    nodes: Annotated[int, typer.Option("--nodes", min=3, help="Nodes of 8 GPUs, over 3 sites.")] = 10_000,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Incremental cycles of 100 new jobs.")] = 30,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    live: Annotated[bool, typer.Option("--live", help="Run the cycles as the live controller does: it hands over the running jobs each cycle, and its kept state is brought up to date from them.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The scheduling core at scale: admissions per second, incremental cycle time, and a full cycle over every waiting job."""
    from federation.bench.scale import run

    result = run(pending_jobs=jobs, nodes=nodes, rounds=rounds, seed=seed, live=live, log=lambda m: err.print(m))
    if as_json:
        print_json(result)


@mig_app.command("profiles")
def mig_profiles(
    gpu: Annotated[str, typer.Option("--gpu", help="GPU model, e.g. A100-80GB.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """The MIG profiles of a GPU model with their allowed placements (as `nvidia-smi mig -lgipp`)."""
    from federation.mig.catalog import CATALOG

    spec = CATALOG.get(gpu)
    if spec is None:
        raise FederationError(f"--gpu: {gpu!r} has no MIG profiles; MIG models are {sorted(CATALOG)}")
    doc = {
        "gpu": spec.gpu,
        "memory_slices": spec.memory_slices,
        "compute_slices": spec.compute_slices,
        "profiles": {p.name: {"compute": p.compute, "memory": p.memory, "max": p.max_count, "placements": p.placements} for p in spec.profiles.values()},
    }
    if as_json:
        print_json(doc)
        return
    from rich.table import Table

    table = Table(title=f"{spec.gpu}: {spec.compute_slices} compute / {spec.memory_slices} memory slices")
    for col in ("profile", "compute", "memory", "max", "placements"):
        table.add_column(col)
    for name, p in doc["profiles"].items():
        table.add_row(name, str(p["compute"]), str(p["memory"]), str(p["max"]), " ".join(f"{s}:{n}" for s, n in p["placements"]))
    out().print(table)


@mig_app.command("plan")
def mig_plan(
    gpu: Annotated[str, typer.Option("--gpu", help="GPU model, e.g. A100-80GB.")],
    gpus: Annotated[int, typer.Option("--gpus", min=0, max=MAX_PLAN_GPUS, help=f"How many GPUs to plan (a site's, at most {MAX_PLAN_GPUS:,}).")],
    demand: Annotated[str, typer.Option("--demand", help="NAME=COUNT[,NAME=COUNT...], e.g. 1g.10gb=7,3g.40gb=2.")],
    current: Annotated[Path | None, typer.Option("--current", help='JSON {"layouts": [[{"profile", "start", "busy"?}...] per GPU]}.')] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Target MIG layouts that meet the demand, never touching busy instances."""
    from federation.mig.planner import PlanError, plan
    from federation.mig.request import parse_demand, read_current

    wanted = parse_demand(demand)
    layouts = read_current(current) if current is not None else None
    try:
        result = plan(gpu, gpus, wanted, layouts)
    except PlanError as e:
        raise FederationError(str(e)) from None
    if as_json:
        print_json(result.to_dict())
        return
    # a line per GPU, written plainly: through rich (a Console a line, then one rendered text)
    # 100,000 GPUs took 60 s, then 13 s, to print
    console = out()
    console.file.write("".join(f"GPU {i}: " + (", ".join(f"{x['profile']}@{x['start']}" for x in lay) or "(no instances)") + "\n"
                               for i, lay in enumerate(result.layouts)))
    console.print(f"satisfied {result.satisfied}, unsatisfied {result.unsatisfied}, reconfigured {result.reconfigured_gpus} GPU(s)")


def main() -> None:
    try:
        code = app(standalone_mode=False)  # click returns the exit code instead of exiting
    except ConfigError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        sys.exit(2)
    except Unreachable as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(3)
    except FederationError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        sys.exit(130)
    except typer.exceptions.TyperException as e:  # usage errors: typer prints them as click does
        if hasattr(e, "show"):
            e.show()
        sys.exit(getattr(e, "exit_code", 2))
    except Exception as e:  # the last line of defence: no traceback reaches a user
        if os.environ.get("FEDCTL_DEBUG"):
            raise
        if isinstance(e, OSError) and e.filename is not None:  # a path given that cannot be read or written (--out under /proc)
            print(f"error: {e.filename}: {e.strerror or e}", file=sys.stderr)
            sys.exit(2)
        print(f"internal error: {type(e).__name__}: {e} (set FEDCTL_DEBUG=1 for the traceback)", file=sys.stderr)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
