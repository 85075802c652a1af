"""Recrawls (--recrawl) against a real nginx serving a tree of a few hundred pages.

A first crawl, then 10 files changed and 3 deleted, then a recrawl: the
server's own access log says what was asked and answered (exactly the 10
fetched with 200, the 3 answering 404, every other page a 304 asked with
its validators), the mirror's files say what was written (the unchanged
ones untouched: their mtimes), and the mirror equals the tree after the
changes.  The same against nginx with validators off (always 200: the
digest tells), against the synthetic web (no validator at all), in WARC
mode (revisit records), with revisitAfter, --reload after a SIGKILL in the
middle of a recrawl, after a SIGTERM with stored reads under way, and after
a graceful stop while most of its URLs wait in the sites' parks.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter

import pytest
from warcio.archiveiterator import ArchiveIterator

from larbin_py.crawllog import read_log
from larbin_py.engine import Engine
from larbin_py.output.base import INDEX_NAME, parse_index_line
from larbin_py.sim import SimConfig, SimWeb
from larbin_py.sim.urls import split_url
from larbin_py.state import StateError
from larbin_py.web.metrics import render_metrics
from larbin_py.web.source import check_snapshot

from helpers.crawl import ROBOTS_PATHS, make_config
from helpers.nginx import free_port, served
from helpers.state import start_crawler, write_conf

IP_BASE = "127.0.7.1"


def tree(seed: int = 21, hosts: int = 8, pages: int = 40) -> SimWeb:
    """A few hundred pages on ``hosts`` hosts, with redirects and missing links (extras)."""
    cfg = SimConfig(seed=seed, hosts=hosts, pages_per_host=(pages, pages), hosts_per_ip=4, ip_base=IP_BASE,
                    trap=False, extras=True, robots_mix={"absent": 2.0, "rules": 1.0, "allow": 1.0},
                    robots_agent="larbin_py")
    return SimWeb.generate(cfg, free_port(IP_BASE))


class Site:
    """The crawls of one served tree, in one work folder."""

    def __init__(self, tmp_path, web: SimWeb, srv, **changes) -> None:
        self.web, self.srv = web, srv
        seeds = tuple(web.seeds)
        base = dict(start_urls=seeds, dns_servers=(("127.0.0.1", srv.dns_port),), private_networks="allow",
                    save_dir=str(tmp_path / "save"), state_dir=str(tmp_path / "state"), http_port=0,
                    output_mode="mirror", wait_duration=0.0, timeout_page=5.0, forbidden_extensions=(),
                    get_cgi=True, depth_by_site=True, depth_in_site=web.max_depth(True) + 1, pages_connexions=40,
                    recrawl_gone="delete", dns_retry_delay=0.1)
        base.update(changes)
        from larbin_py.config import parse_config_text

        self.config = parse_config_text("", require_start_urls=False).replace(**base)

    async def crawl(self, **kw):
        self.srv.clear()
        engine = Engine(self.config, **kw)
        summary = await engine.run()
        assert summary.failed is None, summary.failed
        requests = await self.srv.wait_requests(summary.requests)
        assert len(requests) == summary.requests
        return engine, summary, requests

    def index(self, unique: bool = True) -> dict[str, dict]:
        """The output's index, a URL's last line ("unique": a mirror's lists each URL once;
        a WARC series' index goes on across crawls, a later line for a page fetched again)."""
        with open(os.path.join(self.config.save_dir, INDEX_NAME), encoding="utf-8") as f:
            entries = [parse_index_line(line.rstrip("\n")) for line in f]
        if unique:
            urls = Counter(e["url"] for e in entries)
            assert not [u for u, n in urls.items() if n > 1], "a URL listed twice"
        return {e["url"]: e for e in entries}

    def mtimes(self) -> dict[str, int]:
        return {url: os.stat(os.path.join(self.config.save_dir, e["path"])).st_mtime_ns
                for url, e in self.index().items()}

    def tree_path(self, url: str) -> str:
        host, _port, pq = split_url(url)
        return self.srv.path_of(host, pq)


def pages_of(requests) -> list:
    return [r for r in requests if r[1].split("?")[0] not in ROBOTS_PATHS]


def check_answers(after, fetched: list[str], changed: list[str], deleted: list[str]) -> None:
    """A recrawl's answers (nginx's log, ``after``): the changed pages 200, the deleted 404,
    every other page of the first crawl 304, each asked with both validators."""
    status = {r[0]: r[2] for r in pages_of(after)}
    asked = {r[0]: r for r in pages_of(after)}
    assert sorted(u for u in fetched if status[u] == 200) == sorted(changed)
    assert sorted(u for u in fetched if status[u] == 404) == sorted(deleted)
    assert all(status[u] == 304 for u in fetched if u not in changed and u not in deleted)
    assert all(asked[u][3] and asked[u][4] for u in fetched)  # If-None-Match and If-Modified-Since


def change_and_delete(site: Site, fetched: list[str]) -> tuple[list[str], list[str]]:
    """10 HTML pages changed (a bigger body, a later mtime), 3 others deleted from the tree."""
    pages = sorted(u for u in fetched if u not in site.web.seeds and site.tree_path(u).endswith(".html"))
    changed, deleted = pages[5:15], pages[40:43]
    for url in changed:
        path = site.tree_path(url)
        with open(path, "ab") as f:
            f.write(f"\n<!-- {url} changed for the recrawl -->\n".encode())  # its own: no two alike
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    for url in deleted:
        os.unlink(site.tree_path(url))
    return changed, deleted


def check_mirror_is_the_tree(site: Site, index: dict) -> None:
    for url, entry in index.items():
        with open(os.path.join(site.config.save_dir, entry["path"]), "rb") as f, \
                open(site.tree_path(url), "rb") as g:
            assert f.read() == g.read(), url


@pytest.mark.async_timeout(240)
async def test_a_recrawl_asks_with_validators_and_rewrites_only_what_changed(tmp_path):
    web = tree()
    async with served(web, web.port) as srv:
        site = Site(tmp_path, web, srv)
        _, first, before = await site.crawl()
        index1 = site.index()
        assert len(index1) >= 200, first.format()
        check_mirror_is_the_tree(site, index1)
        fetched = sorted(index1)
        changed, deleted = change_and_delete(site, fetched)
        mtimes = site.mtimes()
        engine, second, after = await site.crawl(recrawl=True)
        # the server's account: the same URLs asked as the first time, robots.txt and
        # redirects and missing pages included (the stored links of the 304s led there)
        assert Counter(r[0] for r in after) == Counter(r[0] for r in before)
        check_answers(after, fetched, changed, deleted)
        assert not any(r[3] or r[4] for r in pages_of(after) if r[0] not in index1)  # nothing to validate
        # the mirror: the changed files rewritten, the deleted ones gone, the others untouched
        index2 = site.index()
        assert sorted(index2) == sorted(set(fetched) - set(deleted))
        for url in deleted:
            assert not os.path.exists(os.path.join(site.config.save_dir, index1[url]["path"]))
        now = site.mtimes()
        assert sorted(u for u in now if now[u] != mtimes[u]) == sorted(changed)
        check_mirror_is_the_tree(site, index2)
        r = second.recrawl
        assert r == {"new": 0, "changed": 10, "unchanged": len(fetched) - 13, "notModified": len(fetched) - 13,
                     "gone": 3, "kept": 0, "skipped": 0}, r
        assert second.pages == len(fetched) - 3 and second.forgotten["err40X"] >= 3
        assert "recrawl         unchanged" in second.format()
        snap = engine.snapshot()
        assert snap["recrawl"] == r
        from larbin_py.web.metrics import render_metrics

        assert f'larbin_recrawl_pages_total{{verdict="notModified"}} {len(fetched) - 13}' in render_metrics(snap)
        # the crawl log: the recrawl's verdict of each page
        entries = [e for e in read_log(os.path.join(site.config.state_dir, "crawl.log"))
                   if e["recrawl"] is not None]
        verdicts = Counter(e["recrawl"] for e in entries)
        assert verdicts == {"unchanged": len(fetched) - 13, "changed": 10, "gone": 3}
        assert all(e["status"] == 304 and e["reason"] == "notModified"
                   for e in entries if e["recrawl"] == "unchanged")
        # a recrawl of the recrawl: everything unchanged now; the previous records are gone
        records = os.listdir(os.path.join(site.config.state_dir, "records"))
        assert sorted(records) == ["links-00000002.log", "records-00000002.log"]
        engine3, third, again = await site.crawl(recrawl=True)
        assert third.recrawl["unchanged"] == len(fetched) - 3 and third.recrawl["changed"] == 0
        # nothing to parse: no analysis process was started (a recrawl starts them on demand)
        assert engine3.analysis is not None and engine3.analysis.pool.started == 0
        assert engine.analysis.pool.started >= 1  # (the second had 10 changed pages to parse)
        assert all(r[2] == 304 for r in pages_of(again) if r[0] in index2)


@pytest.mark.async_timeout(240)
async def test_a_server_ignoring_validators_answers_200_and_the_digest_tells_what_changed(tmp_path):
    web = tree(seed=22, hosts=4, pages=30)
    async with served(web, web.port, validators=False) as srv:
        site = Site(tmp_path, web, srv)
        await site.crawl()
        fetched = sorted(site.index())
        changed, deleted = change_and_delete(site, fetched)
        mtimes = site.mtimes()
        _, second, after = await site.crawl(recrawl=True)
        status = {r[0]: r[2] for r in pages_of(after)}
        assert all(status[u] == 200 for u in fetched if u not in deleted)  # no 304 from this server
        now = site.mtimes()
        assert sorted(u for u in now if now[u] != mtimes[u]) == sorted(changed)
        assert second.recrawl["unchanged"] == len(fetched) - 13 and second.recrawl["notModified"] == 0
        assert second.recrawl["changed"] == 10 and second.recrawl["gone"] == 3
        check_mirror_is_the_tree(site, site.index())


@pytest.mark.async_timeout(240)
async def test_in_warc_mode_unchanged_pages_are_revisit_records_and_the_series_goes_on(tmp_path):
    web = tree(seed=23, hosts=4, pages=30)
    async with served(web, web.port) as srv:
        site = Site(tmp_path, web, srv, output_mode="warc")
        await site.crawl()
        first_files = sorted(n for n in os.listdir(site.config.save_dir) if n.endswith(".warc.gz"))
        index1 = site.index()
        changed, _deleted = change_and_delete(site, sorted(index1))
        _, second, _after = await site.crawl(recrawl=True)
        files = sorted(n for n in os.listdir(site.config.save_dir) if n.endswith(".warc.gz"))
        new = [n for n in files if n not in first_files]
        assert len(new) == 1 and files[:len(first_files)] == first_files
        revisits, responses = {}, {}
        with open(os.path.join(site.config.save_dir, new[0]), "rb") as f:
            for rec in ArchiveIterator(f, check_digests="raise"):
                uri = rec.rec_headers.get_header("WARC-Target-URI")
                if rec.rec_type == "revisit":
                    assert rec.http_headers.get_statuscode() == "304"
                    revisits[uri] = rec.rec_headers
                elif rec.rec_type == "response":
                    responses[uri] = rec.http_headers.get_statuscode()
        assert len(revisits) == second.recrawl["notModified"] == len(index1) - 13
        for headers in revisits.values():
            assert headers.get_header("WARC-Profile").endswith("/server-not-modified")
            assert headers.get_header("WARC-Refers-To-Date") and headers.get_header("WARC-Refers-To-Target-URI")
        # the pages saved: a response for the changed ones only (robots.txt, the PDFs not kept,
        # redirects and errors are archived as every exchange is)
        assert {u for u, s in responses.items() if s == "200" and u in index1} == set(changed)
        # the index goes on: the first crawl's lines, then the changed pages'
        with open(os.path.join(site.config.save_dir, INDEX_NAME), encoding="utf-8") as f:
            lines = [parse_index_line(line.rstrip("\n"))["url"] for line in f]
        assert lines[:len(index1)] == list(index1) and sorted(lines[len(index1):]) == sorted(changed)
        index = site.index(unique=False)
        assert set(index) == set(index1) and all(index[u]["path"] == new[0] for u in changed)
        cdxj = os.path.join(site.config.save_dir, new[0].replace(".warc.gz", ".cdxj"))
        with open(cdxj) as f:
            assert sum('"mime": "warc/revisit"' in line for line in f) == len(revisits)


@pytest.mark.async_timeout(240)
async def test_revisit_after_keeps_young_pages_and_still_reaches_what_they_link_to(tmp_path):
    web = tree(seed=24, hosts=3, pages=20)
    async with served(web, web.port) as srv:
        site = Site(tmp_path, web, srv)
        _, _first, before = await site.crawl()
        index1 = site.index()
        mtimes = site.mtimes()
        site.config = site.config.replace(revisit_after=3600.0)
        _, second, after = await site.crawl(recrawl=True)
        assert second.recrawl["skipped"] == len(index1) and second.pages == 0
        asked = {r[0] for r in pages_of(after)}
        assert not asked & set(index1)  # no page younger than an hour asked again
        # what only those pages led to (redirects, missing pages) is asked again
        assert asked == {r[0] for r in pages_of(before)} - set(index1) and asked
        assert site.index().keys() == index1.keys() and site.mtimes() == mtimes
        skipped = [e for e in read_log(os.path.join(site.config.state_dir, "crawl.log"))
                   if e["recrawl"] == "skipped"]
        assert len(skipped) == len(index1) and all(e["reason"] == "notDue" for e in skipped)


@pytest.mark.async_timeout(120)
async def test_recrawl_gone_keep_leaves_the_file_and_asks_again_next_time(tmp_path):
    web = tree(seed=28, hosts=2, pages=12)
    async with served(web, web.port) as srv:
        site = Site(tmp_path, web, srv, recrawl_gone="keep")
        await site.crawl()
        index1 = site.index()
        gone = [u for u in sorted(index1) if u not in web.seeds and site.tree_path(u).endswith(".html")][:2]
        for url in gone:
            os.unlink(site.tree_path(url))
        mtimes = site.mtimes()
        _, second, after = await site.crawl(recrawl=True)
        assert sorted(r[0] for r in pages_of(after) if r[2] == 404 and r[0] in index1) == gone
        assert second.recrawl["gone"] == 2 and second.recrawl["unchanged"] == len(index1) - 2
        # kept: the files as they were, still listed
        assert site.index().keys() == index1.keys() and site.mtimes() == mtimes
        # and their records too: the next recrawl asks them again
        _, third, again = await site.crawl(recrawl=True)
        assert sorted(r[0] for r in pages_of(again) if r[2] == 404 and r[0] in index1) == gone
        assert third.recrawl["gone"] == 2 and site.index().keys() == index1.keys()


@pytest.mark.async_timeout(120)
async def test_a_304_for_a_page_whose_file_is_missing_is_asked_again_plainly(tmp_path):
    web = tree(seed=27, hosts=2, pages=12)
    async with served(web, web.port) as srv:
        site = Site(tmp_path, web, srv)
        await site.crawl()
        index1 = site.index()
        lost = sorted(index1)[2:4]
        for url in lost:  # the mirror lost them (a person, a disk): a 304 would keep nothing
            os.unlink(os.path.join(site.config.save_dir, index1[url]["path"]))
        _, second, after = await site.crawl(recrawl=True)
        asked = [r for r in pages_of(after) if r[0] in lost]
        # each asked twice: with its validators (304), then without them (200)
        assert sorted((r[0], r[2], bool(r[3])) for r in asked) == sorted(
            [(u, 304, True) for u in lost] + [(u, 200, False) for u in lost])
        assert site.index().keys() == index1.keys()
        check_mirror_is_the_tree(site, site.index())
        r = second.recrawl
        assert r["unchanged"] == len(index1) and r["notModified"] == len(index1) - 2 and r["changed"] == 0, r


@pytest.mark.async_timeout(120)
async def test_recrawl_refuses_what_it_cannot_revisit_with_one_line(tmp_path):
    web = tree(seed=25, hosts=2, pages=10)
    async with served(web, web.port) as srv:
        site = Site(tmp_path, web, srv, limit_page=5)
        with pytest.raises(StateError, match="no finished crawl"):
            Engine(site.config, recrawl=True)
        await site.crawl()  # stopped by limitPage: not finished
        with pytest.raises(StateError, match="has not finished.*--reload"):
            Engine(site.config, recrawl=True)
        with pytest.raises(StateError, match="outputMode save"):
            Engine(site.config.replace(output_mode="save"), recrawl=True)


@pytest.mark.slow
@pytest.mark.async_timeout(300)
async def test_a_recrawl_killed_and_reloaded_ends_as_one_that_was_not(tmp_path):
    web = tree(seed=26, hosts=6, pages=40)
    async with served(web, web.port) as srv:
        site = Site(tmp_path, web, srv, wait_duration=0.02, pages_connexions=10, checkpoint_interval=0.3)
        await site.crawl()
        fetched = sorted(site.index())
        changed, deleted = change_and_delete(site, fetched)
        srv.clear()
        conf = write_conf(tmp_path, site.config)
        proc = await start_crawler(conf, "--recrawl", cwd=str(tmp_path))
        for _ in range(1500):  # until half the pages were asked again
            if len(pages_of(srv.requests())) >= len(fetched) // 2:
                break
            await asyncio.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 200) == 0, (tmp_path / "crawler.err").read_text()
        index = site.index()
        assert sorted(index) == sorted(set(fetched) - set(deleted))
        check_mirror_is_the_tree(site, index)
        entries = [e for e in read_log(os.path.join(site.config.state_dir, "crawl.log")) if e["recrawl"]]
        assert Counter(e["url"] for e in entries) == Counter(fetched)  # one verdict each, none twice
        verdicts = Counter(e["recrawl"] for e in entries)
        assert verdicts["changed"] == 10 and verdicts["gone"] == 3
        assert verdicts["unchanged"] == len(fetched) - 13


