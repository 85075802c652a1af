"""A worker's own failures, run in this process (``run_worker``) against a real
redis-server and the synthetic web, and the worker started again after each.

* an exception escaping the coordinator (a bug) fails the worker loudly:
  exit 1, the traceback printed; its outcomes not acked stay pending, and
  the worker started again (the launcher's respawn) ends the crawl exactly;
* the output that cannot be made durable (a full disk) is reported as a
  full stateDir is in the single process; nothing is acked for it;
* the analysis spool is confirmed and trimmed while the crawl runs;
* a worker killed with analysis tasks pending resumes them when started
  again (a respawn used to delete them: their pages were acked already).
"""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
import signal
from collections import Counter

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.distributed.coordinator import Coordinator
from larbin_py.distributed.redisio import RedisIO
from larbin_py.distributed.crawl_worker import DistState, run_worker
from larbin_py.output.base import INDEX_NAME, parse_index_line
from larbin_py.sim import Sim

from helpers.distributed import (CRAWL, Workers, check_conservation, requested_urls, sim_config, wait_for,
                                 worker_config)

pytestmark = pytest.mark.slow


async def run_one(config, **kw) -> tuple[int, str]:
    err = io.StringIO()
    code = await run_worker(config, err=err, **kw)
    return code, err.getvalue()


@pytest.mark.async_timeout(120)
async def test_an_error_escaping_the_coordinator_fails_the_worker_loudly_and_its_respawn_ends_the_crawl(
        tmp_path, redis_server, monkeypatch):
    reads = Counter()
    original = Coordinator._read

    def broken(self, p, r, asked):
        reads["n"] += 1
        if reads["n"] == 4:
            raise RuntimeError("a bug in a read's handler")
        return original(self, p, r, asked)

    async with Sim(sim_config(seed=31, hosts=16, pages_per_host=(3, 6))) as sim:
        config = worker_config(tmp_path, sim, redis_server.url, "w1")
        monkeypatch.setattr(Coordinator, "_read", broken)
        code, text = await run_one(config)
        assert code == 1, text[-2000:]
        assert "worker w1: internal error in the coordinator:" in text
        assert "Traceback" in text and "RuntimeError: a bug in a read's handler" in text
        monkeypatch.setattr(Coordinator, "_read", original)
        code, text = await run_one(config, reload=True)  # as the launcher starts it again
        assert code == 0, text[-2000:]
        truth = sim.truth(crawl_rules(config, sim.seeds))
        assert set(requested_urls(sim)) == truth.must_request
        await check_conservation(redis_server.url, config, truth)


@pytest.mark.async_timeout(120)
async def test_an_output_that_cannot_be_made_durable_is_a_full_disk_and_acks_nothing(
        tmp_path, redis_server, monkeypatch):
    syncs = Counter()
    original = DistState._durable

    async def full(self):
        syncs["n"] += 1
        if syncs["n"] >= 3:
            raise OSError(errno.ENOSPC, "No space left on device", os.path.join(self.config.save_dir, "x"))
        return await original(self)

    async with Sim(sim_config(seed=37, hosts=16, pages_per_host=(3, 6))) as sim:
        config = worker_config(tmp_path, sim, redis_server.url, "w1")
        monkeypatch.setattr(DistState, "_durable", full)
        code, text = await run_one(config)
        assert code == 1, text[-2000:]
        assert "save/x: no space left on device (ENOSPC)" in text and "Traceback" not in text, text[-2000:]
        rio = await RedisIO(redis_server.url, CRAWL, partitions=64).connect()
        try:
            t = (await rio.view()).totals
        finally:
            await rio.close()
        acked = t.fetched + sum(t.forgotten.values())
        monkeypatch.setattr(DistState, "_durable", original)
        code, text = await run_one(config, reload=True)
        assert code == 0, text[-2000:]
        truth = sim.truth(crawl_rules(config, sim.seeds))
        assert set(requested_urls(sim)) == truth.must_request
        await check_conservation(redis_server.url, config, truth)
        assert acked < t.accepted  # the first run's last outcomes were left pending, not acked


