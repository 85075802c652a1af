"""The crawl log (larbin_py.crawllog): its lines, its rotation, and what a crawl
of the sim writes there, checked against the sim's request log and ground
truth; after SIGKILL and --reload, still one line per URL."""

from __future__ import annotations

import asyncio
import hashlib
import base64
import os
import signal
from collections import Counter
from urllib.parse import urljoin

import pytest

from larbin_py.crawllog import (CrawlLogFile, cut_crawl_log, format_line, parse_line, read_log,
                                rotated_path, status_code)
from larbin_py.demo import crawl_rules
from larbin_py.sim import Sim, SimConfig
from larbin_py.sim.urls import split_url

from helpers.crawl import ROBOTS_PATHS, crawl, make_config
from helpers.state import sim_config, start_crawler, write_conf


def line(url: str, reason: str = "ok", **kw) -> bytes:
    return format_line(when=1_700_000_000.25, status=kw.pop("status", 200), url=url, reason=reason, **kw)


def test_a_line_has_eleven_fields_and_no_value_breaks_out_of_its_field():
    raw = format_line(when=1_700_000_000.5, status=None, url="http://a.test/x", reason="noDNS", via="link",
                      referrer="http://a.test/", content_type="text/html\tevil\nline", duration=None)
    assert raw.count(b"\t") == 10 and raw.endswith(b"\n") and raw.count(b"\n") == 1
    entry = parse_line(raw.decode().rstrip("\n"))
    assert entry == {"time": "2023-11-14T22:13:20.500Z", "status": -1, "size": None, "url": "http://a.test/x",
                     "via": "link", "referrer": "http://a.test/", "content_type": "text/html\tevil\nline",
                     "duration": None, "digest": None, "reason": "noDNS", "recrawl": None}
    assert status_code("forbiddenRobots") == -9998 and status_code("somethingNew") == -9999
    with pytest.raises(ValueError, match="11"):
        parse_line("too\tfew")


def test_the_time_field_is_right_across_seconds_though_each_second_is_formatted_once():
    # The text of a second is kept from one line to the next: a new second, or
    # an earlier one (the wall clock stepped back), gets its own.
    def time_of(when):
        return parse_line(format_line(when=when, status=200, url="http://a.test/", reason="ok")
                          .decode().rstrip("\n"))["time"]

    assert time_of(1_700_000_000.25) == "2023-11-14T22:13:20.250Z"
    assert time_of(1_700_000_000.999) == "2023-11-14T22:13:20.999Z"
    assert time_of(1_700_000_001.0) == "2023-11-14T22:13:21.000Z"
    assert time_of(1_699_999_999.5) == "2023-11-14T22:13:19.500Z"
    assert time_of(1_700_086_400.125) == "2023-11-15T22:13:20.125Z"


def test_the_log_rotates_when_full_and_a_cut_back_to_a_commit_undoes_a_later_rotation(tmp_path):
    path = str(tmp_path / "crawl.log")
    size = len(line("http://a.test/0"))
    log = CrawlLogFile(path, max_bytes=2 * size + 1)
    log.write([line(f"http://a.test/{i}") for i in range(2)])
    log.write([line("http://a.test/2")])  # not full before it: written, now past the bound
    assert log.rotations == 0
    commit = log.position()
    log.write([line("http://a.test/3")])  # full: rotated first
    assert log.rotations == 1 and os.path.exists(rotated_path(path, 1))
    log.write([line("http://a.test/4"), line("http://a.test/5")])
    log.write([line("http://a.test/6")])
    assert log.rotations == 2
    log.close()
    assert [e["url"][-1] for e in read_log(path)] == list("0123456")
    # a crash after the commit: what came after it goes, the rotations undone
    assert cut_crawl_log(path, commit) == []
    assert [e["url"][-1] for e in read_log(path)] == list("012")
    assert not os.path.exists(rotated_path(path, 1)) and os.path.getsize(path) == commit[1]
    again = CrawlLogFile(path, max_bytes=2 * size + 1)
    assert again.position() == commit
    again.close()
    # a log shorter than the commit says (a machine crash): said, and logging goes on
    os.truncate(path, 10)
    assert "cut its end" in cut_crawl_log(path, commit)[0]


