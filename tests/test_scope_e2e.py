"""End-to-end: sitemaps, noindex, nofollow headers and canonicals against the sim's truth (sim.scope)."""

from __future__ import annotations

from collections import Counter

import pytest
from warcio.archiveiterator import ArchiveIterator

from larbin_py.demo import crawl_rules
from larbin_py.sim import Sim, SimConfig
from helpers.crawl import (check_conservation, check_politeness, check_robots_first, crawl, loop_gaps, make_config,
                           page_requests, read_index)

pytestmark = pytest.mark.slow


def scope_sim(seed: int = 4) -> SimConfig:
    return SimConfig(seed=seed, hosts=30, pages_per_host=(2, 5), hosts_per_ip=4, dns=True, robots_agent="larbin_py",
                     trap=False, scope=True)


@pytest.mark.async_timeout(240)
async def test_sitemaps_noindex_and_canonicals_exactly(tmp_path):
    async with Sim(scope_sim()) as sim:
        config = make_config(tmp_path, sim, sitemaps=True, follow_canonical=True, wait_duration=0.05,
                             output_mode="warc")
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        flavours = Counter(h.sitemap_flavour for h in sim.web.hosts.values() if h.name.startswith("h"))
        assert all(flavours[f] for f in ("index", "text", "default", "none")), flavours
        requested = [r.url for r in page_requests(sim)]
        # exact coverage: every sitemap file and page the truth names, nothing else, nothing twice
        assert set(requested) == truth.must_request, (sorted(truth.must_request - set(requested))[:10],
                                                      sorted(set(requested) - truth.must_request)[:10])
        assert [u for u, n in Counter(requested).items() if n > 1] == []
        only = {u for u in truth.must_request if "/sm/only" in u}
        assert only and only <= truth.listed  # pages no link reaches were found through sitemaps
        hidden = {u for u in truth.must_not_request if u.endswith("/ni/hidden.html")}
        assert hidden and not hidden & set(requested)  # X-Robots-Tag nofollow honoured
        check_robots_first(sim)
        check_politeness(sim, config.wait_duration)
        check_conservation(engine, summary)
        # each URL's outcome is counted under its reason
        expected = Counter(truth.expected_reason.values())
        for reason in ("sitemap", "noindex", "canonicalised", "forbiddenRobots", "err40X"):
            loops = len(truth.canonical_loops) if reason == "canonicalised" else 0
            assert summary.forgotten.get(reason, 0) == expected[reason] + loops, reason
        assert summary.sitemaps["files"] == len(truth.sitemap_files)
        assert summary.sitemaps["offSite"] > 0 and summary.rejected["canonicalLoop"] == len(truth.canonical_loops)
        # saved: the truth's pages, and one page of each canonical loop
        index = read_index(config.save_dir)
        saved = set(index)
        loops = set().union(*truth.canonical_loops)
        assert saved - loops == set(truth.saved)
        for pair in truth.canonical_loops:
            assert len(pair & saved) == 1, pair
        # found by sitemap, with its lastmod, in the WARC records
        found = {}
        for name in {e["path"] for e in index.values()}:
            with open(tmp_path / "save" / name, "rb") as f:
                for rec in ArchiveIterator(f):
                    # a page whose payload the archive has already is a revisit record
                    if rec.rec_type in ("response", "revisit") and rec.http_headers.get_statuscode() == "200":
                        h = rec.rec_headers
                        found[h.get_header("WARC-Target-URI")] = (h.get_header("WARC-Larbin-Found-By"),
                                                                  h.get_header("WARC-Larbin-Lastmod"))
        for url in only & saved:
            assert found[url][0] == "sitemap", url
        assert any(lastmod for how, lastmod in found.values() if how == "sitemap")
        assert all(found[u] == (None, None) for u in saved if u not in truth.listed)


@pytest.mark.async_timeout(240)
async def test_off_by_default_no_sitemap_is_read_and_noindex_can_be_ignored(tmp_path):
    async with Sim(scope_sim(seed=6)) as sim:
        config = make_config(tmp_path, sim, respect_noindex=False, wait_duration=0.02)
        assert not config.sitemaps and not config.follow_canonical
        engine, summary = await crawl(config)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = {r.url for r in page_requests(sim)}
        assert requested == truth.must_request
        assert not any("/sm/" in u or "sitemap" in u or "/maps/" in u for u in requested)
        assert not any("/cn/main" in u for u in requested)  # canonicals not followed
        assert "noindex" not in summary.forgotten and "sitemap" not in summary.forgotten
        assert summary.pages == len(truth.saved) and not summary.sitemaps
        check_conservation(engine, summary)


@pytest.mark.async_timeout(120)
async def test_a_sitemap_of_50000_entries_is_read_beside_the_loop(tmp_path):
    """50,000 entries are about a second of parsing and normalizing: read on the
    sitemaps' thread, the loop keeps turning (it stopped that long before)."""
    from larbin_py.engine import Engine
    from larbin_py.sim.model import Resource

    entries = "".join(f"<url><loc>http://elsewhere.example/docs/s{i // 100}/p{i}.html</loc>"
                      f"<lastmod>2026-11-{1 + i % 28:02d}</lastmod></url>" for i in range(50_000))
    body = ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + entries + "</urlset>").encode()
    async with Sim(SimConfig(seed=6, hosts=4, pages_per_host=(2, 4), hosts_per_ip=4, dns=True,
                             robots_agent="larbin_py", trap=False)) as sim:
        host = sim.web.hosts["h0.sim.test"]
        host.resources["/sitemap.xml"] = Resource(200, "application/xml", body, kind="sitemap")
        config = make_config(tmp_path, sim, sitemaps=True, wait_duration=0.0, max_page_size=len(body) + 1)
        async with loop_gaps() as (gaps, _):
            summary = await Engine(config).run()
    assert summary.failed is None
    assert summary.sitemaps["urls"] == 50_000 and summary.sitemaps["offSite"] == 50_000  # all of it read
    assert max(gaps) < 0.5, sorted(gaps)[-5:]  # (0.016-0.019 s seen here; 1.0 s when read on the loop)
