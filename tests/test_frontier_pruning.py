"""Pruning on its own (larbin_py.frontier.pruning): plain sites and IPs, a fake clock, no frontier."""

from __future__ import annotations

from larbin_py import robots
from larbin_py.frontier.pruning import PRUNE_BATCH, Pruning, settled
from larbin_py.frontier.sites import DnsState, IPSite, LeaseState, NamedSite, RobotsState


def site(host: str = "a.test") -> NamedSite:
    return NamedSite(f"http://{host}:80", "http", host, 80)


def table(*sites: NamedSite) -> dict[str, NamedSite]:
    return {s.key: s for s in sites}


def test_an_idle_settled_site_goes_after_prune_after_with_its_counts_kept():
    p = Pruning(prune_after=10.0)
    a = site()
    a.pages, a.errors = 7, 2
    sites = table(a)
    p.note_idle(a, 0.0)
    p.note_idle(a, 3.0)  # idle again later: its due time moves, it is not listed twice
    p.prune(12.0, sites, {})
    assert sites == {"http://a.test:80": a}  # idle since 3.0: due at 13.0
    p.prune(13.0, sites, {})
    assert sites == {} and p.sites_pruned == 1 and a.idle_at == -1.0
    assert p.kept["http://a.test:80"] == (None, 0.0, 0.0, 7, 2)


def test_a_site_whose_next_request_must_wait_or_whose_dns_is_pending_stays():
    p = Pruning(prune_after=1.0)
    waiting, resolving = site("w.test"), site("r.test")
    waiting.next_allowed = 30.0
    resolving.dns = DnsState.RESOLVING
    assert not settled(resolving) and settled(waiting)
    sites = table(waiting, resolving)
    p.note_idle(waiting, 0.0)
    p.note_idle(resolving, 0.0)
    p.prune(5.0, sites, {})
    assert set(sites) == {"http://w.test:80", "http://r.test:80"}
    resolving.dns = DnsState.OK
    p.prune(6.0, sites, {})  # looked at again a prune_after later, settled now
    assert set(sites) == {"http://w.test:80"}
    p.prune(29.9, sites, {})
    assert set(sites) == {"http://w.test:80"}
    p.prune(30.0, sites, {})  # its politeness wait is over
    assert sites == {}


def test_a_site_busy_at_its_due_time_is_unlisted_until_it_goes_idle_again():
    p = Pruning(prune_after=1.0)
    a = site()
    sites = table(a)
    p.note_idle(a, 0.0)
    a.active = 1  # a request started meanwhile
    p.prune(2.0, sites, {})
    assert sites and a.idle_at == -1.0
    a.active = 0
    p.prune(10.0, sites, {})
    assert sites  # not listed: nothing happens until the frontier says it is idle
    p.note_idle(a, 10.0)
    p.prune(11.0, sites, {})
    assert sites == {}


def test_revive_gives_back_the_rules_until_their_expiry_and_the_counts_always():
    p = Pruning(prune_after=1.0)
    a = site()
    rules = robots.RobotsTxt.parse(b"User-agent: *\nDisallow: /x\nCrawl-delay: 3\n")
    a.set_robots(rules, "restore", 100.0, "larbin")
    a.pages = 4
    sites = table(a)
    p.note_idle(a, 0.0)
    p.prune(2.0, sites, {})
    again = site()
    assert p.revive(again, 50.0) is True
    assert again.robots is rules and again.robots_state is RobotsState.OK and again.robots_expiry == 100.0
    assert again.crawl_delay == 3.0 and again.pages == 4
    assert p.revive(site(), 50.0) is False  # taken back once
    # made again past the expiry: the counts come back, the rules do not
    p.note_idle(again, 60.0)
    p.prune(61.0, table(again), {})
    late = site()
    assert p.revive(late, 200.0) is True
    assert late.robots is None and late.robots_state is RobotsState.NONE and late.pages == 4


def test_the_kept_records_are_a_bounded_lru():
    p = Pruning(prune_after=1.0, keep_sites=2)
    sites = [site(f"h{i}.test") for i in range(3)]
    for i, s in enumerate(sites):
        p.note_idle(s, float(i))
    p.prune(10.0, table(*sites), {})
    assert list(p.kept) == ["http://h1.test:80", "http://h2.test:80"]  # the oldest made way


def test_an_ip_goes_once_its_last_site_left_and_nothing_holds_it():
    p = Pruning(prune_after=1.0)
    ip = IPSite("10.0.0.1")
    ip.sites = 2
    ips = {"10.0.0.1": ip}
    p.left_ip(ip, 0.0)
    assert not ip.listed  # one site still on it
    p.left_ip(ip, 0.0)
    assert ip.listed and ip.sites == 0
    ip.pace.penalty = 2.0  # a 429 penalty decays first
    ip.next_allowed = 5.0
    p.prune(1.0, {}, ips)
    assert ips and ip.listed
    ip.pace.penalty = 1.0
    ip.lease = LeaseState.HELD  # a worker's lease still held
    p.prune(2.0, {}, ips)
    assert ips
    ip.lease = LeaseState.NONE
    p.prune(3.0, {}, ips)
    assert ips  # its next allowed time (5.0) is ahead: looked at then
    p.prune(5.0, {}, ips)
    assert ips == {} and p.ips_pruned == 1


def test_a_pruned_sites_ip_is_listed_in_turn():
    p = Pruning(prune_after=1.0)
    a = site()
    ip = a.ip_site = IPSite("10.0.0.2")
    ip.sites = 1
    sites, ips = table(a), {"10.0.0.2": ip}
    p.note_idle(a, 0.0)
    p.prune(1.0, sites, ips)
    assert sites == {} and a.ip_site is None and ip.sites == 0 and ip.listed
    p.prune(2.0, sites, ips)
    assert ips == {}


def test_prune_after_none_lists_nothing_but_still_counts_an_ips_sites():
    p = Pruning(prune_after=None)
    a = site()
    ip = IPSite("10.0.0.3")
    ip.sites = 1
    p.note_idle(a, 0.0)
    p.left_ip(ip, 0.0)
    p.prune(1e9, table(a), {"10.0.0.3": ip})
    assert a.idle_at == -1.0 and ip.sites == 0 and not ip.listed and p.sites_pruned == 0


def test_one_prune_looks_at_a_batch_at_most():
    p = Pruning(prune_after=1.0)
    many = [site(f"s{i}.test") for i in range(PRUNE_BATCH + 500)]
    sites = table(*many)
    for s in many:
        p.note_idle(s, 0.0)
    p.prune(2.0, sites, {})
    assert len(sites) == 500
    p.prune(2.0, sites, {})
    assert sites == {}