@pytest.mark.async_timeout(240)
async def test_a_recrawl_stopped_with_reads_in_flight_stops_cleanly_and_reloads(tmp_path):
    """SIGTERM in the middle of a recrawl, its stored reads under way (Recrawl.prefetch: read
    on the writer while their pages are asked): the crawler stops with its exit code and
    no traceback, and --reload ends it with one verdict a page, as a recrawl never stopped."""
    web = tree(seed=28, hosts=6, pages=40)
    async with served(web, web.port) as srv:
        site = Site(tmp_path, web, srv, wait_duration=0.02, pages_connexions=40, checkpoint_interval=0.3)
        await site.crawl()
        fetched = sorted(site.index())
        srv.clear()
        conf = write_conf(tmp_path, site.config)
        proc = await start_crawler(conf, "--recrawl", cwd=str(tmp_path))
        for _ in range(1500):  # until a third of the pages were asked again
            if len(pages_of(srv.requests())) >= len(fetched) // 3:
                break
            await asyncio.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 143
        err = (tmp_path / "crawler.err").read_text()
        assert "Traceback" not in err and "Exception" not in err and "never retrieved" not in err, err
        assert len(pages_of(srv.requests())) < len(fetched), "stopped too late to test anything"
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 200) == 0, (tmp_path / "crawler.err").read_text()
        assert sorted(site.index()) == fetched
        entries = [e for e in read_log(os.path.join(site.config.state_dir, "crawl.log")) if e["recrawl"]]
        assert Counter(e["url"] for e in entries) == Counter(fetched)  # one verdict each, none twice
        assert Counter(e["recrawl"] for e in entries) == {"unchanged": len(fetched)}


