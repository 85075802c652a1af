"""Per-site settings (larbin_py.site_settings): the site block's lines, and a crawl that obeys them."""

from __future__ import annotations

import pytest

from larbin_py.config import ConfigError, format_config, parse_config_text
from larbin_py.demo import crawl_rules
from larbin_py.site_settings import SiteRule, SiteSettings, format_site_rule, parse_site_line
from larbin_py.sim import Sim, SimConfig
from helpers.crawl import SLACK, check_conservation, check_politeness, crawl, make_config, page_requests

SEED = "startUrl http://a.example/\n"


def test_the_first_matching_line_wins():
    s = SiteSettings([parse_site_line(w.split()) for w in (
        "shop.example.org maxPagesBySite=5", "*.example.org waitDuration=5", "example.org cookies=on", "* dynamic=off")])
    assert s.for_host("shop.example.org").max_pages == 5
    assert s.for_host("a.b.example.org").wait_duration == 5.0
    assert s.for_host("example.org").cookies is True  # *.example.org is its subdomains only
    assert s.for_host("EXAMPLE.ORG").cookies is True
    assert s.for_host("other.net").dynamic == "off"
    assert s.for_host("notexample.org").dynamic == "off"  # no suffix match without the dot
    assert SiteSettings([parse_site_line(["a.org", "cookies=on"])]).for_host("b.org") is None


def test_a_line_reads_back_from_its_text():
    rule = parse_site_line('x.org waitDuration=1.5 header=Accept-Language:fr,en header="X-Team: crawl ops" '
                           'UserAgent="My Bot/2.0 (+https://x.org/bot)" cookies=off dynamic=scroll maxBytesBySite=9'
                           .split())
    assert rule == SiteRule("x.org", wait_duration=1.5, max_bytes=9, cookies=False, dynamic="scroll",
                            headers=(("Accept-Language", "fr,en"), ("X-Team", "crawl ops")),
                            user_agent="My Bot/2.0 (+https://x.org/bot)")
    assert parse_site_line(format_site_rule(rule).split()) == rule
    assert rule.header_bytes[0] == (b"User-Agent", b"My Bot/2.0 (+https://x.org/bot)")


@pytest.mark.parametrize("line,message", [
    ("a.org header=Cookie:x=1", "header: Cookie may not be set per site"),
    ("a.org header=User-Agent:x", "use UserAgent="),
    ("a.org header=Bad\\ Name:x", "expected NAME:VALUE"),
    ("a.org waitDuration=-1", "waitDuration: expected a number of seconds in 0..3600"),
    ("a.org waitDuration=nan", "waitDuration"),
    ("a.org maxPagesBySite=1.5", "maxPagesBySite: expected an integer"),
    ("a.org cookies=maybe", "cookies: expected on or off"),
    ("a.org dynamic=call:x", "dynamic: expected one of off, on, scroll"),
    ("a.org cookies=on cookies=off", "cookies given twice"),
    ("a.org header=X:1 header=x:2", "a header is given twice"),
    ("bücher.example cookies=on", "write an internationalized name as xn--"),
    ("*.*.org cookies=on", "expected a host pattern"),
    ("http://a.org/ cookies=on", "expected a host pattern"),
    ('a.org UserAgent="x', "No closing quotation"),
])
def test_a_bad_line_is_an_error_naming_its_line(line, message):
    with pytest.raises(ConfigError) as exc:
        parse_config_text(SEED + f"site\n  ok.example cookies=on\n  {line}\nend\n", "t.conf")
    assert str(exc.value).startswith("t.conf:4: site: ") and message in str(exc.value), str(exc.value)


def test_print_config_shows_the_block():
    config = parse_config_text(SEED + 'site\n  *.a.org waitDuration=5 header=Accept-Language:fr\n'
                               '  b.org UserAgent="B Bot/1" cookies=off\nend\n', "t.conf")
    text = format_config(config, redact=True)
    assert 'site\n    *.a.org waitDuration=5 header=Accept-Language:fr\n    b.org UserAgent="B Bot/1" cookies=off\nend' \
        in text
    assert parse_config_text(format_config(config), "again").site == config.site


@pytest.mark.slow
@pytest.mark.async_timeout(180)
async def test_a_crawl_obeys_each_hosts_line(tmp_path):
    # every host's robots.txt lets only the agent "special" in: the crawl's own agent reads nothing
    sim_cfg = SimConfig(seed=12, hosts=4, pages_per_host=(8, 12), hosts_per_ip=1, dns=True, extras=False,
                        trap=False, robots_mix={"agent": 1.0}, robots_agent="special", p_redirect=0.0, p_loop=0.0)
    async with Sim(sim_cfg) as sim:
        lines = (parse_site_line("h1.sim.test waitDuration=0.4 header=Accept-Language:fr UserAgent=special/1.0"
                                 .split()),
                 parse_site_line('h2.sim.test UserAgent="special/2.0 (+http://x.test/)" maxPagesBySite=2'.split()),
                 parse_site_line("*.sim.test cookies=off".split()))
        config = make_config(tmp_path, sim, wait_duration=0.02, site=lines, depth_in_site=20)
        engine, summary = await crawl(config)
        by_host: dict[str, list] = {}
        for r in sim.log.requests:
            by_host.setdefault(r.host, []).append(r)
        # h1: its own agent reads its robots.txt group, its header on every request, its own gap
        truth = sim.truth(crawl_rules(config.replace(user_agent="special/1.0"),
                                      [sim.web.hosts["h1.sim.test"].root(sim.port)]))
        h1 = by_host["h1.sim.test"]
        pages = {r.url for r in h1 if r.path != "/robots.txt"}
        assert pages == {u for u in truth.must_request if "//h1.sim.test" in u} and len(pages) >= 4
        assert all(r.header("accept-language") == "fr" and r.header("user-agent") == "special/1.0" for r in h1)
        starts = sim.log.starts_by_host()["h1.sim.test"]
        assert sim.log.min_gap(starts) >= 0.4 - SLACK
        # h2: its agent, and its page budget
        h2 = by_host["h2.sim.test"]
        assert all(r.header("user-agent") == "special/2.0 (+http://x.test/)" for r in h2)
        assert len([r for r in h2 if r.path != "/robots.txt"]) == 2
        assert summary.forgotten.get("siteBudget", 0) > 0
        # the other hosts: the crawl's own agent, no extra header (h0's robots.txt is absent: the sim
        # keeps its root crawlable; h3's forbids the crawl's agent everything)
        assert [r.path for r in by_host["h3.sim.test"]] == ["/robots.txt"]
        for host in ("h0.sim.test", "h3.sim.test"):
            assert all(r.header("user-agent") == config.user_agent for r in by_host[host]), host
            assert all(r.header("accept-language") is None for r in by_host[host]), host
        assert len(by_host["h0.sim.test"]) > 1
        check_politeness(sim, config.wait_duration)
        check_conservation(engine, summary)
