"""The stats of a whole distributed crawl, for the launcher's stats server.

:class:`ClusterSource` is a :class:`~larbin_py.web.source.StatsSource`: the
dashboard, ``/stats.json`` and ``/metrics`` of the launcher read it exactly
as they read one engine.  Its snapshot is the docs/stats.md schema (version
1) with the workers' snapshots (``stats:<w>``, written by each worker's
heartbeat) summed, the URL counters taken from Redis (the authoritative
``cnt:{p}`` and the streams), and one extra section, ``cluster``:

* ``workers``: one row per worker (pages, pages/s, partitions, IP leases,
  RSS, CPU, state); IP leases come from the ``dist`` section a worker may
  add to its snapshot (``{"dist": {"ip_leases": n, ...}}``);
* ``totals``: accepted, fetched, forgotten, queued, pending, and whether
  conservation holds (accepted = fetched + forgotten + queued);
* ``partitions``: per partition accepted, fetched, forgotten, queued,
  pending, owner, lease acquisitions (takeovers + 1);
* ``redis``: used memory, bytes per seen URL, commands and reads processed,
  round trips per page;
* ``membership``: its source (``redis`` or ``zookeeper``), the live workers
  as the membership sees them, the last change of the member set (the most
  recent one any worker reported: ``{"at": wall time, "what": sentence}``),
  and the workers that report themselves out of it (a lapsed ZooKeeper
  session);
* ``redis_down``: why the launcher cannot read Redis now (the same sentence
  as ``error``), or null, and the workers whose last snapshot said Redis was
  unreachable: the dashboard shows a banner while either is set.

``snapshot()`` must be quick and synchronous, so :meth:`ClusterSource.refresh`
(one tick: the view, the snapshots, INFO) runs every second on the loop and
``snapshot()`` assembles the last answers.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

from ..web.source import empty_snapshot
from .redisio import DistError, RedisIO, Totals, View

__all__ = ["ClusterSource", "merge_snapshots"]

# Sections whose numbers add up over the workers.
_SUMMED = ("pages", "urls", "dns", "connections", "sites", "process")


def _add(into: dict, other: dict) -> None:
    for k, v in other.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and isinstance(into.get(k), (int, float)):
            into[k] = into[k] + v
        elif isinstance(v, (int, float)) and into.get(k) is None:
            into[k] = v  # a key of a str -> int map (errors, forgotten), or a null figure
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            _add(into[k], v)


def merge_snapshots(snapshots: list[dict], now: float | None = None) -> dict:
    """One schema-valid snapshot summing ``snapshots`` (the workers')."""
    out = empty_snapshot(now)
    out["state"] = "running" if snapshots else "starting"
    limits = []
    for snap in snapshots:
        for section in _SUMMED:
            if isinstance(snap.get(section), dict):
                _add(out[section], snap[section])
        if isinstance(snap.get("pages"), dict) and snap["pages"].get("limit") is not None:
            limits.append(snap["pages"]["limit"])
        gate = snap.get("gate") or {}
        out["gate"]["is_get"] = out["gate"]["is_get"] and bool(gate.get("is_get", True))
        flow = snap.get("flow") or {}
        if flow.get("enabled"):
            out["flow"]["enabled"] = True
            out["flow"]["max_requests"] += int(flow.get("max_requests") or 0)
            for k in ("srtt", "rtt_min", "rtt_max", "rtt_p50", "rtt_p95"):
                v = flow.get(k)
                if isinstance(v, (int, float)) and (out["flow"][k] is None or v > out["flow"][k]):
                    out["flow"][k] = v  # the slowest worker's
        hosts = snap.get("hosts") or {}
        out["hosts"]["busiest"].extend(h for h in hosts.get("busiest", []) if isinstance(h, dict))
        out["hosts"]["failing"].extend(h for h in hosts.get("failing", []) if isinstance(h, dict))
        out["last"].extend(x for x in snap.get("last", []) if isinstance(x, dict))
        if snap.get("limit_time") is not None:
            out["limit_time"] = snap["limit_time"]
    out["pages"]["limit"] = limits[0] if limits else None
    out["hosts"]["busiest"] = sorted(out["hosts"]["busiest"], key=lambda h: -h.get("pages", 0))[:10]
    out["hosts"]["failing"] = sorted(out["hosts"]["failing"], key=lambda h: -h.get("errors", 0))[:10]
    out["last"] = sorted(out["last"], key=lambda x: -x.get("time", 0))[:20]
    return out


class ClusterSource:
    """The launcher's :class:`StatsSource` over the crawl's Redis."""

    def __init__(self, io: RedisIO, *, workers: list[str] | None = None, interval: float = 1.0,
                 membership: str = "redis", clock=time.monotonic, wall=time.time) -> None:
        self.io = io
        self.membership = membership
        self.expected = list(workers or [])
        self.interval = interval
        self.clock, self.wall = clock, wall
        self.started = clock()
        self.state = "starting"
        self.view: View | None = None
        self.snapshots: dict[str, dict] = {}  # the last snapshot of each worker ever seen
        self.seen_at: dict[str, float] = {}
        self.info: dict[str, Any] = {}
        self.info_start: dict[str, Any] | None = None
        self.error: str | None = None
        self.worker_states: dict[str, str] = {}  # set by the launcher: running, exited 0, respawning, ...
        self._task: asyncio.Task | None = None

    # --- refreshing ------------------------------------------------------
    async def refresh(self) -> None:
        """One look at Redis: the view with per-partition rows, the snapshots, INFO."""
        try:
            t = self.io.tick()
            iv = t.view(rows=True)
            names = sorted(set(self.expected) | set(self.snapshots) | (set(self.view.members) if self.view else set()))
            ist = t.get_stats(names)
            res = await t.execute()
            self.view = res[iv]
            for w in self.view.members - set(names):  # a worker from another machine
                names.append(w)
            now = self.clock()
            for w, snap in res[ist].items():
                self.snapshots[w] = snap
                self.seen_at[w] = now
            self.info = await self.io.info()
            if self.info_start is None:
                self.info_start = dict(self.info)
            self.error = None
        except DistError as exc:
            self.error = str(exc)
        except Exception as exc:  # a broken reply must not end the server
            self.error = f"{type(exc).__name__}: {exc}"

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    async def _loop(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None

    # --- StatsSource -------------------------------------------------------
    def snapshot(self) -> dict:
        now_wall = self.wall()
        live = [s for s in self.snapshots.values() if isinstance(s, dict)]
        snap = merge_snapshots(copy.deepcopy(live), now_wall)
        snap["uptime"] = self.clock() - self.started
        snap["state"] = self.state
        totals = self.view.totals if self.view else Totals()
        # Redis's counters are the truth for URLs (every worker's, the dead ones' included)
        snap["urls"]["fetched"] = totals.fetched
        snap["urls"]["forgotten"] = dict(totals.forgotten)
        snap["urls"]["taken"] = totals.accepted
        if totals.recrawl:  # a recrawl's verdicts, counted with the acks (the dead workers' included)
            snap["recrawl"] = dict(totals.recrawl)
        if not live:  # no worker snapshot (yet): the pages are the URLs acked as fetched
            snap["pages"]["fetched"] = totals.fetched
        snap["cluster"] = self.cluster()
        return snap

    def submit_urls(self, urls: list[str]) -> list[dict]:
        # The launcher has no frontier to apply the crawl's rules with: URLs
        # are given to a worker's own input (documented in docs/distributed.md).
        return [{"url": u, "result": "rejected", "reason": "noInputOnLauncher"} for u in urls]

    # --- the cluster section ----------------------------------------------------
    def membership_view(self) -> dict:
        """Source, live workers, last change, workers out: from the workers' snapshots
        (``dist.membership``, written at each heartbeat), the freshest view first; the
        member keys in Redis when no worker reported one (yet)."""
        reports = []
        for w, snap in self.snapshots.items():
            m = (snap.get("dist") or {}).get("membership") if isinstance(snap, dict) else None
            if isinstance(m, dict):
                reports.append((self.seen_at.get(w, 0.0), float(snap.get("time") or 0.0), w, m))
        reports.sort(key=lambda r: (r[0], r[1]))
        source = self.membership
        members = sorted(self.view.members) if self.view else []
        last = None
        out = []
        if reports:
            fresh = reports[-1][3]
            source = str(fresh.get("source") or source)
            members = sorted(str(x) for x in fresh.get("members") or [])
            for _seen, _t, w, m in reports:
                change = m.get("last_change")
                if isinstance(change, dict) and isinstance(change.get("at"), (int, float)):
                    if last is None or change["at"] >= last["at"]:
                        last = {"at": float(change["at"]), "what": str(change.get("what") or ""), "worker": w}
                if m.get("alive") is False and self.worker_states.get(w, "running") == "running":
                    out.append(w)
        return {"source": source, "members": members, "last_change": last, "out": sorted(out)}


    def cluster(self) -> dict:
        view = self.view
        totals = view.totals if view else Totals()
        owned: dict[str, int] = {}
        for row in (view.rows if view else []):
            if row.owner:
                owned[row.owner] = owned.get(row.owner, 0) + 1
        membership = self.membership_view()
        members = set(membership["members"])
        rows = []
        for w in sorted(set(self.expected) | set(self.snapshots) | members):
            s = self.snapshots.get(w) or {}
            pages = s.get("pages") or {}
            proc = s.get("process") or {}
            rows.append({
                "worker": w,
                "live": w in members,
                "state": self.worker_states.get(w, s.get("state", "unknown")),
                "pages": int(pages.get("fetched") or 0),
                "rate_now": float(pages.get("rate_now") or 0.0),
                "partitions": owned.get(w, 0),
                "ip_leases": int(((s.get("dist") or {}).get("ip_leases")) or 0),
                "rss_bytes": int(proc.get("rss_bytes") or 0),
                "cpu_seconds": float(proc.get("cpu_seconds") or 0.0),
                "redis_down": (s.get("dist") or {}).get("redis_down"),
            })
        info, start = self.info, self.info_start or {}
        used = int(info.get("used_memory") or 0)
        reads = int(info.get("total_reads_processed") or 0) - int(start.get("total_reads_processed") or 0)
        commands = int(info.get("total_commands_processed") or 0) - int(start.get("total_commands_processed") or 0)
        done = max(1, totals.done)
        return {
            "crawl": self.io.crawl,
            "error": self.error,
            "redis_down": {"launcher": self.error,
                           "workers": sorted(r["worker"] for r in rows if r["redis_down"])},
            "membership": membership,
            "workers": rows,
            "totals": {"accepted": totals.accepted, "fetched": totals.fetched,
                       "forgotten": sum(totals.forgotten.values()), "queued": totals.queued,
                       "pending": totals.pending, "balanced": totals.balanced},
            "partitions": [{"p": r.partition, "owner": r.owner, "accepted": r.accepted, "fetched": r.fetched,
                            "forgotten": r.forgotten, "queued": r.queued, "pending": r.pending,
                            "acquisitions": r.acquisitions} for r in (view.rows if view else [])],
            "redis": {
                "used_memory": used,
                "maxmemory": int(info.get("maxmemory") or 0),
                "bytes_per_accepted_url": (used / totals.accepted) if totals.accepted else None,
                "reads_processed": reads,
                "commands_processed": commands,
                "round_trips_per_page": reads / done if totals.done else None,
                "cpu_seconds": float(info.get("used_cpu_sys") or 0.0) + float(info.get("used_cpu_user") or 0.0),
            },
        }
