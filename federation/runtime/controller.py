"""The live controller: a plain class whose `tick()` runs one cycle of the pure core.

Each tick: (1) learn from the sites what happened (jobs finished), (2) stop preempted jobs
whose grace ran out and requeue them, (3) build a snapshot from the store, (4) schedule,
(5) write each decision to the store, then act on it (dispatch, mark victims). Failures come
back as data: a site that cannot be reached leaves its jobs as they are until the next tick.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from zoneinfo import ZoneInfo

from prometheus_client import Histogram

from federation import garbage
from federation.cycle import DecisionCycle, Decisions, Observation, ProvisionFailure
from federation.errors import BadSubmission, JobRejected
from federation.feasibility import check_job
from federation.inventory import config_nodes, group_node
from federation.jobs import make_job
from federation.mig.manager import MigManager
from federation.model import Federation, JobSpec, Node, RunningJob, TaskPlacement
from federation.runtime.forecasting import seed
from federation.runtime.health import CycleHealth
from federation.runtime.mig import live_mig
from federation.runtime.packages import PROTOCOL, referenced
from federation.runtime.site_jobs import SiteJobs
from federation.runtime.sites import TERMINAL, RaySite, SiteUnavailable
from federation.runtime.submission import read_submission
from federation.showback import Ledger, holdings
from federation.store import CloudRequest, JobRow, RequestLedger, Store
from policies import burst as burst_policy
from policies.tidal import (
    active_policies,
    effective_queues,
    next_transition,
)
from providers.base import Provider

log = logging.getLogger(__name__)


class Controller(SiteJobs):
    #: how often each cloud site is reconciled against the ledger (also once at start-up)
    RECONCILE_S = 300.0
    #: how long an uploaded package is kept before a job must refer to it (Ray's client uploads, then submits)
    PACKAGE_KEEP_S = 3600.0

    def __init__(self, fed: Federation, store: Store, sites: dict[str, RaySite], clock: Callable[[], float] = time.time,
                 providers: dict[str, Provider] | None = None, inventories: dict[str, Provider] | None = None,
                 ledger: RequestLedger | None = None, mig: dict | None = None):
        self.fed, self.store, self.sites, self.clock = fed, store, sites, clock
        self.providers = providers or {}  # burst sites
        self.inventories = inventories or {}  # fixed fleets whose nodes an API lists (Kubernetes)
        self.ledger = ledger or RequestLedger()
        self.in_flight: dict[str, burst_policy.InFlight] = {}
        self.delivered: dict[str, int] = {}  # request -> how many of its nodes are listed now
        self.made_by: dict[str, str] = {}  # cloud node -> the request that made it
        self.request_jobs: dict[str, tuple[str, ...]] = {}  # cloud request -> the jobs it was made for (journaled)
        self.failed: list[ProvisionFailure] = []  # since the last cycle
        self.cloud_nodes: tuple[Node, ...] = ()
        self.config_nodes = config_nodes(fed, [s for s in sites if s not in self.inventories])
        self.fixed_nodes = self.config_nodes
        self.cycle = DecisionCycle(fed)
        self.last_pending: set[str] = set()  # what waited at the last cycle: the rest arrived since
        self.history_read = False
        # what each site last said of the jobs it holds: a dispatched job is RUNNING to Ray's
        # users only once its site runs it (until then its driver is still starting there)
        self.site_status: dict[str, str] = {}
        self.specs: dict[str, JobSpec] = {}  # of the live jobs: a request never changes, so it is built once
        # a running job as the last cycle made it, with the row it was made from: made again only
        # when its row (a new object on each update) or the nodes present changed, so the cycle
        # finds the running jobs it holds by identity, not field by field (`federation.live_state`)
        self.running_made: dict[str, tuple[JobRow, RunningJob]] = {}
        self.present: set[str] = set()
        # each cycle's duration, for /metrics (in no registry: the API's collector yields it)
        self.cycle_seconds = Histogram("federation_cycle_duration_seconds", "Duration of the scheduling cycles", registry=None,
                                       buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
        # since this controller started, for /metrics counters (Prometheus handles the resets)
        self.admissions: Counter[str] = Counter()  # by site
        self.preemptions: Counter[str] = Counter()  # by reason
        self.reconciled_s: float | None = None
        self.health = CycleHealth(started_s=clock())
        self.unreachable_since: dict[str, float] = {}  # site -> since when its status calls fail
        # a site's MIG manager: in this process, or (under `fedctl up`) a proxy to its own actor
        self.mig = mig if mig is not None else {
            s.name: live_mig(fed, s.name, store, sites.get(s.name), self.inventories.get(s.name)) for s in fed.sites if MigManager(fed, s.name).active}
        self.prewarm_gpus = 0.0  # what the forecast last wanted up in the clouds
        self.showback = Ledger()  # GPU-hours and cloud cost per queue since this controller started (as the simulator reports them)
        self.showback_lock = threading.Lock()  # the cycle books in its thread; the API reads (and accounts up to now) in another
        self.showback_since = clock()
        self.heads_up: frozenset[str] = frozenset()  # cluster sites whose head was up at the last cycle
        self.booked_cost: tuple[dict[str, float], dict[str, float]] = ({}, {})  # showback's cost already journaled, by queue and by site
        self.forecast_error: dict[str, float] | None = None  # the journal's last day, predicted without it
        self.listing: dict[str, list] = {}  # site -> its provider's last successful listing
        self.joined: dict[str, set[str]] = {}  # cloud site -> the nodes its Ray cluster last said had joined
        self._resume()

    def _resume(self) -> None:
        """Requests journaled before a restart: cloud ones are picked up (never made twice), the
        rest (local workers, which die with the controller) are over."""
        for r in self.ledger.requests(states={"REQUESTED"}):
            prov = self.providers.get(r.site)
            if prov is None or not prov.durable:
                self.ledger.update(r.id, state="FAILED")
                continue
            self.in_flight[r.id] = burst_policy.InFlight(r.id, r.site, r.group, r.count, r.requested_s, tuple(r.jobs or ()))
            prov.request(r.id, self.fed.site(r.site).node_group(r.group), r.count)
            log.info(f"resuming cloud request ({r.count} x {r.group})", extra={"site": r.site, "request": r.id})

    def reconcile(self, now: float) -> None:
        """Adopt the cloud machines the ledger knows, terminate the ones it does not (no leaks)."""
        self.reconciled_s = now
        for site, prov in self.providers.items():
            for action in prov.reconcile():
                log.info(action, extra={"site": site})
        live = {n for r in self.store.jobs({"PENDING", "ADMITTED", "RUNNING"}) for n in referenced(r.runtime_env)}
        for name in self.store.drop_packages(live, uploaded_before=now - self.PACKAGE_KEEP_S):
            log.info(f"dropped package {name}: no queued or running job refers to it")

    # ---- submissions ----

    def submit(self, body: dict) -> JobRow:
        job_id, req = read_submission(body)
        job_id = job_id or f"fed-{uuid.uuid4().hex[:12]}"
        if self.store.get(job_id) is not None:  # as Ray answers: a second job under one id would be lost
            raise BadSubmission(f"submission_id: a job {job_id!r} exists already; give each job its own id")
        spec = self._spec(job_id, req, self.clock())
        try:
            check_job(self.fed, spec)
        except JobRejected as e:
            raise BadSubmission(f"{e.field}: {e.message}") from None
        for name in referenced(body.get("runtime_env")):
            if not self.store.has_package(name):
                raise BadSubmission(f"runtime_env: package {PROTOCOL}://{name} was never uploaded here; submit again with the working_dir "
                                    "or py_modules as local paths, and the client uploads them")
        row, inserted = self.store.insert(JobRow(job_id, body["entrypoint"], body.get("metadata") or {}, body.get("runtime_env") or {}, req,
                                                 submitted_s=self.clock(), message="queued in the federation"))
        if not inserted:  # submitted twice at once: the other one got there first
            raise BadSubmission(f"submission_id: a job {job_id!r} exists already; give each job its own id")
        return row

    def _spec(self, job_id: str, req: dict, submit_s: float) -> JobSpec:
        try:
            return make_job(self.fed, id=job_id, submit_s=submit_s, **req)
        except JobRejected as e:
            raise BadSubmission(f"{e.field}: {e.message}") from None

    def stop(self, job_id: str) -> bool:
        row = self.store.get(job_id)
        if row is None or row.status in TERMINAL:
            return False
        if row.dispatch_id and row.site in self.sites:
            self.sites[row.site].stop(row.dispatch_id)
        self.store.update(job_id, status="STOPPED", ended_s=self.clock(), message="stopped by the user")
        return True

    # ---- the cycle ----

    def tick(self) -> None:
        began = time.perf_counter()
        now = self.clock()
        self._sync(now)
        if self.reconciled_s is None or now - self.reconciled_s >= self.RECONCILE_S:
            self.reconcile(now)
        self._refresh_fixed()
        self._refresh_cloud(now)
        self._meter(now)
        rows = self.store.jobs({"PENDING", "ADMITTED", "RUNNING"})
        running, lost, stopping = [], [], []
        by_id: dict[str, JobSpec] = {}  # the waiting jobs
        specs = {}
        present = {n.name for n in self.nodes}
        nodes_same, self.present = present == self.present, present
        made: dict[str, tuple[JobRow, RunningJob]] = {}
        for r in rows:
            spec = specs[r.id] = self.specs.get(r.id) or self._spec(r.id, r.request, r.submitted_s)
            if r.status == "PENDING":
                by_id[r.id] = replace(spec, not_before_s=r.not_before_s) if r.not_before_s else spec
            else:
                last = self.running_made.get(r.id)
                if last is not None and last[0] is r and last[1].spec is spec and nodes_same and r.started_s is not None:
                    job = last[1]
                else:
                    # tasks whose node is gone (listed no more, or left its site's Ray cluster) are lost;
                    # the cycle decides whether the gang goes on without them or is queued again
                    placements = tuple(TaskPlacement.from_dict(p) for p in r.placements or [])
                    kept = tuple(p for p in placements if p.node in present)
                    job = RunningJob(spec, r.site, kept, r.started_s or now, preempting=r.stop_at_s is not None,
                                     preempted_for=r.preempted_for, lost=len(placements) - len(kept))
                made[r.id] = (r, job)
                running.append(job)
                if job.lost:
                    lost.append(job)
                if job.preempting:
                    stopping.append(job)
        self.specs, self.running_made = specs, made
        nodes = self.nodes
        for m in self.mig.values():
            m.poll(now, nodes)
            nodes = tuple(m.view(nodes))
        local = self._local(now)
        in_flight = tuple(replace(f, count=f.count - self.delivered.get(rid, 0)) for rid, f in self.in_flight.items())
        arrived = by_id.keys() - self.last_pending
        submitted = self._submitted(arrived, now)
        cloud = tuple(n for n in nodes if n.site in self.providers)
        garbage.settle()  # the world just read (and all before it) out of the collector's walks while the cycle runs
        d = self.cycle.step(Observation(now, local, nodes, cloud, tuple(running), by_id, arrived, submitted, in_flight,
                                        tuple(self.failed), self.ledger.spend(self._month(now)), self._bought_for(), self.store.stopped_queues(),
                                        self.ledger.spend_by(self._month(now), "queue"), self._heads(), tuple(lost), tuple(stopping),
                                        dict(self.unreachable_since)))
        self.prewarm_gpus = d.prewarm_gpus
        self.failed, self.last_pending = [], set(by_id)
        for site, group, why in d.blocked:
            log.warning(f"not asking {group} for {self.fed.policies.burst.provisioning_timeout_s:g}+ s: {why}", extra={"site": site})
        self._lost(d, present)
        overran = self._overrun(d)
        for rid, why in d.cancel:
            f = self.in_flight[rid]
            self._cancel(rid)
            log.warning(f"{why}; released it", extra={"site": f.site, "request": rid})
        # durable before acting: every decision and its dispatch id are stored first, in a few
        # commits (a commit each was ~2 s of a first tick that admits 8,570 jobs); a job left
        # ADMITTED by a crash before its dispatch is dispatched at the next start (`_sync`)
        self.store.update_many([(a.job_id, {"status": "ADMITTED", "site": a.site, "placements": [p.to_dict() for p in a.placements],
                                            "dispatch_id": f"{a.job_id}-{self.store.get(a.job_id).attempt}", "started_s": now, "reason": None,
                                            "message": f"admitted to {a.site}"}) for a in d.plan.admissions])
        for a in d.plan.admissions:
            self.admissions[a.site] += 1
            self._dispatch(a.job_id)
        grace = self.fed.policies.preemption.grace_s
        self.store.update_many([(p.job_id, {"stop_at_s": now + grace, "preempted_for": p.for_job,
                                            "message": f"preempted ({p.reason}) for {p.for_job}; stopping in {grace:g} s"}) for p in d.plan.preemptions])
        self.preemptions.update(p.reason for p in d.plan.preemptions)
        changed = []
        for job_id, reason in d.reasons.items():  # only the jobs the cycle looked at (an incremental one: the new)
            message = f"{reason.code}: {reason.message}"
            row = self.store.get(job_id)
            if row is not None and (row.reason, row.message) != (reason.code, message):  # most wait as they did last cycle
                changed.append((job_id, {"reason": reason.code, "message": message}))
        self.store.update_many(changed)  # what a person reads: one commit, however many
        self._scale(now, d)
        # what runs now includes what this cycle just admitted: a slice it took must not be re-sliced away
        running += [RunningJob(by_id[a.job_id], a.site, a.placements, now) for a in d.plan.admissions]
        self._book(now, running)
        for site, m in self.mig.items():  # every cycle: it also follows the reconfigurations under way
            m.step(now, local, [n for n in nodes if n.site == site], [r for r in running if r.site == site], d.capacity_waiting,
                   d.mig_forecast.get(site) if d.mig_forecast is not None else None)
        self.cycle_seconds.observe(time.perf_counter() - began)
        if d.evict or overran:  # evicted gangs wait again, stopped ones freed their nodes: decide at once, as the simulator does
            self.tick()

    def _submitted(self, arrived, now: float) -> tuple[JobSpec, ...]:
        """Jobs first seen since the last cycle; at start, every job the store knows (the
        federation's history: the workload mix placement weighs by, and the forecast starts from)."""
        if not self.history_read:
            self.history_read = True
            if self.cycle.forecast is not None:
                self.forecast_error = seed(self.cycle.forecast, self.fed, self.store, now)
            return tuple(self.specs.get(r.id) or self._spec(r.id, r.request, r.submitted_s) for r in self.store.jobs())
        return tuple(self.specs[j] for j in arrived if (row := self.store.get(j)) is not None and row.attempt == 0)

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.fixed_nodes + self.cloud_nodes

    def _listed(self, providers: dict[str, Provider]) -> tuple[list[Node], dict[str, str]]:
        """The nodes the providers list, as core nodes, and the request that made each. A site
        that cannot be listed now keeps its last listing: a failed call is not an empty cloud."""
        nodes, made_by = [], {}
        for site, prov in providers.items():
            found = prov.list_nodes()
            if found is None:
                found = self.listing.get(site, [])
            else:
                self.listing[site] = found
            for pn in found:
                nodes.append(group_node(site, self.fed.site(site).node_group(pn.group), pn.name, pn.rack, pn.schedulable))
                made_by[pn.name] = pn.request_id
        return nodes, made_by

    def _joined(self, site: str) -> set[str]:
        """The nodes that have joined `site`'s Ray cluster; its last answer while it cannot be asked."""
        ray_site = self.sites.get(site)
        found = ray_site.joined() if ray_site is not None else None
        if found is not None:
            self.joined[site] = found
        return self.joined.get(site, set())

    def _refresh_fixed(self) -> None:
        """A fixed fleet behind an API (Kubernetes) is what it lists now: nodes down or cordoned drop out."""
        if not self.inventories:
            return
        listed, _ = self._listed(self.inventories)
        for site, inv in self.inventories.items():
            for err in inv.errors():
                log.warning(f"{err.kind}: {err.message}", extra={"site": site})
        self.fixed_nodes = self.config_nodes + tuple(listed)

    def _refresh_cloud(self, now: float) -> None:
        """Cloud nodes are what the providers list and what has joined the site's Ray cluster (a
        machine that runs but has not joined cannot take work); requests that delivered, or
        failed, end (the cycle decides what a failure blocks, and when a slow request is given up)."""
        listed, made_by = self._listed(self.providers)
        joined = {site: self._joined(site) for site in self.providers}
        nodes = [n for n in listed if n.name in joined[n.site]]
        self.made_by = {n.name: made_by[n.name] for n in nodes}
        seen = Counter(self.made_by.values())
        for site, prov in self.providers.items():
            for err in prov.errors():
                log.warning(f"{err.kind}: {err.message}", extra={"site": site})
                f = self.in_flight.pop(err.request_id, None)
                if f is not None:
                    self.failed.append(ProvisionFailure(f.request_id, f.site, f.group, err.kind, err.message))
        self.cloud_nodes = tuple(nodes)
        self.delivered = seen
        for rid, f in list(self.in_flight.items()):
            if seen.get(rid, 0) >= f.count:
                del self.in_flight[rid]
                if not self.providers[f.site].durable:  # cloud providers journal their own deliveries
                    self.ledger.update(rid, state="DELIVERED")

    def stop_queue(self, queue: str, policy: str | None) -> dict:
        """Pause ("pause": admit nothing new), drain ("drain": also stop and requeue what runs) or
        resume (None) a queue and the queues under it, from the next cycle on."""
        if queue not in {q.name for q in self.fed.queues}:
            raise BadSubmission(f"queue {queue!r} is not a queue of this federation", 404)
        self.store.stop_queue(queue, policy, self.clock())
        log.info(f"{policy or 'resume'}d by an operator", extra={"queue": queue})
        return {"queue": queue, "stopped": policy}

    def _book(self, now: float, running: list[RunningJob]) -> None:
        """Showback: the books brought to this cycle's nodes and allocations."""
        nodes = {}
        for n in self.nodes:
            cloud = n.site in self.providers
            price, trigger = 0.0, None
            if cloud:
                price = self.fed.site(n.site).node_group(n.node_group).price_usd_per_hour
                first = next(iter(self.request_jobs.get(self.made_by.get(n.name, ""), ())), None)
                trigger = self.specs[first].queue if first in self.specs else None
            nodes[n.name] = (n.site, n.gpus, cloud, price, trigger)
        with self.showback_lock:
            self.showback.sync(now, nodes, holdings(running))
            self.showback.set_heads(now, {s: self.fed.site(s).head_price_usd_per_hour for s in self.heads_up})
            costs = self.showback.cloud_costs(now)
        # the month's spend per queue and per site, journaled (queue budgets hold across restarts)
        month = self._month(now)
        for kind, cost, booked in zip(("queue", "site"), costs, self.booked_cost, strict=True):
            self.ledger.charge_by(month, kind, {k: v - booked.get(k, 0.0) for k, v in cost.items()})
            booked.update(cost)

    def _showback(self) -> dict[str, dict[str, float]]:
        with self.showback_lock:
            return self.showback.per_queue(self.clock(), [q.name for q in self.fed.queues])

    def _bought_for(self) -> dict[str, tuple[str, ...]]:
        """Each cloud node's jobs, as its request's journal entry names them (so a restart keeps them)."""
        live = set(self.made_by.values())
        self.request_jobs = {rid: jobs for rid, jobs in self.request_jobs.items() if rid in live}
        for rid in live - self.request_jobs.keys():
            r = self.ledger.get(rid)
            self.request_jobs[rid] = tuple(r.jobs or ()) if r is not None else ()
        return {name: self.request_jobs[rid] for name, rid in self.made_by.items()}

    def _cancel(self, rid: str) -> None:
        f = self.in_flight.pop(rid)
        prov = self.providers[f.site]
        prov.cancel(rid)
        if not prov.durable:  # cloud providers journal their own
            self.ledger.update(rid, state="CANCELLED")

    def _month(self, now: float) -> str:
        return self._local(now).strftime("%Y-%m")

    def _meter(self, now: float) -> None:
        """Charge the cloud nodes listed now for the time since the meter last ran.

        After a controller outage the whole gap is charged at today's rate: the machines kept
        billing while nobody watched, and over-counting is the safe side of a budget.
        """
        last = self.ledger.metered_s()
        rate = sum(self.fed.site(n.site).node_group(n.node_group).price_usd_per_hour for n in self.cloud_nodes)
        rate += sum(self.fed.site(s).head_price_usd_per_hour for s in self.heads_up)
        if last is None or now <= last:
            self.ledger.charge(self._month(now), 0.0, now)
            return
        self.ledger.charge(self._month(now), rate * (now - last) / 3600, now)

    def _scale(self, now: float, d: Decisions) -> None:
        """Ask the clouds for the nodes the cycle wants, and give back the ones it releases."""
        for up in d.scale_up:
            rid = f"burst-{uuid.uuid4().hex[:10]}"
            # journaled before the cloud is asked: a restart resumes it instead of asking twice
            self.ledger.record(CloudRequest(rid, up.site, up.group, up.count, now, jobs=list(up.jobs)))
            self.in_flight[rid] = burst_policy.InFlight(rid, up.site, up.group, up.count, now, up.jobs)
            self.providers[up.site].request(rid, self.fed.site(up.site).node_group(up.group), up.count)
            why = ", ".join(up.jobs) or f"the forecast ({d.prewarm_gpus:g} GPUs wanted {self.cycle.forecast.lead_s:g} s ahead)"
            log.info(f"requested {up.count} x {up.group} for {why}", extra={"site": up.site, "request": rid})
        by_site: dict[str, list[str]] = {}
        for name in d.release:
            by_site.setdefault(next(n.site for n in self.cloud_nodes if n.name == name), []).append(name)
        for site, names in by_site.items():
            self.providers[site].release(names)
            log.info(f"released {len(names)} idle node(s) (idle {self.fed.policies.burst.scale_in_idle_s:g} s): {', '.join(names)}", extra={"site": site})
        for site in d.teardown:
            self.providers[site].teardown()
            log.info(f"nothing there for {self.fed.policies.burst.scale_in_idle_s:g} s; taking its cluster down "
                     "(its next scale-up brings it up again)", extra={"site": site})

    def _heads(self) -> frozenset[str]:
        """Cluster sites (provider.cluster) whose Ray head is up: the cycle takes an idle one down."""
        up = set()
        for site, provider in self.providers.items():
            if self.fed.site(site).cluster is not None:
                try:
                    if provider.head_up():
                        up.add(site)
                except SiteUnavailable:
                    pass  # not known now: nothing is taken down on a guess
        self.heads_up = frozenset(up)  # for the meter and showback, which run after the cycle
        return self.heads_up

    def _local(self, now: float) -> datetime:
        return datetime.fromtimestamp(now, ZoneInfo(self.fed.timezone))

    # ---- what people see ----

    def refresh_site_status(self, row: JobRow) -> None:
        """Ask the site now whether a job it was given has started (for a status read): while
        its driver is starting there, or when this controller has not heard yet (restarted)."""
        site = self.sites.get(row.site)
        if row.status == "RUNNING" and self.site_status.get(row.id, "PENDING") == "PENDING" and site is not None and row.dispatch_id:
            try:
                status = site.status(row.dispatch_id)
            except SiteUnavailable:
                return
            if status is not None:
                self.site_status[row.id] = status

    def job_details(self, row: JobRow) -> dict:
        """The job as Ray's job API describes it (JobDetails)."""
        status, message = row.status, row.message
        if status == "ADMITTED":
            status = "PENDING"
        elif status == "RUNNING" and self.site_status.get(row.id) == "PENDING":
            status, message = "PENDING", f"dispatched to {row.site}; its driver is starting there"
        return {
            # a federation job has no one Ray driver id; its id serves for both (every route takes either)
            "type": "SUBMISSION", "job_id": row.id, "submission_id": row.id, "driver_info": None, "status": status,
            "entrypoint": row.entrypoint, "message": message, "error_type": None,
            "start_time": int(row.submitted_s * 1000), "end_time": int(row.ended_s * 1000) if row.ended_s else None,
            "metadata": {str(k): str(v) for k, v in (row.metadata or {}).items()}, "runtime_env": row.runtime_env or {},
            "driver_agent_http_address": None, "driver_node_id": None, "driver_exit_code": None,
        }

    def logs(self, row: JobRow) -> str:
        if row.dispatch_id and row.site in self.sites:
            return self.sites[row.site].logs(row.dispatch_id)
        return ""

    def _pending_by_queue(self, rows: list[JobRow]) -> list[dict]:
        """Waiting jobs queue by queue, each with its position: the order the core considers a
        queue's jobs in (priority, then submission), as Kueue's visibility API gives it."""
        specs = {r.id: self.specs.get(r.id) or self._spec(r.id, r.request, r.submitted_s) for r in rows if r.status == "PENDING"}
        out, seen = [], Counter()
        for r in sorted((r for r in rows if r.id in specs), key=lambda r: (specs[r.id].queue, -specs[r.id].priority, r.submitted_s, r.id)):
            queue = specs[r.id].queue
            seen[queue] += 1
            out.append({"job": r.id, "queue": queue, "position": seen[queue], "reason": r.reason, "message": r.message, "submitted_s": r.submitted_s})
        return out

    def status(self) -> dict:
        rows = self.store.jobs({"PENDING", "ADMITTED", "RUNNING"})
        local = self._local(self.clock())
        nxt = next_transition(self.fed, local) if any(t.window for t in self.fed.policies.tidal) else None
        usage: dict[str, float] = {}
        gpus: dict[str, float] = {}
        stopped = self.store.stopped_queues()
        month = self._month(self.clock())
        by_queue, by_site = self.ledger.spend_by(month, "queue"), self.ledger.spend_by(month, "site")
        for r in rows:
            if r.status != "PENDING":
                spec = self._spec(r.id, r.request, r.submitted_s)
                gpus[r.id] = spec.per_task.gpu * len(r.placements or [])
                usage[spec.queue] = usage.get(spec.queue, 0.0) + gpus[r.id]
        return {
            "federation": self.fed.name,
            "health": self.health.to_dict(self.clock()),
            # silent_s: how long the site has not answered (None: it answers); past site_lost_timeout_s its jobs are queued again
            "sites": [{"name": s.name, "kind": s.kind, "connected": s.name in self.sites,
                       "silent_s": round(self.clock() - self.unreachable_since[s.name], 1) if s.name in self.unreachable_since else None}
                      for s in self.fed.sites],
            "nodes": [{"name": n.name, "site": n.site, "gpus": n.gpus, "gpu_model": n.gpu_model} for n in self.nodes],
            "queues": [{"name": q.name, "parent": q.parent, "stopped": stopped.get(q.name), "guarantee": q.guarantee.to_dict(), "deserved": q.deserved.to_dict(),
                        "capability": q.capability.to_dict(), "usage_gpu": usage.get(q.name, 0.0), "borrowed_gpu": max(0.0, usage.get(q.name, 0.0) - q.deserved.gpu)}
                       for q in effective_queues(self.fed, local)],
            "tidal": {"active": [t.name for t in active_policies(self.fed, local)], "next_transition": nxt.isoformat() if nxt else None,
                      **({"forecast_prewarm_gpus": self.prewarm_gpus, "forecast_error": self.forecast_error,
                          "forecast_online": self.cycle.forecast.scores()} if self.cycle.forecast is not None else {})},
            "pending": self._pending_by_queue(rows),
            "running": [{"job": r.id, "queue": r.request.get("queue"), "site": r.site, "gpus": gpus[r.id]} for r in rows if r.status != "PENDING"],
            "mig": {site: m.status() for site, m in self.mig.items()},
            "cloud": {"in_flight": [{"request": f.request_id, "site": f.site, "group": f.group, "count": f.count, "jobs": list(f.jobs)}
                                    for f in self.in_flight.values()],
                      "month_spend_usd": round(self.ledger.spend(month), 2),
                      "budget_usd_per_month": self.fed.policies.burst.budget_usd_per_month,
                      # the month's spend split by queue (with each queue's own budget) and by site
                      "queues": {q.name: {"month_spend_usd": round(by_queue.get(q.name, 0.0), 2), "budget_usd_per_month": q.burst_budget_usd_per_month}
                                 for q in self.fed.queues},
                      "sites": {s.name: {"month_spend_usd": round(by_site.get(s.name, 0.0), 2)} for s in self.fed.sites if s.is_cloud}},
            # per queue since this controller started, as `fedctl simulate` reports them (idle cloud time to the queue that asked)
            "showback": {"since_s": self.showback_since, "queues": self._showback()},
        }
