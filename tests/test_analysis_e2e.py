"""Issue 22 end to end on the synthetic web: analysis in processes beside the loop.

Coverage is the sim's ground truth with analysisWorkers 0, 1 and 2 (the
links come back to the frontier with their page's depth); an analyzer
failing for some pages is retried and then alerted exactly once a page; a
SIGKILL of an analysis process mid-crawl loses nothing; a SIGKILL of the
crawler loses no task (``--reload`` resumes them).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sys
from collections import Counter

import pytest

from larbin_py.analysis.alerts import ALERTS_LOG
from larbin_py.demo import crawl_rules
from larbin_py.output import INDEX_NAME
from larbin_py.output.base import parse_index_line
from larbin_py.sim import Sim, SimConfig

from helpers.crawl import TEST_CRAWL_DELAY, check_conservation, crawl, make_config, page_requests
from helpers.state import start_crawler, write_conf

pytestmark = pytest.mark.slow

ANALYZERS = '''
import hashlib, os, time

def kind(url):
    n = int(hashlib.sha1(url.encode()).hexdigest(), 16) % 5
    return "always" if n == 0 else "twice" if n == 1 else "ok"

def flaky(page):
    """Fails always for a fifth of the pages, twice then succeeds for another fifth."""
    path = os.path.join(os.environ["TRIES_DIR"], hashlib.sha1(page.url.encode()).hexdigest())
    with open(path, "ab") as f:
        f.write(b".")
    tries = os.path.getsize(path)
    k = kind(page.url)
    if k == "always" or (k == "twice" and tries <= 2):
        raise RuntimeError(f"{k} try {tries}")
    return {"tries": tries, "kind": k}

def slow(page):
    time.sleep(0.05)
    return {"depth": page.depth}

def view(page):
    """What a python analyzer is given."""
    return {"status": page.status, "ctype": page.header("Content-Type"), "names": [n for n, _ in page.headers],
            "saved": page.saved, "sha1": hashlib.sha1(page.body).hexdigest(), "depth": page.depth,
            "title": page.tree.findtext(".//title"), "charset": page.charset}
'''


def kind(url: str) -> str:
    n = int(hashlib.sha1(url.encode()).hexdigest(), 16) % 5
    return "always" if n == 0 else "twice" if n == 1 else "ok"


@pytest.fixture
def mods(tmp_path, monkeypatch):
    """A module of analyzers the analysis processes (children) can import."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "test_analyzers_mod.py").write_text(ANALYZERS)
    (tmp_path / "tries").mkdir()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mods") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("TRIES_DIR", str(tmp_path / "tries"))
    return tmp_path


def small_sim(seed: int = 22, hosts: int = 30) -> SimConfig:
    return SimConfig(seed=seed, hosts=hosts, pages_per_host=(3, 10), hosts_per_ip=6, dns=True,
                     robots_agent="larbin_py", trap=False, extras=False, crawl_delay=TEST_CRAWL_DELAY)


def jsonl(path) -> list[dict]:
    return [json.loads(line) for line in open(path, encoding="utf-8")] if os.path.exists(path) else []


def mirror_of(save_dir: str, port: int) -> tuple[dict, list]:
    """A mirror's files (relative path -> sha1 of the content) and its index, sorted;
    the sim's port (each run has its own) written as PORT."""
    files = {}
    for root, _dirs, names in os.walk(save_dir):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, save_dir)
            if rel != INDEX_NAME:
                with open(path, "rb") as f:
                    body = f.read().replace(b":%d" % port, b":PORT")
                files[rel.replace(f"_{port}", "_PORT")] = hashlib.sha1(body).hexdigest()
    with open(os.path.join(save_dir, INDEX_NAME), encoding="utf-8") as f:
        text = f.read().replace(f":{port}", ":PORT").replace(f"_{port}", "_PORT")
    index = sorted(tuple(sorted(parse_index_line(line).items())) for line in text.splitlines())
    return files, index


