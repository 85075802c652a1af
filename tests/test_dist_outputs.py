"""The distributed mode from the user's side: ``--demo --workers 4``, WARC
output over two workers, and a joiner whose rules differ from the crawl's.

Real processes and a real redis-server in each test: the demo starts its
own (``redisUrl auto``, as a user's ``--demo --workers 4`` does); the others
use the per-test server of tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections import Counter

import pytest
from warcio.archiveiterator import ArchiveIterator

from larbin_py import cli
from larbin_py.config import format_config
from larbin_py.demo import crawl_rules
from larbin_py.distributed.launcher import crawl_meta
from larbin_py.distributed.redisio import RedisIO
from larbin_py.sim import Sim

from conftest import require_service
from helpers.distributed import CRAWL, Workers, check_politeness, sim_config, totals, worker_config
from helpers.crawl import page_requests

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_with_4_workers_covers_the_ground_truth(tmp_path, capsys):
    """``python -m larbin_py --demo --workers 4`` (through cli.main): exit 0, every URL of the truth."""
    require_service("redis-server", "apt-get install redis-server")
    conf = tmp_path / "larbin.conf"
    # leaseTtl 2: members join and the end is seen within seconds; the demo's
    # robots.txt crawl delays (0.5-1 s) still apply per host
    conf.write_text(f"stateDir {tmp_path}/state\nsaveDir {tmp_path}/save\nhttpPort 0\n"
                    "waitDuration 0.2\nleaseTtl 2\noutputMode mirror\n")
    code = cli.main(["-c", str(conf), "--demo", "--workers", "4"])
    err = capsys.readouterr().err
    assert code == 0, err[-4000:]
    m = re.search(r"ground truth: (\d+) of (\d+) URLs a correct crawl requests were requested "
                  r"\(([0-9.]+) %\), (\d+) it must not request were", err)
    assert m, err[-4000:]
    hit, total, _share, wrong = (int(m.group(1)), int(m.group(2)), m.group(3), int(m.group(4)))
    assert total > 100 and hit == total and wrong == 0, m.group(0)
    assert "with 4 workers" in err
    assert "on 4 workers: end of work" in err and "(balanced)" in err
    for k in range(1, 5):  # each worker ran and ended well
        assert f"worker w{k}       exit 0" in err, err[-3000:]
    # the private redis-server was started under stateDir and stopped
    assert "redis.sock" in err
    assert not os.path.exists(tmp_path / "state" / "redis" / "redis.sock")
    # the mirror's index lists each saved page once
    index = (tmp_path / "save" / "index.tsv").read_text().splitlines()
    urls = [line.split("\t", 1)[0] for line in index]
    assert len(urls) == len(set(urls)) > 0
    m = re.search(r"mirror index .*: (\d+) pages", err)
    assert m and int(m.group(1)) == len(urls)


def warc_pages(directory: str) -> list[str]:
    """The target URIs of the pages saved in every WARC file under ``directory``: 2xx HTML
    response (or revisit) records (robots.txt, redirects, errors and the pages of another
    type not saved are archived too)."""
    out = []
    for dirpath, _dirs, files in os.walk(directory):
        for name in sorted(files):
            if not name.endswith(".warc.gz"):
                continue
            with open(os.path.join(dirpath, name), "rb") as f:
                for rec in ArchiveIterator(f, check_digests="raise"):
                    rec.raw_stream.read()  # to the end: verifies the digests
                    uri = rec.rec_headers.get_header("WARC-Target-URI")
                    if rec.rec_type in ("response", "revisit") and rec.http_headers.get_statuscode()[0] == "2" \
                            and (rec.http_headers.get_header("Content-Type") or "").startswith("text/html"):
                        out.append(uri)
    return out


@pytest.mark.async_timeout(150)
async def test_warc_with_two_workers_one_series_each_every_page_in_exactly_one(tmp_path, redis_server):
    async with Sim(sim_config(seed=11, hosts=24, pages_per_host=(3, 6))) as sim:
        workers = Workers(tmp_path, sim, redis_server.url, 2, output_mode="warc")
        await workers.start_all()
        codes = await workers.wait(90)
        assert codes == {"w0": 0, "w1": 0}, {w: workers.log(w)[-2000:] for w in codes}
        config = workers.configs["w0"]
        truth = sim.truth(crawl_rules(config, sim.seeds))
        save = config.save_dir
        # one series per worker, in saveDir/<workerId>/, and nothing else with pages
        series = sorted(d for d in os.listdir(save) if os.path.isdir(os.path.join(save, d)))
        assert series == ["w0", "w1"], os.listdir(save)
        per_worker = {w: warc_pages(os.path.join(save, w)) for w in series}
        assert all(per_worker.values()), {w: len(p) for w, p in per_worker.items()}  # both crawled
        for w, pages in per_worker.items():
            twice = [u for u, c in Counter(pages).items() if c > 1]
            assert not twice, (w, twice[:5])
        a, b = set(per_worker["w0"]), set(per_worker["w1"])
        assert not a & b, sorted(a & b)[:5]  # each page in exactly one series
        assert a | b == set(truth.saved), (sorted(set(truth.saved) - (a | b))[:5], sorted((a | b) - set(truth.saved))[:5])
        # and the crawl itself was exact and polite
        requested = [r.url for r in page_requests(sim)]
        assert set(requested) == truth.must_request
        check_politeness(sim, config.wait_duration)
        t = (await totals(redis_server.url)).totals
        assert t.queued == 0 and t.fetched == len(truth.saved) == len(a | b)


@pytest.mark.async_timeout(60)
async def test_a_joiner_with_other_rules_exits_2_naming_the_keys(tmp_path, redis_server):
    async with Sim(sim_config(hosts=4, pages_per_host=(1, 2))) as sim:
        crawl = worker_config(tmp_path, sim, redis_server.url, "w0")
        io = await RedisIO(redis_server.url, CRAWL, partitions=crawl.partitions).connect()
        try:
            await io.create_crawl(crawl_meta(crawl))  # the crawl as its first worker created it
        finally:
            await io.close()
        # a joiner that waits longer, goes deeper and ignores robots.txt; its other keys agree
        joiner = crawl.replace(wait_duration=0.5, depth_in_site=crawl.depth_in_site + 3, ignore_robots=True,
                               worker_id="late")
        path = tmp_path / "late.conf"
        path.write_text(format_config(joiner))
        env = dict(os.environ, PYTHONPATH=ROOT)
        for extra in ([], ["--reload"]):  # refused whether it joins fresh or as a reload
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "larbin_py", "-c", str(path), "--worker", *extra,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=env)
            out, err = await asyncio.wait_for(proc.communicate(), 40)
            text = err.decode(errors="replace")
            assert proc.returncode == 2, (extra, text[-2000:])
            for key, crawl_value, here in (("waitDuration", "waitDuration 0.1", "waitDuration 0.5"),
                                           ("depthInSite", f"depthInSite {crawl.depth_in_site}",
                                            f"depthInSite {joiner.depth_in_site}"),
                                           ("ignoreRobots", "ignoreRobots false", "ignoreRobots")):
                assert f"{key} (crawl: '{crawl_value}', here: '{here}')" in text, (key, text[-2000:])
            # only the keys that differ are named
            for same in ("UserAgent", "outputMode", "leaseTtl", "partitions"):
                assert f"{same} (crawl:" not in text, text[-2000:]
            assert not sim.log.requests, "a refused joiner fetched something"
        # the crawl in Redis is unchanged: its meta is still the first worker's
        io = await RedisIO(redis_server.url, CRAWL, partitions=crawl.partitions).connect()
        try:
            assert (await io.read_crawl()).rules == crawl_meta(crawl).rules
        finally:
            await io.close()