@pytest.mark.async_timeout(240)
async def test_a_recrawl_stopped_with_urls_parked_beside_full_site_queues_loses_none(tmp_path):
    """A recrawl queues all its pages at once: with site queues of 3, most of them wait in the
    sites' parks (Frontier.parked).  The graceful stop (what SIGTERM calls) lands while URLs are
    parked; the final checkpoint carries them, and --reload ends the recrawl with one verdict
    a page, none lost and none asked twice after the stop."""
    web = tree(seed=28, hosts=6, pages=40)
    async with served(web, web.port) as srv:
        site = Site(tmp_path, web, srv, wait_duration=0.02, max_urls_by_site=3)
        await site.crawl()
        fetched = sorted(site.index())
        srv.clear()
        engine = Engine(site.config, recrawl=True)
        run = asyncio.ensure_future(engine.run())
        parked_at_stop = 0
        for _ in range(3000):  # until a third of the pages were asked again, URLs parked
            parked_at_stop = engine.frontier.parked
            if len(pages_of(srv.requests())) >= len(fetched) // 3 and parked_at_stop or run.done():
                break
            await asyncio.sleep(0.01)
        assert not run.done() and parked_at_stop > 6 * 3, (parked_at_stop, "the parks were not in use")
        snap = engine.snapshot()  # what /stats.json and /metrics say of them
        assert check_snapshot(snap) == [] and snap["urls"]["parked"] == engine.frontier.parked > 0
        assert snap["urls"]["in_memory"] >= snap["urls"]["parked"]
        assert f'larbin_urls{{where="parked"}} {snap["urls"]["parked"]}' in render_metrics(snap).splitlines()
        in_flight = engine.frontier.in_flight
        engine.request_stop("the test's stop")
        stopped = await run
        assert stopped.failed is None
        asked_before = Counter(r[0] for r in pages_of(srv.requests()))
        assert sum(asked_before.values()) < len(fetched), "stopped too late to test anything"
        srv.clear()
        summary = await Engine(site.config, reload=True).run()
        assert summary.failed is None
        asked_after = Counter(r[0] for r in pages_of(srv.requests()))
        assert sorted(site.index()) == fetched
        entries = [e for e in read_log(os.path.join(site.config.state_dir, "crawl.log")) if e["recrawl"]]
        assert Counter(e["url"] for e in entries) == Counter(fetched)  # one verdict each, none twice
        assert Counter(e["recrawl"] for e in entries) == {"unchanged": len(fetched)}
        # every page asked again, once: only one in flight at the stop may be asked once more
        assert set(fetched) <= set(asked_before) | set(asked_after)
        assert max(asked_before.values()) == 1 and max(asked_after.values()) == 1
        twice = set(asked_before) & set(asked_after)
        assert len(twice) <= in_flight, (twice, in_flight)