@pytest.mark.async_timeout(180)
async def test_coverage_outcomes_and_outputs_are_the_same_with_0_1_and_2_analysis_workers(tmp_path, monkeypatch):
    """Exact coverage and identical outputs (the mirror's files and index) with
    analysisWorkers 0, 1 (sharing the parse with the loop, and not), 2, and 1
    with a line of one page (the loop then parses many pages itself)."""
    from larbin_py.analysis import pool as pool_mod

    results, outputs = {}, {}
    for label, workers, share in (("0", 0, True), ("1", 1, True), ("1 no share", 1, False), ("2", 2, True),
                                  ("1 depth 1", 1, True)):
        monkeypatch.setattr(pool_mod, "DEPTH", 1 if label == "1 depth 1" else 16)
        async with Sim(small_sim(hosts=16)) as sim:
            config = make_config(tmp_path / label.replace(" ", "_"), sim, analysis_workers=workers,
                                 analysis_share=share, wait_duration=0.05, output_mode="mirror")
            engine, summary = await crawl(config)
            truth = sim.truth(crawl_rules(config, sim.seeds))
            requested = [r.url for r in page_requests(sim)]
            assert set(requested) == truth.must_request, label
            assert not [u for u, n in Counter(requested).items() if n > 1]
            check_conservation(engine, summary)
            assert summary.failed is None and summary.stop_reason == "end of work"
            if workers:
                a = engine.snapshot()["analysis"]
                # every HTML page analysed once: by a process, or by the loop when all were busy
                assert a["finished"] + a["inline"] == summary.pages and a["failed"] == 0 and a["pending"] == 0
                assert a["finished"] > 0
                if not share:
                    assert a["inline"] == 0
                if label == "1 depth 1":
                    assert a["inline"] > 0  # the sharing was exercised
                assert not os.path.exists(os.path.join(config.state_dir, "analysis", "queue-00000001.log"))
            results[label] = (summary.pages, dict(summary.forgotten), sorted(summary.rejected.items()))
            outputs[label] = mirror_of(config.save_dir, sim.web.port)
            assert len(outputs[label][0]) == len(truth.saved) > 0
    assert results["0"] == results["1"] == results["1 no share"] == results["2"] == results["1 depth 1"]
    assert outputs["0"] == outputs["1"] == outputs["1 no share"] == outputs["2"] == outputs["1 depth 1"]


@pytest.mark.async_timeout(120)
async def test_a_failing_analyzer_is_retried_then_alerted_once_per_page(mods, tmp_path):
    alerts_out = tmp_path / "alerted.txt"
    cmd = (sys.executable, "-c", f"import sys; open({str(alerts_out)!r}, 'a').write(sys.argv[1] + '\\n')",
           "{url}")
    async with Sim(small_sim(23)) as sim:
        config = make_config(tmp_path, sim, analysis_workers=2, wait_duration=0.05, analysis_retries=2,
                             analysis_backoff=0.01, analyzers=(("flaky", "python", "test_analyzers_mod:flaky"),),
                             analysis_dir=str(tmp_path / "results"), alert_command=cmd)
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        assert {r.url for r in page_requests(sim)} == truth.must_request  # links unaffected
        analysed = set(truth.saved)
        always = {u for u in analysed if kind(u) == "always"}
        assert always and {u for u in analysed if kind(u) == "twice"}
        results = jsonl(tmp_path / "results" / "flaky.jsonl")
        # every page's result present once; a twice-failing page succeeded at its third try
        assert sorted(r["url"] for r in results) == sorted(analysed - always)
        assert all(r["tries"] == (3 if r["kind"] == "twice" else 1) for r in results)
        alerts = jsonl(os.path.join(config.state_dir, ALERTS_LOG))
        assert sorted(a["url"] for a in alerts) == sorted(always)
        assert all(a["tries"] == 3 and a["analyzer"] == "flaky" and "always try 3" in a["error"] for a in alerts)
        for url in always:  # 1 + analysisRetries tries, no more
            assert os.path.getsize(tmp_path / "tries" / hashlib.sha1(url.encode()).hexdigest()) == 3
        assert sorted(alerts_out.read_text().split()) == sorted(always)  # alertCommand ran for each
        snap = engine.snapshot()["analysis"]
        assert snap["alerts"]["count"] == len(always) and snap["failed"] == len(always)
        assert snap["failed_tries"]["error"] == 3 * len(always) + 2 * (len({u for u in analysed
                                                                            if kind(u) == "twice"}))