@pytest.mark.async_timeout(120)
async def test_the_analysis_spool_is_trimmed_while_the_worker_crawls(tmp_path, redis_server, monkeypatch):
    import larbin_py.analysis.queue as queue_mod

    monkeypatch.setattr(queue_mod, "SEGMENT_BYTES", 8 << 10)
    async with Sim(sim_config(seed=41, hosts=24, pages_per_host=(5, 9), body_size=(2000, 4000))) as sim:
        config = worker_config(tmp_path, sim, redis_server.url, "w1", analysis_workers=1,
                               analyzers=(("meta", "meta"),), analysis_dir=str(tmp_path / "analysis"),
                               checkpoint_interval=0.2)
        spool = os.path.join(config.state_dir, "analysis-w1")
        peak = Counter()
        done = asyncio.Event()

        async def sample():
            while not done.is_set():
                try:
                    size = sum(os.path.getsize(os.path.join(spool, n)) for n in os.listdir(spool)
                               if n.startswith("bodies-"))
                except OSError:
                    size = 0
                peak["bytes"] = max(peak["bytes"], size)
                await asyncio.sleep(0.02)
        sampler = asyncio.ensure_future(sample())
        try:
            code, text = await run_one(config)
        finally:
            done.set()
            await sampler
        assert code == 0, text[-2000:]
        with open(tmp_path / "analysis" / "meta.jsonl", encoding="utf-8") as f:
            analysed = [json.loads(line)["url"] for line in f]
        spooled = sum(len(sim.truth(crawl_rules(config, sim.seeds)).saved[u]) for u in set(analysed))
        print(f"spool peak {peak['bytes']} B for {spooled} B of pages analysed")
        assert spooled > 8 * (8 << 10)  # many generations' worth went through
        assert peak["bytes"] <= spooled / 2, (peak["bytes"], spooled)


SLOW_ANALYZER = '''
import time

def run(page):
    time.sleep(0.15)
    return {"url": page.url}
'''


@pytest.mark.async_timeout(150)
async def test_a_worker_killed_with_analysis_tasks_pending_resumes_them_when_started_again(tmp_path, redis_server):
    (tmp_path / "slowmod.py").write_text(SLOW_ANALYZER)
    async with Sim(sim_config(seed=43, hosts=16, pages_per_host=(4, 8))) as sim:
        workers = Workers(tmp_path, sim, redis_server.url, 1, analysis_workers=1,
                          analyzers=(("slow", "python", "slowmod:run"),),
                          analysis_dir=str(tmp_path / "analysis"))
        workers.env_path = str(tmp_path)
        await workers.start("w0")
        rio = await RedisIO(redis_server.url, CRAWL, partitions=64).connect()
        try:
            async def pending():
                t = rio.tick()
                i = t.get_stats(["w0"])
                snap = ((await t.execute())[i]).get("w0") or {}
                return (snap.get("analysis") or {}).get("pending", 0) >= 5
            await wait_for(pending, 60, "w0 never had analysis tasks pending")
        finally:
            await rio.close()
        workers.procs["w0"].send_signal(signal.SIGKILL)
        assert await workers.procs["w0"].wait() == -signal.SIGKILL
        await workers.start("w0", reload=True)
        codes = await workers.wait(120)
        assert codes == {"w0": 0}, workers.log("w0")[-2000:]
        assert "analysis tasks resumed" in workers.log("w0")
        config = workers.configs["w0"]
        with open(os.path.join(config.save_dir, INDEX_NAME), encoding="utf-8") as f:
            html = {row["url"] for row in map(lambda x: parse_index_line(x.rstrip("\n")), f)
                    if (row["content_type"] or "").startswith("text/html")}
        with open(tmp_path / "analysis" / "slow.jsonl", encoding="utf-8") as f:
            analysed = {json.loads(line)["url"] for line in f}
        assert html and html <= analysed, sorted(html - analysed)[:10]
