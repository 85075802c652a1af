"""larbin_py.sim: a deterministic synthetic web on loopback, and its ground truth.

The independent oracle for end-to-end tests and benchmarks: it imports
nothing of the crawler (not ``larbin_py.url``, ``robots`` or ``parse``:
tests/test_imports.py checks it).

* :class:`SimConfig` / :class:`SimWeb` (``sim.web``): generation from a seed;
* :class:`Sim`: ``async with Sim(SimConfig(...)) as sim`` runs the HTTP server
  on the web's loopback IPs (and the DNS server when ``dns=True``);
* :class:`Fault`: injectable misbehaviour; :class:`RequestLog`: what was asked;
* :class:`CrawlRules` -> :class:`Truth` (``sim.truth(rules)``): what a correct
  crawl requests, saves and forgets, and why.

Standalone: ``python -m larbin_py.sim --hosts 500 --dns-port 5353`` and
``python -m larbin_py.sim export DIR`` (static files + nginx.conf).
"""

from .facade import Sim, plan_ips
from .faults import Fault, FaultPlan
from .log import Connection, Request, RequestLog
from .truth import CrawlRules, Rules, Truth, compute_truth
from .urls import canonical, resolve
from .web import Host, Link, Resource, RobotsProfile, SimConfig, SimWeb

__all__ = [
    "Sim", "SimConfig", "SimWeb", "Host", "Link", "Resource", "RobotsProfile", "Fault",
    "FaultPlan", "Request", "Connection", "RequestLog", "CrawlRules", "Truth", "Rules",
    "compute_truth", "canonical", "resolve", "plan_ips",
]
