"""The frontier's published interface (larbin_py.frontier.protocol): the frontier implements
it, and its callers use nothing else of it, nor finish it by assignment."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import larbin_py
from larbin_py.distributed.crawl_worker import DistFrontier
from larbin_py.frontier.assembly import assemble
from larbin_py.frontier.ip_leases import LeasePolicy
from larbin_py.frontier.protocol import DistScheduler, Scheduler
from larbin_py.testing.fakes import memory_stores

from test_frontier_seams import _conforms

PACKAGE = Path(larbin_py.__file__).parent

#: The modules that use a Scheduler: the engine and its parts, the crawl states, the frontier's own codec and stats.
SCHEDULER_USERS = ["engine.py", "engine_stats.py", "pages.py", "robots_fetch.py", "checkpoints.py",
                   "crawl_state.py", "journal.py", "wiring.py", "net/dynamic.py", "frontier/codec.py",
                   "frontier/stats.py", "testing/state.py", "distributed/crawl_worker.py"]
#: ... and the one that uses a DistScheduler.
DIST_USERS = ["distributed/coordinator.py"]
#: What a caller may set: flowControl moves the cap of requests running.
SETTABLE = {"max_requests"}


def members(proto) -> dict:
    """The Protocol's members, its bases' included: name -> function, property, or None (data)."""
    found: dict = {}
    for klass in reversed(proto.__mro__):
        if klass in (object,) or klass.__module__ == "typing":
            continue
        for name in vars(klass).get("__annotations__", {}):
            found[name] = None
        for name, value in vars(klass).items():
            if not name.startswith("_") and (callable(value) or isinstance(value, property)):
                found[name] = value
    return found


def frontier(**kw):
    return assemble(ram_urls=10, max_urls_by_site=5, max_requests=5, wait_duration=1.0, rng=random.Random(1),
                    stores=memory_stores(), **kw)


def test_the_frontier_implements_the_scheduler_and_a_workers_the_dist_scheduler():
    fr = frontier()
    assert isinstance(fr, Scheduler) and _conforms(fr, Scheduler, members) == []
    worker = frontier(ip_leases=LeasePolicy(wait_duration=1.0),
                      frontier_class=lambda *a, **kw: DistFrontier(*a, ended=lambda: False, **kw))
    assert isinstance(worker, DistScheduler) and _conforms(worker, DistScheduler, members) == []
    assert not worker.idle() and worker.locally_idle()  # idle here, but the crawl has not ended


def test_the_conformance_check_sees_what_is_missing():
    class Half:
        def load(self, now):  # max_reads is missing
            return 0

    problems = _conforms(Half(), Scheduler, members)
    assert "load: positional max_reads missing" in problems and "next_request missing" in problems


def frontier_uses(path: Path) -> tuple[set[str], set[str]]:
    """The attributes ``path`` reads of a frontier (``fr``, ``frontier``, ``x.fr``, ``x.frontier``),
    and those it assigns."""

    def is_frontier(node) -> bool:
        return (isinstance(node, ast.Name) and node.id in ("fr", "frontier")) or \
            (isinstance(node, ast.Attribute) and node.attr in ("fr", "frontier"))

    used, assigned = set(), set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_frontier(node.value):
            (assigned if isinstance(node.ctx, ast.Store) else used).add(node.attr)
    return used, assigned


def test_callers_use_only_the_protocol_and_set_nothing_but_the_request_cap():
    allowed = {**{m: set(members(Scheduler)) for m in SCHEDULER_USERS},
               **{m: set(members(DistScheduler)) for m in DIST_USERS}}
    allowed["distributed/crawl_worker.py"] |= {"locally_idle"}  # its own DistFrontier's
    outside, set_after = {}, {}
    for module, names in allowed.items():
        used, assigned = frontier_uses(PACKAGE / module)
        if used - names:
            outside[module] = sorted(used - names)
        if assigned - SETTABLE:
            set_after[module] = sorted(assigned - SETTABLE)
    assert outside == {}
    assert set_after == {}


def test_the_caller_check_sees_a_private_member_and_an_assignment(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(self, fr):\n    fr._heap.clear()\n    self.frontier.on_ip_wanted = f\n"
                   "    return self.fr.next_request(0.0)\n")
    assert frontier_uses(bad) == ({"_heap", "next_request"}, {"on_ip_wanted"})
