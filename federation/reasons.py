"""Every reason a job waits (or was sent back to wait), one enumeration: the code the core, the
burst policy and the controller give, what it means, and what would change it. `fedctl explain`
prints the meaning beside a job's reason; `events.jsonl` records each change of a job's reason;
`report.json` gives the GPU-hours that waited for each. A test checks that every code the code
base gives is listed here."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # the queue tree (federation.quota)
    ExceedsCapability = "ExceedsCapability"
    WaitingForQuota = "WaitingForQuota"
    MaxRunningJobs = "MaxRunningJobs"
    NonPreemptibleOverQuota = "NonPreemptibleOverQuota"
    UnknownQueue = "UnknownQueue"
    QueuePaused = "QueuePaused"
    RetryBackoff = "RetryBackoff"
    ReclaimBackoff = "ReclaimBackoff"
    # capacity and placement (federation.scheduler)
    NoFeasibleNode = "NoFeasibleNode"
    WaitingForCapacity = "WaitingForCapacity"
    WaitingForReclaim = "WaitingForReclaim"
    BehindPreemptor = "BehindPreemptor"
    Consolidating = "Consolidating"
    ReservedForGang = "ReservedForGang"
    ReservedForQueue = "ReservedForQueue"
    SiteUnreachable = "SiteUnreachable"
    # the cloud (policies.burst)
    WaitingForBurst = "WaitingForBurst"
    NoBurstOption = "NoBurstOption"
    BurstBudgetExhausted = "BurstBudgetExhausted"
    BurstCapacityExhausted = "BurstCapacityExhausted"
    # sent back to wait by the live controller
    NodeLost = "NodeLost"
    SiteLost = "SiteLost"
    SiteLostJob = "SiteLostJob"


MEANING: dict[Reason, str] = {
    Reason.ExceedsCapability: "its queue (or an ancestor) would go above its capability; it runs when the queue's own jobs end, or when a tidal window raises the capability",
    Reason.WaitingForQuota: "its queue would borrow past its borrowing limit, or the free capacity is held by others' guarantees; it runs as borrowed capacity comes back",
    Reason.NonPreemptibleOverQuota: "it is not preemptible and its queue's (or an ancestor's) non-preemptible work would go above its deserved share: what a queue uses above its share must stay preemptible, so reclaim can give lenders theirs back; it runs when its queue's non-preemptible jobs end (or a window raises the share)",
    Reason.MaxRunningJobs: "its queue runs as many jobs as its max_running_jobs allows; it runs when one of them ends",
    Reason.UnknownQueue: "its queue is not a leaf queue of this federation (the config changed under it)",
    Reason.RetryBackoff: "its last run failed at its site; it runs again (max_retries) once its back-off is over: 10 s after the first failure, doubling, at most 6 min",
    Reason.ReclaimBackoff: "reclaim took its queue's borrowed work a short while ago (policies.preemption.reclaim_backoff_s, doubling with each reclaim in a row): its queue may not borrow again until then, so it is not admitted and reclaimed over and over; within deserved it runs",
    Reason.QueuePaused: "an operator paused or drained its queue (or an ancestor): `fedctl queue resume` lets it run again",
    Reason.NoFeasibleNode: "no node type at its queue's sites can ever hold one of its tasks",
    Reason.WaitingForCapacity: "quota allows it, but no site has room for the whole gang now; it runs as jobs end (its nodes may be reserved for it)",
    Reason.WaitingForReclaim: "jobs are being preempted (within their grace period) to make room for it",
    Reason.BehindPreemptor: "a higher-priority job of its queue preempted others and waits for them to stop; what they free is its first, so its queue's lower priorities wait behind it",
    Reason.Consolidating: "the GPUs it needs are free but scattered: smaller jobs are being moved to other nodes (stopped within their grace, then started there) to make room",
    Reason.ReservedForGang: "the nodes that would fit it are reserved for a larger waiting gang",
    Reason.ReservedForQueue: "the free GPUs are held for another queue's guarantee on its sites",
    Reason.SiteUnreachable: "every site that could hold it has stopped answering the federation; nothing is sent to a site until it answers again",
    Reason.WaitingForBurst: "cloud nodes are being provisioned for it",
    Reason.NoBurstOption: "no cloud node group that can hold it is available now (blocked after errors, or none fits)",
    Reason.BurstBudgetExhausted: "more cloud nodes would pass the hourly or monthly budget",
    Reason.BurstCapacityExhausted: "every cloud node group that fits it is at max_nodes",
    Reason.NodeLost: "a node it ran on went away (a spot interruption?); it was queued again whole",
    Reason.SiteLost: "its site did not answer for policies.preemption.site_lost_timeout_s (15 minutes unless set); it was queued again whole, and the run the site may still have is stopped when it answers again",
    Reason.SiteLostJob: "its site no longer knew its Ray job (the site's cluster was replaced); it was queued again whole",
}
