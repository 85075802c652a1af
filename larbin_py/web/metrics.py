"""Prometheus text exposition (format 0.0.4) of a stats snapshot.

:func:`render_metrics` is a pure function of the snapshot dict
(``docs/stats.md``): no registry, no global state.  Every family gets its
``# HELP`` and ``# TYPE`` lines; counters end in ``_total``; label values
are escaped as the format requires (backslash, double quote, newline).
Fields that are missing or null are left out (their family stays, empty).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

__all__ = ["CONTENT_TYPE", "render_metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_STATES = ("starting", "running", "stopping", "finished", "failed")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: Any) -> str | None:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return repr(value)
    return None


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(
        self,
        name: str,
        kind: str,
        help_text: str,
        samples: Iterable[tuple[dict[str, str], Any]],
    ) -> None:
        self.lines.append(f"# HELP {name} {_escape_help(help_text)}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = _number(value)
            if text is None:
                continue
            if labels:
                inner = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items())
                self.lines.append(f"{name}{{{inner}}} {text}")
            else:
                self.lines.append(f"{name} {text}")

    def one(self, name: str, kind: str, help_text: str, value: Any) -> None:
        self.family(name, kind, help_text, [({}, value)])


def _get(snapshot: dict, section: str) -> dict:
    value = snapshot.get(section)
    return value if isinstance(value, dict) else {}


def render_metrics(snapshot: dict) -> str:
    """Render ``snapshot`` as Prometheus text format 0.0.4 (ends with a newline)."""
    w = _Writer()
    state = snapshot.get("state")
    w.family(
        "larbin_state",
        "gauge",
        "1 for the crawl's current state, 0 for the others.",
        [({"state": s}, int(s == state)) for s in _STATES],
    )
    w.one("larbin_uptime_seconds", "gauge", "Seconds since the crawl started.",
          snapshot.get("uptime"))
    w.one("larbin_limit_time_seconds", "gauge", "Configured crawl time limit (limitTime).",
          snapshot.get("limit_time"))

    pages = _get(snapshot, "pages")
    w.one("larbin_pages_fetched_total", "counter", "Pages fetched.", pages.get("fetched"))
    w.one("larbin_fetched_bytes_total", "counter", "Bytes of fetched pages.", pages.get("bytes"))
    w.family(
        "larbin_pages_per_second",
        "gauge",
        "Pages fetched per second, over the last seconds (now) or since start (avg).",
        [({"window": "now"}, pages.get("rate_now")), ({"window": "avg"}, pages.get("rate_avg"))],
    )
    w.one("larbin_fetched_bytes_per_second", "gauge", "Bytes fetched per second, now.",
          pages.get("bytes_rate_now"))
    w.one("larbin_pages_limit", "gauge", "Configured page limit (limitPage).", pages.get("limit"))
    errors = pages.get("errors")
    w.family(
        "larbin_pages_errors_total",
        "counter",
        "Pages fetched whose links could not be read, by reason (parseError).",
        [({"reason": str(r)}, n) for r, n in sorted(errors.items())] if isinstance(errors, dict) else [],
    )

    urls = _get(snapshot, "urls")
    w.one("larbin_urls_taken_total", "counter", "URLs taken into the URL store.", urls.get("taken"))
    w.one("larbin_urls_seen_total", "counter", "Distinct URLs in the seen set.", urls.get("seen"))
    w.one("larbin_urls_fetched_total", "counter", "URLs that ended fetched.", urls.get("fetched"))
    w.family(
        "larbin_urls",
        "gauge",
        "URLs waiting or in progress, by where they are.",
        [({"where": key}, urls.get(key))
         for key in ("queued_disk", "in_memory", "parked", "in_flight", "retry_wait")],
    )
    forgotten = urls.get("forgotten")
    w.family(
        "larbin_urls_forgotten_total",
        "counter",
        "URLs that ended forgotten, by reason.",
        [({"reason": str(r)}, n) for r, n in sorted(forgotten.items())]
        if isinstance(forgotten, dict) else [],
    )

    gate = _get(snapshot, "gate")
    w.one("larbin_gate_open", "gauge", "1 when the loader may take URLs from the store (isGet).",
          gate.get("is_get"))

    dns = _get(snapshot, "dns")
    w.one("larbin_dns_in_flight", "gauge", "DNS queries in flight.", dns.get("in_flight"))
    w.one("larbin_dns_queued", "gauge", "Names waiting for a DNS query slot.", dns.get("queued"))
    w.one("larbin_dns_queries_total", "counter", "DNS queries sent.", dns.get("queries"))
    w.one("larbin_dns_cache_hits_total", "counter", "Names answered from the DNS cache.",
          dns.get("cache_hits"))
    w.one("larbin_dns_failures_total", "counter", "DNS resolutions that failed.",
          dns.get("failures"))

    conns = _get(snapshot, "connections")
    w.one("larbin_connections_open", "gauge", "Open HTTP connections.", conns.get("open"))
    w.one("larbin_connections_max", "gauge", "Connection cap (pagesConnexions).", conns.get("max"))

    sites = _get(snapshot, "sites")
    w.family(
        "larbin_sites",
        "gauge",
        "Sites known, ready to fetch, or waiting (politeness, DNS or robots.txt).",
        [({"state": key}, sites.get(key)) for key in ("known", "ready", "waiting")],
    )

    proc = _get(snapshot, "process")
    w.one("larbin_process_resident_memory_bytes", "gauge", "Resident set size of the crawler.",
          proc.get("rss_bytes"))
    w.one("larbin_process_cpu_seconds_total", "counter", "CPU time used by the crawler.",
          proc.get("cpu_seconds"))

    flow = _get(snapshot, "flow")
    w.one("larbin_flow_enabled", "gauge", "1 when round-trip-time flow control is on.",
          flow.get("enabled"))
    w.family(
        "larbin_flow_rtt_seconds",
        "gauge",
        "Request round-trip time seen by flow control: smoothed, min, max.",
        [({"stat": "srtt"}, flow.get("srtt")), ({"stat": "min"}, flow.get("rtt_min")),
         ({"stat": "max"}, flow.get("rtt_max"))],
    )
    w.one("larbin_flow_max_requests", "gauge", "Concurrent requests allowed by flow control.",
          flow.get("max_requests"))

    hosts = _get(snapshot, "hosts")
    w.family(
        "larbin_busiest_host_pages",
        "gauge",
        "Pages fetched from each of the busiest hosts.",
        [({"host": str(h.get("host"))}, h.get("pages"))
         for h in hosts.get("busiest") or () if isinstance(h, dict)],
    )
    w.family(
        "larbin_failing_host_errors",
        "gauge",
        "Failed fetches for each of the most failing hosts.",
        [({"host": str(h.get("host"))}, h.get("errors"))
         for h in hosts.get("failing") or () if isinstance(h, dict)],
    )
    dyn = snapshot.get("dynamic") if isinstance(snapshot, dict) else None
    if isinstance(dyn, dict):  # dynamicPages on (docs/dynamic.md)
        w.family(
            "larbin_dynamic_pages_total",
            "counter",
            "Pages rendered in Chromium (dynamicPages), by how the render ended.",
            [({"reason": str(r)}, n) for r, n in sorted((dyn.get("pages") or {}).items())],
        )
        w.one("larbin_dynamic_sub_requests_total", "counter",
              "Requests made for the scripts of dynamic pages (also in the crawl's requests).",
              dyn.get("sub_requests"))
        refused = dyn.get("sub_refused")
        w.family(
            "larbin_dynamic_sub_refused_total",
            "counter",
            "Requests of dynamic pages' scripts refused, by reason.",
            [({"reason": str(r)}, n) for r, n in sorted(refused.items())] if isinstance(refused, dict) else [],
        )
        w.one("larbin_dynamic_browser_crashes_total", "counter", "Chromium crashes (each restarted).",
              dyn.get("crashes"))
    recrawl = snapshot.get("recrawl") if isinstance(snapshot, dict) else None
    if isinstance(recrawl, dict):  # --recrawl (docs/recrawl.md)
        w.family(
            "larbin_recrawl_pages_total",
            "counter",
            "A recrawl's pages by verdict: unchanged (notModified: those answered 304), changed, new, gone, "
            "kept, skipped (revisitAfter).",
            [({"verdict": str(v)}, n) for v, n in recrawl.items()],
        )
    analysis = _get(snapshot, "analysis")  # the analysis stage (issue 22), when analysisWorkers > 0
    if analysis:
        alerts = analysis.get("alerts") if isinstance(analysis.get("alerts"), dict) else {}
        w.one("larbin_alerts_total", "counter", "Alerts raised (stateDir/alerts.log).", alerts.get("count"))
        w.one("larbin_analysis_pending", "gauge", "Analysis tasks queued or running.", analysis.get("pending"))
        w.one("larbin_analysis_tasks_finished_total", "counter", "Analysis tasks that succeeded.",
              analysis.get("finished"))
        w.one("larbin_analysis_tasks_failed_total", "counter", "Analysis tasks failed for good (each alerted).",
              analysis.get("failed"))
        tries = analysis.get("failed_tries")
        w.family(
            "larbin_analysis_tries_failed_total",
            "counter",
            "Failed tries of analysis tasks, by reason (error, timeout, crash).",
            [({"reason": str(r)}, n) for r, n in sorted(tries.items())] if isinstance(tries, dict) else [],
        )
    w.lines.append("")
    return "\n".join(w.lines)