@pytest.mark.async_timeout(240)
async def test_pages_with_no_validator_at_all_are_told_unchanged_by_their_digest(tmp_path):
    """The synthetic web sends neither ETag nor Last-Modified: a recrawl asks each page
    plainly, and a 200 with the last crawl's digest is unchanged, its stored links read
    after the answer (the same batched read as a 304's), its file untouched, the crawl
    reaching the same URLs as the first."""
    from larbin_py.sim import Sim

    from helpers.crawl import make_config
    from helpers.state import page_requests, sim_config

    async with Sim(sim_config(61)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.0)
        first = await Engine(config).run()
        assert first.failed is None and first.pages > 100
        before = Counter(page_requests(sim.log))
        save = config.save_dir
        with open(os.path.join(save, INDEX_NAME), encoding="utf-8") as f:
            index = {e["url"]: e for e in (parse_index_line(line.rstrip("\n")) for line in f)}
        mtimes = {url: os.stat(os.path.join(save, e["path"])).st_mtime_ns for url, e in index.items()}
        sim.log.clear()
        engine = Engine(config, recrawl=True)
        second = await engine.run()
        assert second.failed is None
        assert not any(r.header("if-none-match") or r.header("if-modified-since") for r in sim.log.requests)
        r = second.recrawl
        assert r["unchanged"] == first.pages and r["notModified"] == 0 and r["changed"] == 0, r
        assert engine.recrawl.reads == first.pages  # each page's stored data read once, after its answer
        assert Counter(page_requests(sim.log)) == before
        assert {url: os.stat(os.path.join(save, e["path"])).st_mtime_ns for url, e in index.items()} == mtimes