def sha1_b32(body: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


def check_log(entries: list[dict], sim: Sim, truth, crashed: bool = False) -> None:
    """One line per URL taken and per robots.txt answer, each as the sim answered it."""
    robots = [e for e in entries if e["via"] == "prerequisite"]
    pages = [e for e in entries if e["via"] != "prerequisite"]
    twice = [u for u, n in Counter(e["url"] for e in pages).items() if n > 1]
    assert not twice, twice[:5]
    by_url = {e["url"]: e for e in pages}
    served = {}
    for r in sim.log.requests:
        served[r.url] = r.status  # the last answer
    asked = {u for u in served if split_url(u)[2].split("?")[0] not in ROBOTS_PATHS}
    # every page asked has its line, with the status served; the others are the URLs
    # forgotten without a request (robots.txt, DNS), each with its negative code
    assert asked <= set(by_url)
    for url in asked:  # the sim logs 0 for no answer (a stall): a negative code here
        assert by_url[url]["status"] == served[url] or (served[url] == 0 and by_url[url]["status"] < 0), url
    unasked = set(by_url) - asked
    assert unasked and all(by_url[u]["status"] < 0 and by_url[u]["size"] is None for u in unasked)
    for url in unasked:
        assert by_url[url]["reason"] == truth.expected_reason[url], url
    assert set(by_url) == truth.must_request | {u for u, why in truth.expected_reason.items()
                                                 if why in ("forbiddenRobots", "noDNS")}
    for url, body in truth.saved.items():
        assert by_url[url]["reason"] == "ok" and by_url[url]["digest"] == sha1_b32(body), url
        assert by_url[url]["size"] == len(body)
    # robots.txt: one line per answer (a 5xx is asked again later), as served; after a
    # crash, an answer not committed was asked again and logged once
    robots_asked = Counter(r.url for r in sim.log.requests if split_url(r.url)[2] in ROBOTS_PATHS)
    logged = Counter(e["url"] for e in robots)
    if crashed:
        assert set(logged) == set(robots_asked) and all(logged[u] <= robots_asked[u] for u in logged)
    else:
        assert logged == robots_asked
    statuses = {}
    for r in sim.log.requests:
        statuses.setdefault(r.url, set()).add(r.status)
    for e in robots:
        assert e["status"] in statuses[e["url"]] or (e["status"] < 0 and 0 in statuses[e["url"]])
        assert e["reason"] == ("robots" if e["status"] > 0 else "timeout")


def check_via(entries: list[dict], sim: Sim) -> Counter:
    """Each page line's via and referrer are what the sim's web says; the kinds met, counted."""
    kinds = Counter()
    seeds = set(sim.seeds)
    for e in entries:
        via, url, ref = e["via"], e["url"], e["referrer"]
        if via == "prerequisite":
            continue
        kinds[via] += 1
        if via == "seed":
            assert url in seeds and ref is None
            continue
        page = sim.web.lookup(ref)
        assert page is not None, (url, ref)
        if via == "redirect":
            assert page.kind == "redirect" and any(lk.target == url for lk in page.links), (url, ref)
        else:
            tags = {lk.kind for lk in page.links if lk.target == url and not lk.nofollow}
            assert tags & ({"frame", "iframe", "img"} if via == "embed" else {"a", "area", "link", "refresh"}), \
                (url, ref, via, tags)
    return kinds


@pytest.mark.async_timeout(120)
async def test_a_crawl_logs_each_url_once_as_the_sim_answered_and_how_it_was_found(tmp_path):
    cfg = SimConfig(seed=3, hosts=10, pages_per_host=(5, 12), hosts_per_ip=4, dns=True, trap=False,
                    robots_agent="larbin_py")
    async with Sim(cfg) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.01, get_image=True,
                             analysis_workers=1)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        engine, summary = await crawl(config)
        assert summary.failed is None
        entries = read_log(os.path.join(config.state_dir, "crawl.log"))
        check_log(entries, sim, truth)
        kinds = check_via(entries, sim)
        assert kinds["seed"] == len(sim.seeds) and kinds["link"] and kinds["redirect"] and kinds["embed"], kinds


