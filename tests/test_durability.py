"""Issue 18 #2-#4: a crash costs only the requests in flight; disk work off the loop.

The crawler runs as a real process against a sim served by the test's own
loop and is killed with SIGKILL at random moments, each followed by
``--reload``; the sim's request log is the ground truth of what was served.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import time
from collections import Counter

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.engine import Engine
from larbin_py.output import INDEX_NAME, make_output
from larbin_py.output import writer as writer_mod
from larbin_py.sim import Sim

from test_state import check_mirror, page_requests, sim_config, start_crawler, write_conf
from test_e2e import make_config

pytestmark = pytest.mark.slow


def conservation(err_text: str) -> tuple[int, int]:
    """(taken, fetched + forgotten + queued + in flight) from the last summary printed."""
    m = re.findall(r"URLs taken\s+(\d+) = fetched (\d+) \+ forgotten (\d+) \+ queued (\d+) \+ in flight (\d+)",
                   err_text)
    taken, fetched, forgotten, queued, in_flight = map(int, m[-1])
    assert queued == 0 and in_flight == 0
    return taken, fetched + forgotten


@pytest.mark.async_timeout(280)
@pytest.mark.parametrize("mode", ["mirror", "save"])
async def test_sigkills_cost_at_most_the_requests_in_flight(tmp_path, mode):
    rng = random.Random(18 if mode == "mirror" else 19)
    async with Sim(sim_config(41)) as sim:
        # Checkpoints far apart: without the journal a kill would cost everything since the last.
        config = make_config(tmp_path, sim, output_mode=mode, wait_duration=0.05,
                             pages_connexions=8, checkpoint_interval=60.0)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        total = len(truth.must_request)
        conf = write_conf(tmp_path, config)
        args: tuple[str, ...] = ()
        kills = 0
        for fraction in sorted(rng.uniform(0.15, 0.85) for _ in range(3)):
            proc = await start_crawler(conf, *args, cwd=str(tmp_path))
            target = int(fraction * total)
            await sim.log.wait_for(lambda log: len(page_requests(log)) >= target, timeout=120)
            proc.kill()
            assert await proc.wait() == -signal.SIGKILL
            kills += 1
            args = ("--reload",)
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 200) == 0, (tmp_path / "crawler.err").read_text()
        err = (tmp_path / "crawler.err").read_text()
        assert err.count("continuing the crawl saved in") == 3
        fetched = page_requests(sim.log)
        assert set(fetched) == truth.must_request  # full coverage, nothing lost
        twice = sum(n - 1 for n in Counter(fetched).values() if n > 1)
        # pagesConnexions bounds the requests in flight (and not yet committed) at a kill
        print(f"{mode}: {twice} pages served twice after {kills} kills")
        assert twice <= kills * config.pages_connexions, twice
        with open(os.path.join(config.save_dir, INDEX_NAME), encoding="utf-8") as f:
            lines = f.read().splitlines()
        assert len(lines) == len({line.split("\t", 1)[0] for line in lines}) == len(truth.saved)
        if mode == "mirror":
            check_mirror(config.save_dir, truth)  # every file named is whole, as served
        else:
            for line in lines:
                url, path = line.split("\t")[:2]
                with open(os.path.join(config.save_dir, path), "rb") as f:
                    assert f.read() == truth.saved[url], url
        taken, accounted = conservation(err)
        assert taken == accounted


class SlowDisk:
    """An output whose every write takes ``delay`` seconds (a slow disk)."""

    def __init__(self, real, delay: float):
        self.real, self.delay = real, delay
        self.threads: set[str] = set()

    def write(self, doc):
        import threading

        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)  # the disk, not the test, waits
        return self.real.write(doc)

    def __getattr__(self, name):
        return getattr(self.real, name)


@pytest.mark.async_timeout(120)
async def test_a_slow_disk_never_blocks_the_loop_and_the_gate_bounds_its_queue(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_mod, "MAX_BACKLOG", 4)
    async with Sim(sim_config(42)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.0,
                             pages_connexions=6, limit_page=40)
        disk = SlowDisk(make_output(config), 0.1)
        engine = Engine(config, output=disk)
        gaps, backlog = [], []

        async def ticker():
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now
                if engine._writer is not None:
                    backlog.append(engine._writer.backlog)

        tick = asyncio.ensure_future(ticker())
        try:
            summary = await engine.run()
        finally:
            tick.cancel()
        assert summary.failed is None
        assert summary.pages >= 40
        assert disk.threads == {"larbin-writer"}
        # 40 writes of 0.1 s took 4 s; the loop never waited for one of them
        assert max(gaps) < 0.08, max(gaps)
        # the gate held: queued pages beyond the bound are only those in flight when it closed
        assert max(backlog) <= 4 + config.pages_connexions + 2, max(backlog)
