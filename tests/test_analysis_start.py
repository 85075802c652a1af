"""Issue 37: the analysis processes start with the crawl, and nothing waits for them.

The engine on its fakes (tests/test_engine_fakes.py), with one analysis
process: its start begins before the first request, the first request does
not wait for it, the pages that come before it is ready are parsed on the
loop (``analysisShare``), and once it is ready the loop parses nothing.
Checked by the order of events, never by timings.
"""

from __future__ import annotations

import asyncio
import os

from larbin_py import parse as parse_mod
from larbin_py.analysis.pool import WorkerPool
from larbin_py.engine import Engine
from larbin_py.testing.fakes import MemorySeen, memory_stores

from test_engine_fakes import FakeFetcher, FakeResolver, config

#: Every page the fakes' web leads to (two of them a 404 and a redirect).
FETCHED = {"http://a.test/", "http://a.test/p1", "http://a.test/p2", "http://a.test/target", "http://b.test/",
           "http://a.test/gone", "http://a.test/moved"}


class OrderedFetcher(FakeFetcher):
    """The fakes' web; each fetch noted in ``events``, after ``before_first`` for the first."""

    def __init__(self, events: list, before_first=None) -> None:
        super().__init__()
        self.events = events
        self.before_first = before_first

    async def fetch(self, url, ip, port, **kw):
        if self.before_first is not None:
            wait, self.before_first = self.before_first, None
            await wait()
        self.events.append(("fetch", url))
        return await super().fetch(url, ip, port, **kw)


def engine_for(tmp_path, fetcher) -> Engine:
    return Engine(config(tmp_path).replace(analysis_workers=1, analysis_share=True), resolver=FakeResolver(),
                  fetcher=fetcher, stores=memory_stores(), seen=MemorySeen(), out=open("/dev/null", "w"),
                  err=open("/dev/null", "w"))


async def test_the_first_request_does_not_wait_for_the_analysis_process(tmp_path, monkeypatch):
    """The process's start is held for the whole crawl: the crawl still runs to its
    end, its start having begun before the first request, every page parsed on the loop."""
    events: list = []
    held = asyncio.Event()  # never set: the process never becomes ready
    spawn = WorkerPool._spawn

    async def slow_spawn(self):
        events.append(("spawn",))
        await held.wait()
        return await spawn(self)

    monkeypatch.setattr(WorkerPool, "_spawn", slow_spawn)
    engine = engine_for(tmp_path, OrderedFetcher(events))
    summary = await asyncio.wait_for(engine.run(), 30)
    assert events[0] == ("spawn",)  # started with the crawl, before its first request
    assert events[1] == ("fetch", "http://a.test/robots.txt")
    assert summary.pages == 5 and summary.failed is None  # the links were followed all the same
    st = engine.analysis
    assert st.inline == 5 and st.finished == 0 and not st.pool.procs


async def test_once_a_process_is_ready_the_loop_parses_nothing(tmp_path, monkeypatch):
    """The first request waits here (the fetcher) until the process started with the
    crawl is ready: every page then goes to it, none is parsed on the loop."""
    parsed_on_loop = []
    extract = parse_mod.extract
    monkeypatch.setattr(parse_mod, "extract", lambda *a, **kw: parsed_on_loop.append(a[1]) or extract(*a, **kw))
    engine = None

    async def until_ready():
        while not engine.analysis.pool.procs:  # adopted once its ready line came
            await asyncio.sleep(0.01)

    events: list = []
    engine = engine_for(tmp_path, OrderedFetcher(events, before_first=until_ready))
    summary = await asyncio.wait_for(engine.run(), 60)
    assert summary.pages == 5 and summary.failed is None
    st = engine.analysis
    assert parsed_on_loop == [] and st.inline == 0
    assert st.finished == 5 and st.pool.started == 1  # the links came from the process
    assert {url for kind, url in events if not url.endswith("robots.txt")} == FETCHED


async def test_a_crawl_starts_one_process_a_core_with_itself_and_the_rest_as_tasks_wait(tmp_path, monkeypatch):
    """analysisWorkers 64 on a 2-core machine: the crawl's start spawns 2 processes
    (64 importing at once would only take the cores from the loop; a crawl of
    nothing with every number at its maximum took 23 s for its 256); more start
    only when tasks wait for a slot."""
    from larbin_py.analysis import pool as pool_mod
    assert pool_mod.warm_size(64) >= 1 and pool_mod.warm_size(1) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    events: list = []
    spawn = WorkerPool._spawn

    async def noted_spawn(self):
        events.append(("spawn",))
        return await spawn(self)

    monkeypatch.setattr(WorkerPool, "_spawn", noted_spawn)
    engine = Engine(config(tmp_path).replace(analysis_workers=64, analysis_share=True), resolver=FakeResolver(),
                    fetcher=OrderedFetcher(events), stores=memory_stores(), seen=MemorySeen(),
                    out=open("/dev/null", "w"), err=open("/dev/null", "w"))
    summary = await asyncio.wait_for(engine.run(), 30)
    assert summary.pages == 5 and summary.failed is None
    assert events[:2] == [("spawn",), ("spawn",)] and events[2] == ("fetch", "http://a.test/robots.txt")
    assert events.count(("spawn",)) <= 5  # at most one more a page that waited