@pytest.mark.async_timeout(120)
async def test_without_the_journal_the_log_is_written_and_rotated_all_the_same(tmp_path):
    cfg = SimConfig(seed=5, hosts=6, pages_per_host=(5, 10), hosts_per_ip=3, dns=True, trap=False)
    async with Sim(cfg) as sim:
        log = str(tmp_path / "logs" / "crawl.log")
        os.makedirs(os.path.dirname(log))
        config = make_config(tmp_path, sim, output_mode="stats", wait_duration=0.01, can_reload=False,
                             crawl_log=log, crawl_log_max_bytes=2000)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        await crawl(config)
        assert os.path.exists(rotated_path(log, 3)) and not os.path.exists(tmp_path / "state" / "crawl.log")
        check_log(read_log(log), sim, truth)
        off = make_config(tmp_path / "off", sim, output_mode="stats", wait_duration=0.01, crawl_log="none",
                          limit_page=5)  # (a few outcomes are enough to have written a log)
        await crawl(off)
        assert not os.path.exists(os.path.join(off.state_dir, "crawl.log"))


@pytest.mark.async_timeout(120)
async def test_reload_cuts_what_a_crash_left_after_the_last_commit_in_the_crawl_and_robots_logs(tmp_path):
    """A kill between a commit's writes and its journal line leaves lines (and a
    rotation) and robots.txt answers no commit covers: --reload cuts them, so the
    outcomes are logged once when done again and the answers are asked again."""
    from larbin_py.engine import Engine
    from larbin_py.state import RobotsLog

    async with Sim(sim_config(42)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.02, limit_page=8)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        await Engine(config).run()
        path = os.path.join(config.state_dir, "crawl.log")
        asked = {r.url for r in sim.log.requests}
        later = sorted(u for u in truth.must_request if u not in asked)[:3]
        with open(path, "ab") as f:  # lines of outcomes no journal line covers
            f.writelines(line(u) for u in later)
        os.rename(path, rotated_path(path, 1))  # and a rotation no commit covers
        with open(path, "wb") as f:
            f.write(line(later[0]))
        robots = sorted(u for u in truth.robots_urls if u.endswith("/robots.txt") and u not in asked)
        # a robots.txt the first crawl did not ask, else (every site's asked before the 8th
        # page) that of a page still to fetch: a Disallow kept would forget it (check_log)
        target = robots[0] if robots else urljoin(later[0], "/robots.txt")
        log = RobotsLog(os.path.join(config.state_dir, "robots.log"))
        log.append(target, 1e10, b"User-agent: *\nDisallow: /\n")  # an answer no commit covers
        log.close()
        summary = await Engine(config.replace(limit_page=0), reload=True).run()
        assert summary.stop_reason == "end of work"
        assert not os.path.exists(rotated_path(path, 1))
        if robots:
            assert target in {r.url for r in sim.log.requests}  # asked, not taken from the cut answer
        assert later[0] in {r.url for r in sim.log.requests}
        check_log(read_log(path), sim, truth)


@pytest.mark.slow
@pytest.mark.async_timeout(240)
async def test_after_sigkills_and_reload_the_log_still_has_one_line_per_url(tmp_path):
    async with Sim(sim_config(41)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.05, pages_connexions=20,
                             checkpoint_interval=0.5, crawl_log_max_bytes=6000)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        args: tuple[str, ...] = ()
        total = len(truth.must_request)
        for fraction in (0.3, 0.6):
            proc = await start_crawler(conf, *args, cwd=str(tmp_path))
            await sim.log.wait_for(
                lambda log: sum(r.path not in ROBOTS_PATHS for r in log.requests) >= fraction * total, timeout=120)
            proc.send_signal(signal.SIGKILL)
            assert await proc.wait() == -signal.SIGKILL
            args = ("--reload",)
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 200) == 0, (tmp_path / "crawler.err").read_text()
        path = os.path.join(config.state_dir, "crawl.log")
        assert os.path.exists(rotated_path(path, 1))
        check_log(read_log(path), sim, truth, crashed=True)
