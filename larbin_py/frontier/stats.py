"""The frontier's figures for the stats page (docs/stats.md, ``frontier``), in O(1).

:func:`frontier_stats` reads what the frontier and its parts keep as they
change: the ready sites are counted as they enter and leave their IP's
ready queue, the busiest and failing sites in two top-10 tables updated per
outcome (:class:`~larbin_py.frontier.topcounts.TopCounts`), the pruned
counts by :class:`~larbin_py.frontier.pruning.Pruning`.  Nothing walks the
sites, so a stats poll costs the same with ten sites or ten million.  Reads
only; no I/O.
"""

from __future__ import annotations

__all__ = ["frontier_stats"]


def _key_host(key: str) -> str:
    """The host of a site key ``scheme://host:port``."""
    return key[key.index("://") + 3:key.rindex(":")]


def frontier_stats(fr) -> dict:
    """What the engine's stats read of the frontier ``fr`` (a
    :class:`~larbin_py.frontier.protocol.Scheduler`).

    ``sites``: ``known`` are held now, ``total`` were ever made (a pruned
    site made again counts once while its compact record is kept),
    ``ready`` wait in their IP's ready queue, ``waiting`` on DNS or a retry
    timer; ``hosts``: the ten sites with the most pages fetched and with the
    most errors.
    """
    pruning, admission, lanes = fr.pruning, fr.admission, fr.lanes
    dns_pending = fr.dns.pending
    timers = len(fr.timers)
    return {
        "taken": fr.taken,
        "fetched": fr.fetched,
        "queued": fr.queued,
        "queued_disk": lanes.on_disk_only,
        "in_memory": fr.urls_in_memory(),
        "parked": fr.parked,
        "in_flight": fr.in_flight,
        "forgotten": dict(fr.forgotten),
        "retried": dict(fr.retried),
        "retry_wait": sum(fr.retried.values()),
        "rejected": dict(admission.rejected),
        "seen": len(admission.seen),
        "is_get": fr.is_get,
        "requests": fr.requests,
        "max_requests": fr.max_requests,
        "sites": {
            "known": len(fr.sites),
            "total": fr.sites_total,
            "ready": fr.ready_sites,
            "waiting": dns_pending + timers,
            "dns_pending": dns_pending,
            "timers": timers,
            "pruned": pruning.sites_pruned,
            "kept": len(pruning.kept),
            "ips": len(fr.ips),
            "ips_pruned": pruning.ips_pruned,
        },
        "hosts": {
            "busiest": [{"host": _key_host(k), "pages": n} for k, n in fr.busiest.top() if n],
            "failing": [{"host": _key_host(k), "errors": n} for k, n in fr.failing.top() if n],
        },
    }
