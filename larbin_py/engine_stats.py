"""The crawl's statistics: the end-of-crawl :class:`Summary` and the stats snapshot.

:class:`EngineStats` reads the engine's parts (its frontier, its edge's
resolver and fetcher, its flow controller, its counters, the crawl time its
checkpoints keep) and never changes them, except for its own rate samples
(the last 5 s of pages and bytes, for the "now" rates).
The snapshot is the ``StatsSource`` interface of larbin_py.web (schema in
docs/stats.md); ``/proc`` reads give the memory figures.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from .frontier.stats import frontier_stats
from .recrawl import VERDICTS

__all__ = ["Counters", "EngineStats", "Summary"]


@dataclass
class Counters:
    """The engine's own counts (the frontier keeps its own), checkpointed and
    restored by :meth:`to_state` / :meth:`restore` (the checkpoint's ``engine``
    section)."""

    #: Links refused, by reason: the frontier's counter, shared.
    rejected: Counter
    bytes: int = 0
    requests: int = 0
    robots_requests: int = 0
    #: Fetched pages whose links could not be read, by reason (``parseError``: Page.error).
    page_errors: Counter = field(default_factory=Counter)
    #: sitemaps: files read, URLs listed and queued, limits met (larbin_py.sitemap_fetch).
    sitemaps: Counter = field(default_factory=Counter)
    #: Round-trip times of the last answers (p50/p95 on the stats page).
    rtts: deque = field(default_factory=lambda: deque(maxlen=512))
    #: The last outcomes, for the stats page.
    last: deque = field(default_factory=lambda: deque(maxlen=20))
    #: A recrawl's verdicts (larbin_py.recrawl.VERDICTS): unchanged, changed, new, gone...
    recrawl: Counter = field(default_factory=Counter)

    def to_state(self) -> dict:
        return {"bytes": self.bytes, "requests": self.requests, "robots_requests": self.robots_requests,
                "rejected": dict(self.rejected), "page_errors": dict(self.page_errors),
                "recrawl": dict(self.recrawl), "sitemaps": dict(self.sitemaps)}

    def restore(self, doc: dict) -> None:
        self.bytes = int(doc.get("bytes", 0))
        self.requests = int(doc.get("requests", 0))
        self.robots_requests = int(doc.get("robots_requests", 0))
        self.rejected.update({k: int(v) for k, v in doc.get("rejected", {}).items()})
        self.page_errors.update({k: int(v) for k, v in doc.get("page_errors", {}).items()})
        self.recrawl.update({k: int(v) for k, v in doc.get("recrawl", {}).items()})
        self.sitemaps.update({k: int(v) for k, v in doc.get("sitemaps", {}).items()})


@dataclass
class Summary:
    """What a crawl did, printed at the end and returned by ``Engine.run``."""

    pages: int = 0
    bytes: int = 0
    elapsed: float = 0.0
    taken: int = 0
    queued: int = 0
    in_flight: int = 0
    forgotten: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    #: Pages fetched (and counted in ``pages``) whose content could not be used, by reason (``parseError``).
    page_errors: dict[str, int] = field(default_factory=dict)
    #: sitemaps: files read, URLs listed and queued, limits met (empty: none read).
    sitemaps: dict[str, int] = field(default_factory=dict)
    hosts: int = 0
    dns_queries: int = 0
    requests: int = 0
    robots_requests: int = 0
    stop_reason: str = ""
    failed: str | None = None
    peak_rss: int = 0
    connections_opened: int = 0
    reuses: int = 0
    h11_handovers: int = 0
    #: Times the loop stood still past the fetcher's sweep (SIGSTOP, a suspended VM...), and for how
    #: long in all: the deadlines in flight moved by as much (larbin_py.net.http, *The loop standing still*).
    stalls: int = 0
    stalled_seconds: float = 0.0
    cookies: dict | None = None  # the jar's counts (useCookies), see larbin_py.net.cookies
    dynamic: dict | None = None  # dynamicPages: renders by reason, sub-requests, browser (net.dynamic)
    #: TLS connections: versions and ALPN protocols negotiated, HTTP/2 requests and hosts fallen back
    #: to 1.1, Happy Eyeballs' fallbacks (larbin_py.net.http's stats); None when no TLS was spoken.
    tls: dict | None = None
    #: A recrawl's verdicts (larbin_py.recrawl): None in a crawl that revisits nothing.
    recrawl: dict | None = None

    @property
    def pages_per_second(self) -> float:
        return self.pages / self.elapsed if self.elapsed > 0 else 0.0

    def format(self) -> str:
        lines = [
            f"larbin_py: {self.stop_reason}",
            f"  pages fetched   {self.pages}  ({self.bytes} bytes, {self.pages_per_second:.1f} pages/s)",
            f"  elapsed         {self.elapsed:.1f} s",
            f"  URLs taken      {self.taken} = fetched {self.pages} + forgotten "
            f"{sum(self.forgotten.values())} + queued {self.queued} + in flight {self.in_flight}",
            f"  requests        {self.requests} (robots.txt {self.robots_requests})",
            f"  hosts           {self.hosts}",
            f"  DNS queries     {self.dns_queries}",
            f"  connections     {self.connections_opened} opened, {self.reuses} requests on kept-alive ones; "
            f"{self.h11_handovers} answers handed from llhttp to h11",
            f"  peak RSS        {self.peak_rss / 2**20:.1f} MB",
        ]
        if self.stalls:
            lines.append(f"  loop stalls     {self.stalls} ({self.stalled_seconds:.1f} s in all): the page "
                         "deadlines in flight moved by the time the process did not run")
        if self.forgotten:
            lines.append("  forgotten       " + ", ".join(f"{k} {v}" for k, v in sorted(self.forgotten.items())))
        if self.rejected:
            lines.append("  links refused   " + ", ".join(f"{k} {v}" for k, v in sorted(self.rejected.items())))
        if self.page_errors:
            lines.append("  pages unparsed  " + ", ".join(f"{k} {v}" for k, v in sorted(self.page_errors.items())))
        if self.sitemaps:
            lines.append("  sitemaps        " + ", ".join(f"{k} {v}" for k, v in sorted(self.sitemaps.items())))
        if self.cookies is not None:
            c = self.cookies
            why = ", ".join(f"{k} {v}" for k, v in sorted(c["refused"].items()))
            lines.append(f"  cookies         {c['cookies']} kept; {c['accepted']} accepted, "
                         f"{sum(c['refused'].values())} refused{f' ({why})' if why else ''}, "
                         f"{c['evicted']} evicted, {c['expired']} expired, {c['not_sent']} not sent")
        if self.dynamic is not None:
            d = self.dynamic
            refused = ", ".join(f"{k} {v}" for k, v in sorted(d["sub_refused"].items()))
            lines.append("  dynamic pages   " + ", ".join(f"{k} {v}" for k, v in d["pages"].items())
                         + f"; {d['sub_requests']} sub-requests, {sum(d['sub_refused'].values())} refused"
                         + (f" ({refused})" if refused else "")
                         + f"; browser crashes {d['crashes']}, starts {d['browser_starts']}")
        if self.tls is not None:
            t = self.tls
            lines.append("  TLS             " + ", ".join(f"{k} {v}" for k, v in sorted(t["tls_versions"].items()))
                         + "; ALPN " + (", ".join(f"{k} {v}" for k, v in sorted(t["alpn"].items())) or "none")
                         + f"; HTTP/2 requests {t['h2_requests']}, hosts back to 1.1 {t['h2_fallback_hosts']}")
        if self.recrawl is not None:
            r = self.recrawl
            lines.append(f"  recrawl         unchanged {r.get('unchanged', 0)} ({r.get('notModified', 0)} not "
                         f"modified), changed {r.get('changed', 0)}, new {r.get('new', 0)}, gone "
                         f"{r.get('gone', 0)}, kept {r.get('kept', 0)}, skipped {r.get('skipped', 0)}")
        if self.failed:
            lines.append(f"  FAILED: {self.failed}")
        return "\n".join(lines)


class EngineStats:
    """The summary and the snapshot of ``engine`` (an :class:`larbin_py.engine.Engine`)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self._rate_samples: deque[tuple[float, int, int]] = deque()

    def summary(self) -> Summary:
        """What the crawl did so far: printed at the end, returned by ``Engine.run``."""
        e = self.engine
        fr = e.frontier
        elapsed = e.checkpoints.elapsed()
        stats = getattr(e.edge.resolver, "stats", None)
        http = getattr(e.edge.fetcher, "stats", None)
        return Summary(
            pages=fr.fetched,
            bytes=e.counts.bytes,
            elapsed=elapsed,
            taken=fr.taken,
            queued=fr.queued,
            in_flight=fr.in_flight,
            forgotten=dict(fr.forgotten),
            rejected=dict(e.counts.rejected),
            page_errors=dict(e.counts.page_errors),
            sitemaps=dict(e.counts.sitemaps),
            hosts=fr.sites_total,
            dns_queries=_stat(stats, "queries_sent"),
            requests=e.counts.requests,
            robots_requests=e.counts.robots_requests,
            stop_reason=e.stop_reason,
            failed=e.failures.message,
            peak_rss=_peak_rss(),
            connections_opened=_stat(http, "connections_opened"),
            reuses=_stat(http, "reuses"),
            h11_handovers=_stat(http, "h11_handovers"),
            stalls=_stat(http, "stalls"),
            stalled_seconds=float(http.get("stalled_seconds", 0.0)) if isinstance(http, dict) else 0.0,
            cookies=e.crawl_state.cookies.stats if e.crawl_state.cookies is not None else None,
            dynamic=e.edge.dynamic.stats if e.edge.dynamic is not None else None,
            recrawl=self._recrawl(),
            tls=({k: http[k] for k in ("tls_versions", "alpn", "h2_requests", "h2_fallback_hosts")}
                 if isinstance(http, dict) and http.get("tls_versions") else None),
        )

    def _recrawl(self) -> dict | None:
        """A recrawl's verdicts, every one named (None when the crawl revisits nothing)."""
        rc = self.engine.recrawl
        if rc is None or not rc.active:
            return None
        return {v: self.engine.counts.recrawl.get(v, 0) for v in VERDICTS}

    def _flow_snapshot(self) -> dict:
        e = self.engine
        flow = e.flow
        state = flow.state() if flow is not None else {"srtt": None, "rtt_min": None, "rtt_max": None}
        return {
            "enabled": flow is not None,
            "srtt": state["srtt"],
            "rtt_min": state["rtt_min"],
            "rtt_max": state["rtt_max"],
            "max_requests": e.frontier.max_requests,
            "rtt_p50": _percentile(e.counts.rtts, 0.5),
            "rtt_p95": _percentile(e.counts.rtts, 0.95),
        }

    def snapshot(self) -> dict:
        """The stats snapshot (StatsSource interface; schema in docs/stats.md)."""
        e = self.engine
        fr = e.frontier
        loop_now = e._loop.time() if e._loop else 0.0
        uptime = loop_now - e._started if e._loop else 0.0
        samples = self._rate_samples
        samples.append((loop_now, fr.fetched, e.counts.bytes))
        while len(samples) > 2 and loop_now - samples[0][0] > 5.0:
            samples.popleft()
        t0, p0, b0 = samples[0]
        dt = loop_now - t0
        rate_now = (fr.fetched - p0) / dt if dt > 0 else 0.0
        bytes_rate = (e.counts.bytes - b0) / dt if dt > 0 else 0.0
        dns = getattr(e.edge.resolver, "stats", None)
        http = getattr(e.edge.fetcher, "stats", None)
        st = frontier_stats(fr)
        sites = st["sites"]
        return {
            "version": 1,
            "time": time.time(),
            "uptime": uptime,
            "state": e.state,
            "pages": {
                "fetched": fr.fetched,
                "bytes": e.counts.bytes,
                "rate_now": rate_now,
                "rate_avg": fr.fetched / uptime if uptime > 0 else 0.0,
                "bytes_rate_now": bytes_rate,
                "limit": e.config.limit_page or None,
                "errors": dict(e.counts.page_errors),
                "sitemaps": dict(e.counts.sitemaps),
            },
            "urls": {
                "taken": fr.taken,
                "seen": len(e.seen),
                "queued_disk": st["queued_disk"],
                "in_memory": st["in_memory"],
                "parked": st["parked"],
                "in_flight": st["in_flight"],
                "fetched": st["fetched"],
                "forgotten": st["forgotten"],
                "retry_wait": st["retry_wait"],
            },
            "gate": {"is_get": st["is_get"]},
            "dns": {
                "in_flight": _stat(dns, "in_flight"),
                "queued": _stat(dns, "queued"),
                "queries": _stat(dns, "queries_sent"),
                "cache_hits": _stat(dns, "cache_hits"),
                "failures": _stat(dns, "failures"),
            },
            "connections": {"open": st["requests"], "max": st["max_requests"]},
            "sites": {"known": sites["total"], "ready": sites["ready"], "waiting": sites["waiting"]},
            "process": {"rss_bytes": _rss(), "cpu_seconds": time.process_time(),
                        "loop_stalls": _stat(http, "stalls")},
            "flow": self._flow_snapshot(),
            "hosts": st["hosts"],
            "last": list(e.counts.last),
            "limit_time": e.config.limit_time or None,
            "dynamic": e.edge.dynamic.stats if e.edge.dynamic is not None else None,
            "recrawl": self._recrawl(),
        }


def _percentile(values, q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _stat(stats, name: str) -> int:
    if stats is None:
        return 0
    value = stats.get(name, 0) if isinstance(stats, dict) else getattr(stats, name, 0)
    if isinstance(value, dict):
        return sum(value.values())
    return int(value or 0)


def _peak_rss() -> int:
    """Peak resident memory of this process since it started (VmHWM), bytes."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
