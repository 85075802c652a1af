"""The stats web server and friends (Larbin's port-8081 webserver, today).

* :class:`StatsServer` — h11 server on the crawl's loop: dashboard, JSON,
  Prometheus metrics, health check, URL input (``server.py``).
* :class:`InputServer` — Larbin's plain TCP URL input port (``input.py``).
* ``guard.py`` — who may ask: the Host check (DNS rebinding), the
  cross-site rules of ``POST /urls``, HTTP lines on the input port.
* :class:`StatsHistory` — time series sampled from the source (``history.py``).
* :func:`render_metrics` — snapshot -> Prometheus text (``metrics.py``).
* :class:`StatusLine`, :func:`format_status` — printStats (``terminal.py``).
* :class:`StatsSource` — what the engine implements (``source.py``); the
  snapshot schema is documented in ``docs/stats.md``.

It sees the crawl only through :class:`StatsSource`: it may import the
frontier's address rules (what is loopback), never the engine, the
network, the outputs, the analysis stage, the distributed mode or the
synthetic web (tests/test_imports.py).
"""

from .history import StatsHistory
from .input import InputServer
from .metrics import render_metrics
from .server import StatsServer
from .source import FakeSource, StatsSource, check_snapshot, empty_snapshot
from .terminal import StatusLine, format_status

__all__ = [
    "FakeSource",
    "InputServer",
    "StatsHistory",
    "StatsServer",
    "StatsSource",
    "StatusLine",
    "check_snapshot",
    "empty_snapshot",
    "format_status",
    "render_metrics",
]