@pytest.mark.async_timeout(120)
async def test_a_sigkill_of_an_analysis_process_mid_crawl_loses_nothing(mods, tmp_path):
    async with Sim(small_sim(24)) as sim:
        # the slow analyzer (50 ms) keeps the processes mid-task when the kill comes
        config = make_config(tmp_path, sim, analysis_workers=2, wait_duration=0.05, analysis_backoff=0.01,
                             analyzers=(("slow", "python", "test_analyzers_mod:slow"),),
                             analysis_dir=str(tmp_path / "results"))
        from larbin_py.engine import Engine

        engine = Engine(config)
        run = asyncio.ensure_future(engine.run())

        async def wait_for_some():
            while engine.analysis is None or engine.analysis.finished < 15 or len(engine.analysis.pool.procs) < 2:
                await asyncio.sleep(0.005)
        await asyncio.wait_for(wait_for_some(), 60)
        killed = [p for p in engine.analysis.pool.procs]
        for proc in killed:
            os.kill(proc.pid, signal.SIGKILL)
        summary = await run
        truth = sim.truth(crawl_rules(config, sim.seeds))
        assert {r.url for r in page_requests(sim)} == truth.must_request
        check_conservation(engine, summary)
        a = engine.snapshot()["analysis"]
        assert a["failed_tries"].get("crash", 0) >= 1 and a["pool"]["replaced"] >= 1
        assert a["failed"] == 0 and a["finished"] == 2 * summary.pages
        assert not os.path.exists(os.path.join(config.state_dir, ALERTS_LOG))
        assert set(r["url"] for r in jsonl(tmp_path / "results" / "slow.jsonl")) == set(truth.saved)


@pytest.mark.async_timeout(200)
async def test_a_sigkill_of_the_crawler_loses_no_task_and_reload_resumes_them(mods, tmp_path):
    async with Sim(small_sim(25)) as sim:
        config = make_config(tmp_path, sim, analysis_workers=1, wait_duration=0.02, output_mode="mirror",
                             checkpoint_interval=60.0, analyzers=(("slow", "python", "test_analyzers_mod:slow"),),
                             analysis_dir=str(tmp_path / "results"))
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        proc = await start_crawler(conf, cwd=str(tmp_path))
        target = len(truth.must_request) // 2
        await sim.log.wait_for(lambda log: len([r for r in page_requests_of(log)]) >= target, timeout=120)
        proc.kill()
        assert await proc.wait() == -signal.SIGKILL
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 150) == 0, (tmp_path / "crawler.err").read_text()
        err = (tmp_path / "crawler.err").read_text()
        assert "analysis tasks resumed" in err, err  # the slow analyzer was behind at the kill
        assert {r.url for r in page_requests(sim)} == truth.must_request
        with open(os.path.join(config.save_dir, INDEX_NAME), encoding="utf-8") as f:
            index = [parse_index_line(line.rstrip("\n")) for line in f]
        html = {e["url"] for e in index if (e["content_type"] or "").startswith("text/html")}
        analysed = [r["url"] for r in jsonl(tmp_path / "results" / "slow.jsonl")]
        # every page analysed; at least once (a task run when the kill came is run again)
        assert set(analysed) == html
        assert not os.path.exists(os.path.join(config.state_dir, ALERTS_LOG))


def page_requests_of(log):
    return [r for r in log.requests if r.path not in ("/robots.txt", "/robots-rules.txt")]


