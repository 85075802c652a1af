"""The seam between the crawl engine and the stats web server.

The engine implements :class:`StatsSource`; everything in ``larbin_py.web``
only *reads* through it.  ``snapshot()`` returns a plain dict in the
documented schema (``docs/stats.md``, version :data:`SCHEMA_VERSION`), and
``submit_urls()`` hands URLs typed by an operator to the engine.

:func:`check_snapshot` validates a snapshot against the schema and returns the
problems as a list of strings (empty when valid), so the engine's tests can
assert conformance.  :class:`FakeSource` is a scriptable source for tests and
demos.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol, runtime_checkable

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "STATES",
    "FakeSource",
    "StatsSource",
    "check_snapshot",
    "empty_snapshot",
]

SCHEMA_VERSION = 1

#: The crawl states, in lifecycle order.
STATES = ("starting", "running", "stopping", "finished", "failed")

_INT = (int,)
_NUM = (int, float)
_OPT_INT = (int, type(None))
_OPT_NUM = (int, float, type(None))

#: Snapshot schema: key -> accepted types, a nested schema dict, or a
#: one-element list holding the schema of each item of a list.  The special
#: key ``"*"`` means "any key, values of this type" (a str -> int mapping).
SCHEMA: dict[str, Any] = {
    "version": _INT,
    "time": _NUM,
    "uptime": _NUM,
    "state": (str,),
    "pages": {
        "fetched": _INT,
        "bytes": _INT,
        "rate_now": _NUM,
        "rate_avg": _NUM,
        "bytes_rate_now": _NUM,
        "limit": _OPT_INT,
        "errors": {"*": _INT},
    },
    "urls": {
        "taken": _INT,
        "seen": _INT,
        "queued_disk": _INT,
        "in_memory": _INT,
        "parked": _INT,
        "in_flight": _INT,
        "fetched": _INT,
        "forgotten": {"*": _INT},
        "retry_wait": _INT,
    },
    "gate": {"is_get": (bool,)},
    "dns": {
        "in_flight": _INT,
        "queued": _INT,
        "queries": _INT,
        "cache_hits": _INT,
        "failures": _INT,
    },
    "connections": {"open": _INT, "max": _INT},
    "sites": {"known": _INT, "ready": _INT, "waiting": _INT},
    "process": {"rss_bytes": _INT, "cpu_seconds": _NUM},
    "flow": {
        "enabled": (bool,),
        "srtt": _OPT_NUM,
        "rtt_min": _OPT_NUM,
        "rtt_max": _OPT_NUM,
        "max_requests": _INT,
        "rtt_p50": _OPT_NUM,
        "rtt_p95": _OPT_NUM,
    },
    "hosts": {
        "busiest": [{"host": (str,), "pages": _INT}],
        "failing": [{"host": (str,), "errors": _INT}],
    },
    "last": [
        {
            "url": (str,),
            "status": _OPT_INT,
            "reason": (str,),
            "bytes": _INT,
            "time": _NUM,
        }
    ],
    "limit_time": _OPT_NUM,
}


@runtime_checkable
class StatsSource(Protocol):
    """What the web server, the input port and the status line read.

    Both methods are called on the event loop and must be quick: the engine
    keeps its counters up to date and only assembles a dict here.
    """

    def snapshot(self) -> dict:
        """The current statistics, schema version 1 (``docs/stats.md``)."""
        ...

    def submit_urls(self, urls: list[str]) -> list[dict]:
        """Offer ``urls`` to the crawl; one verdict per URL, in order.

        Each verdict is ``{"url": str, "result": "accepted" | "duplicate" |
        "rejected", "reason": str | None}``.
        """
        ...


def _check(value: Any, schema: Any, path: str, problems: list[str]) -> None:
    if isinstance(schema, tuple):
        # bool is an int subclass: only accept it where bool is asked for.
        if isinstance(value, bool) and bool not in schema:
            problems.append(f"{path}: expected {_names(schema)}, got bool")
        elif not isinstance(value, schema):
            problems.append(
                f"{path}: expected {_names(schema)}, got {type(value).__name__}"
            )
    elif isinstance(schema, list):
        if not isinstance(value, list):
            problems.append(f"{path}: expected list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check(item, schema[0], f"{path}[{i}]", problems)
    else:
        if not isinstance(value, dict):
            problems.append(f"{path}: expected object, got {type(value).__name__}")
            return
        if "*" in schema:
            for key, item in value.items():
                if not isinstance(key, str):
                    problems.append(f"{path}: non-string key {key!r}")
                _check(item, schema["*"], f"{path}.{key}", problems)
            return
        for key, sub in schema.items():
            where = f"{path}.{key}" if path else key
            if key not in value:
                problems.append(f"{where}: missing")
            else:
                _check(value[key], sub, where, problems)


def _names(types: tuple) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def check_snapshot(snapshot: Any) -> list[str]:
    """Return the ways ``snapshot`` departs from the schema (empty: valid).

    Extra keys are allowed (forward compatibility); missing keys, wrong
    types, an unknown ``state`` or another ``version`` are reported.
    """
    problems: list[str] = []
    _check(snapshot, SCHEMA, "", problems)
    if isinstance(snapshot, dict):
        if snapshot.get("version") not in (SCHEMA_VERSION, None):
            problems.append(f"version: expected {SCHEMA_VERSION}")
        if "state" in snapshot and snapshot["state"] not in STATES:
            problems.append(f"state: unknown {snapshot['state']!r}")
    return problems


def empty_snapshot(now: float | None = None) -> dict:
    """A valid snapshot with every counter at zero (state ``starting``)."""
    return {
        "version": SCHEMA_VERSION,
        "time": time.time() if now is None else now,
        "uptime": 0.0,
        "state": "starting",
        "pages": {
            "fetched": 0,
            "bytes": 0,
            "rate_now": 0.0,
            "rate_avg": 0.0,
            "bytes_rate_now": 0.0,
            "limit": None,
            "errors": {},
        },
        "urls": {
            "taken": 0,
            "seen": 0,
            "queued_disk": 0,
            "in_memory": 0,
            "parked": 0,
            "in_flight": 0,
            "fetched": 0,
            "forgotten": {},
            "retry_wait": 0,
        },
        "gate": {"is_get": True},
        "dns": {"in_flight": 0, "queued": 0, "queries": 0, "cache_hits": 0, "failures": 0},
        "connections": {"open": 0, "max": 0},
        "sites": {"known": 0, "ready": 0, "waiting": 0},
        "process": {"rss_bytes": 0, "cpu_seconds": 0.0},
        "flow": {
            "enabled": False,
            "srtt": None,
            "rtt_min": None,
            "rtt_max": None,
            "rtt_p50": None,
            "rtt_p95": None,
            "max_requests": 0,
        },
        "hosts": {"busiest": [], "failing": []},
        "last": [],
        "limit_time": None,
    }


class FakeSource:
    """A scriptable :class:`StatsSource` for tests and demos.

    ``data`` is the snapshot dict returned (a fresh deep-enough copy each
    call, with ``time`` and ``uptime`` filled from the clocks).  Mutate it
    directly or use :meth:`advance`.  ``submit_urls`` accepts http(s) URLs
    once, answers ``duplicate`` the second time and ``rejected``/``badUrl``
    for anything else; ``submitted`` records every accepted URL.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._wall = wall
        self._start = clock()
        self.data = empty_snapshot(wall())
        self.data["state"] = "running"
        self.submitted: list[str] = []
        self.snapshots = 0

    def advance(self, pages: int = 1, bytes_per_page: int = 1000, **forgotten: int) -> None:
        """Count ``pages`` more fetched pages and ``forgotten`` URLs by reason."""
        p, u = self.data["pages"], self.data["urls"]
        p["fetched"] += pages
        p["bytes"] += pages * bytes_per_page
        u["fetched"] += pages
        u["taken"] += pages + sum(forgotten.values())
        u["seen"] = max(u["seen"], u["taken"])
        for reason, n in forgotten.items():
            u["forgotten"][reason] = u["forgotten"].get(reason, 0) + n

    def snapshot(self) -> dict:
        self.snapshots += 1
        snap = {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.data.items()}
        snap["urls"]["forgotten"] = dict(self.data["urls"]["forgotten"])
        snap["time"] = self._wall()
        snap["uptime"] = self._clock() - self._start
        return snap

    def submit_urls(self, urls: list[str]) -> list[dict]:
        verdicts = []
        for url in urls:
            if not url.startswith(("http://", "https://")):
                verdicts.append({"url": url, "result": "rejected", "reason": "badUrl"})
            elif url in self.submitted:
                verdicts.append({"url": url, "result": "duplicate", "reason": None})
            else:
                self.submitted.append(url)
                verdicts.append({"url": url, "result": "accepted", "reason": None})
        return verdicts
