"""The live controller's side of each job at its site: dispatch, what the site says of it, and
the job sent back to wait (requeued whole, or retried after a failed run) when its run is over
or lost. The rules (when a gang or a site counts as lost, when a failed run is retried) are the
decision cycle's and federation.retries'; here they are carried out against the sites' Ray
clusters, each change journaled in the store before or as it is made."""

from __future__ import annotations

import logging

from federation.cycle import Decisions
from federation.retries import retry_after
from federation.runtime.packages import PROTOCOL, referenced
from federation.runtime.pinning import allocation_for
from federation.runtime.sites import TERMINAL, SiteRejected, SiteUnavailable
from federation.store import JobRow

log = logging.getLogger("federation.runtime.controller")


class SiteJobs:
    """A mixin of the Controller: it holds `store`, `sites`, `specs`, `site_status`,
    `unreachable_since`, `health`, `clock`, `nodes` and `_spec`."""

    def _lost(self, d: Decisions, present: set[str]) -> None:
        """Gangs that lost tasks, as the cycle decided: a stale one (below its minimum past its
        grace) is stopped and queued again, whole; an elastic one at its minimum goes on with the
        tasks it has, which become its placements."""
        for job_id, reason, why in d.evict:
            row = self.store.get(job_id)
            if row.dispatch_id and row.site in self.sites:
                try:
                    self.sites[row.site].stop(row.dispatch_id)
                except SiteUnavailable:  # stopped when the site answers again, or its next attempt could run beside it
                    self.store.add_orphan(row.site, row.dispatch_id, self.clock())
            if reason == "NodeLost":
                gone = sorted({p["node"] for p in row.placements or []} - present)
                why = f"node(s) {', '.join(gone)} of {row.site} went away (spot interruption?): {why}"
            self._requeue(row, reason, why)
        for job_id in d.shrink:
            row = self.store.get(job_id)
            kept = [p for p in row.placements or [] if p["node"] in present]
            self.store.update(job_id, placements=kept, message=f"running on {len(kept)} of its tasks: the others' node went away")
            log.warning(f"goes on with {len(kept)} task(s); the others' node went away", extra={"site": row.site, "job": job_id})

    def _overrun(self, d: Decisions) -> bool:
        """Runs the cycle found past their max_runtime_s are stopped and their jobs fail (a run
        that ended, or a job started again since, is not meant). True if any was."""
        now, any_ = self.clock(), False
        for job_id, started, why in d.overrun:
            row = self.store.get(job_id)
            if row is None or row.status not in ("ADMITTED", "RUNNING") or row.started_s != started:
                continue
            if row.dispatch_id and row.site in self.sites:
                try:
                    self.sites[row.site].stop(row.dispatch_id)
                except SiteUnavailable:  # stopped when the site answers again
                    self.store.add_orphan(row.site, row.dispatch_id, now)
            self.site_status.pop(row.id, None)
            self.store.update(row.id, status="FAILED", ended_s=now, message=why)
            any_ = True
        return any_

    def _requeue(self, row: JobRow, reason: str | None, why: str) -> None:
        """Queue a job again, whole, under a new attempt (and so a new dispatch id at its next site)."""
        self.site_status.pop(row.id, None)
        self.store.update(row.id, status="PENDING", site=None, placements=None, dispatch_id=None, stop_at_s=None, preempted_for=None, attempt=row.attempt + 1,
                          reason=reason, message=f"{reason + ': ' if reason else ''}requeued, {why}")
        log.info(f"requeued ({reason or 'Preempted'}): {why}", extra={"site": row.site, "job": row.id})

    def _max_retries(self, row: JobRow) -> int:
        spec = self.specs.get(row.id)
        return spec.max_retries if spec is not None else int(row.request.get("max_retries") or 0)

    def _retry(self, row: JobRow, now: float, wait: float) -> None:
        """A run failed at its site and the job has retries left: queued again, whole, after `wait` (federation.retries)."""
        n = (row.retries or 0) + 1
        self.site_status.pop(row.id, None)
        self.store.update(row.id, status="PENDING", site=None, placements=None, dispatch_id=None, stop_at_s=None, preempted_for=None, attempt=row.attempt + 1,
                          retries=n, not_before_s=now + wait, reason="RetryBackoff",
                          message=f"RetryBackoff: run {n} failed at {row.site}; retry {n} of {self._max_retries(row)} in {wait:g} s")
        log.warning(f"failed; retry {n} of {self._max_retries(row)} in {wait:g} s", extra={"site": row.site, "job": row.id})

    def _reach(self, now: float) -> None:
        """Sites that stopped answering are asked again (one with nothing running there is asked
        by nothing else); runs left at a site when their jobs were queued again elsewhere
        (orphans) are stopped once it answers, so no job runs twice."""
        for name in list(self.unreachable_since):
            try:
                answers = name in self.sites and self.sites[name].answers()
            except SiteUnavailable:  # its actor (under `fedctl up`) did not answer either
                answers = False
            if answers:
                log.info(f"answers again after {now - self.unreachable_since.pop(name):.0f} s", extra={"site": name})
        for site, dispatch_id in self.store.orphans():
            if site not in self.sites:
                self.store.drop_orphan(site, dispatch_id)
                continue
            if site in self.unreachable_since:
                continue
            try:
                self.sites[site].stop(dispatch_id)
            except SiteUnavailable:
                self.unreachable_since.setdefault(site, now)
                continue
            self.store.drop_orphan(site, dispatch_id)
            log.info(f"stopped run {dispatch_id}, left there when its job was queued again", extra={"site": site})

    def _dispatch(self, job_id: str) -> None:
        row = self.store.get(job_id)
        site = self.sites[row.site]
        try:
            mig_nodes = {p["node"] for p in row.placements or () if p.get("mig")}  # only MIG tasks name their node's model
            models = {n.name: n.gpu_model for n in self.nodes if n.site == row.site and n.name in mig_nodes} if mig_nodes else None
            allocation = allocation_for(row.id, row.site, row.placements, self._spec(row.id, row.request, row.submitted_s), models)
            for name in referenced(row.runtime_env):
                if not site.has_package(name):
                    data = self.store.package(name)
                    if data is None:
                        self.store.update(job_id, status="FAILED", ended_s=self.clock(),
                                          message=f"runtime_env: package {PROTOCOL}://{name} is gone from the federation; submit the job again")
                        return
                    site.put_package(name, data)
            site.submit(row.dispatch_id, row.entrypoint, row.runtime_env, allocation, row.metadata)
        except SiteUnavailable as e:
            self.unreachable_since.setdefault(row.site, self.clock())
            self.store.update(job_id, message=f"dispatch pending: {e}")
            return
        except SiteRejected as e:
            self.store.update(job_id, status="FAILED", ended_s=self.clock(), message=str(e))
            log.error(f"failed at dispatch: {e}", extra={"site": row.site, "job": job_id})
            return
        except Exception as e:  # a fault in one job's dispatch must not stop every other job's: seen, counted, retried
            self.health.failed(self.clock(), "dispatch", f"job {job_id} at {row.site}: {type(e).__name__}: {e}")
            log.warning(f"dispatching failed; the next cycle tries again: {type(e).__name__}: {e}", exc_info=True, extra={"site": row.site, "job": job_id})
            self.store.update(job_id, message=f"dispatch pending: {type(e).__name__}: {e}")
            return
        if self.store.get(job_id).status == "STOPPED":  # the user stopped it while it was being dispatched
            try:
                site.stop(row.dispatch_id)
            except SiteUnavailable as e:
                log.warning(f"stopped during its dispatch and cannot be stopped there: {e}", extra={"site": row.site, "job": job_id})
            return
        self.site_status[job_id] = "PENDING"
        self.store.update(job_id, status="RUNNING", message=f"running at {row.site}")

    def _sync(self, now: float) -> None:
        """Finished jobs free their capacity; due preemptions stop and requeue; lost dispatches retry."""
        self._reach(now)
        for row in self.store.jobs({"ADMITTED", "RUNNING"}):
            site = self.sites.get(row.site)
            if site is None:
                continue
            if row.status == "ADMITTED":
                self._dispatch(row.id)  # decided before a restart or a site outage: act now
                continue
            try:
                status = site.status(row.dispatch_id)
            except SiteUnavailable:  # the cycle decides when that is a loss (SiteLost)
                self.unreachable_since.setdefault(row.site, now)
                continue
            self.unreachable_since.pop(row.site, None)
            if status == "FAILED" and row.stop_at_s is None and (wait := retry_after((row.retries or 0) + 1, self._max_retries(row))) is not None:
                self._retry(row, now, wait)
                continue
            if status in TERMINAL:  # ended, within a preemption's grace too: it is done, and never runs again
                self.site_status.pop(row.id, None)
                self.store.update(row.id, status=status, ended_s=now, stop_at_s=None, message=f"{status.lower()} at {row.site}")
                continue
            if status is None:  # the site never had it, or lost it (its cluster restarted): a ghost unless requeued
                self._requeue(row, "SiteLostJob", f"its site {row.site} no longer knows its Ray job {row.dispatch_id}")
                continue
            if row.stop_at_s is not None and row.stop_at_s <= now:
                try:
                    site.stop(row.dispatch_id)
                except SiteUnavailable:
                    continue
                self._requeue(row, None, "after preemption")
                continue
            self.site_status[row.id] = status