@pytest.mark.async_timeout(120)
async def test_a_slow_analyzer_holds_the_download_gate_at_the_queue_bound(mods, tmp_path):
    """50 ms a page in one process: the pending tasks stay within analysisQueueMax
    (plus what the requests in flight when the gate closed add), nothing is lost."""
    sim_cfg = SimConfig(seed=26, hosts=8, pages_per_host=(5, 10), hosts_per_ip=4, dns=True,
                        robots_agent="larbin_py", trap=False, extras=False)
    async with Sim(sim_cfg) as sim:
        config = make_config(tmp_path, sim, analysis_workers=1, wait_duration=0.0, analysis_queue_max=6,
                             pages_connexions=4, analyzers=(("slow", "python", "test_analyzers_mod:slow"),),
                             analysis_dir=str(tmp_path / "results"))
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        assert {r.url for r in page_requests(sim)} == truth.must_request
        a = engine.snapshot()["analysis"]
        assert a["finished"] == 2 * summary.pages  # links and slow on every page
        # two tasks a page: the bound, plus the pages in flight when the gate closed
        assert 6 <= a["peak_pending"] <= 6 + 2 * config.pages_connexions, a["peak_pending"]
        assert sorted(r["url"] for r in jsonl(tmp_path / "results" / "slow.jsonl")) == sorted(truth.saved)


@pytest.mark.async_timeout(120)
async def test_checkpoints_fsync_the_analysis_queue(tmp_path, monkeypatch):
    """A machine crash must not lose the tasks of pages a checkpoint says are done."""
    from larbin_py import journal

    synced = []
    real = journal._fdatasync_path
    monkeypatch.setattr(journal, "_fdatasync_path", lambda path: (synced.append(path), real(path)))
    sim_cfg = SimConfig(seed=27, hosts=6, pages_per_host=(5, 10), hosts_per_ip=3, dns=True,
                        robots_agent="larbin_py", trap=False, extras=False)
    async with Sim(sim_cfg) as sim:
        # analysisShare off: every page's task goes through the queue (with sharing, a crawl
        # this small can end before the process that starts with it is ready: issue 37)
        config = make_config(tmp_path, sim, analysis_workers=1, analysis_share=False, wait_duration=0.0,
                             checkpoint_interval=0.05)
        engine, summary = await crawl(config)
    queue_dir = os.path.join(config.state_dir, "analysis")
    assert any(p.startswith(queue_dir + os.sep + "queue-") for p in synced)
    assert any(p.startswith(queue_dir + os.sep + "bodies-") for p in synced)


@pytest.mark.async_timeout(120)
async def test_a_python_analyzer_is_given_the_url_status_headers_body_saved_path_and_tree(mods, tmp_path):
    from lxml import etree

    from larbin_py.output.paths import url_to_relpath

    async with Sim(small_sim(28, hosts=6)) as sim:
        config = make_config(tmp_path, sim, analysis_workers=1, wait_duration=0.0, output_mode="mirror",
                             analyzers=(("view", "python", "test_analyzers_mod:view"),),
                             analysis_dir=str(tmp_path / "results"))
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
    records = {r["url"]: r for r in jsonl(tmp_path / "results" / "view.jsonl")}
    html = {u for u in truth.saved if sim.web.lookup(u).is_html}
    assert set(records) == html and records
    for url, r in records.items():
        body = truth.saved[url]
        assert r["status"] == 200 and r["sha1"] == hashlib.sha1(body).hexdigest()
        assert r["ctype"] and r["ctype"].startswith("text/html") and "content-type" in r["names"]
        assert "content-length" in r["names"] or "transfer-encoding" in r["names"]
        # where the mirror saved it: the file holds the body once the crawl has ended
        assert r["saved"] == os.path.join(os.path.abspath(config.save_dir), url_to_relpath(url))
        with open(r["saved"], "rb") as f:
            assert f.read() == body
        root = etree.fromstring(body, etree.HTMLParser())
        assert r["title"] == root.findtext(".//title")
