"""The frontier's seams: its Protocols and who implements them, the offer
path (rules, seen test, queueing in one call), O(1) stats, and the pruning
of idle sites and IPs, driven with a fake clock."""

from __future__ import annotations

import inspect
import random

import pytest

from larbin_py import robots
from larbin_py.frontier import interfaces
from larbin_py.testing.fakes import MemoryQueue, MemorySeen, memory_stores
from larbin_py.frontier import codec
from larbin_py.frontier.assembly import assemble
from larbin_py.frontier.scheduler import PAGE, ROBOTS, Frontier
from larbin_py.frontier.stats import frontier_stats
from larbin_py.frontier.topcounts import TopCounts
from larbin_py.frontier.seen import SeenSet
from larbin_py.frontier.store import UrlStore
from larbin_py.net.dns import Resolver
from larbin_py.net.http import Fetcher
from larbin_py.rules import UrlRules

from test_frontier import Sim


# ----------------------------------------------------------------------
# The Protocols and their implementations
# ----------------------------------------------------------------------
def _members(proto) -> dict:
    """The Protocol's own members: name -> function or property (data members: None)."""
    found = {name: None for name in getattr(proto, "__annotations__", {})}
    for name, value in vars(proto).items():
        if name == "__len__" or (not name.startswith("_") and (callable(value) or isinstance(value, property))):
            found[name] = value
    return found


def _accepts(impl, spec) -> list[str]:
    """How ``impl`` fails to accept every call ``spec`` allows (empty: it does)."""
    problems = []
    if inspect.iscoroutinefunction(spec) != inspect.iscoroutinefunction(impl):
        problems.append("async differs")
    want = list(inspect.signature(spec).parameters.values())[1:]
    have = inspect.signature(impl).parameters
    have_list = list(have.values())[1:]
    positional = [p for p in have_list if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, p in enumerate(w for w in want if w.kind is w.POSITIONAL_OR_KEYWORD):
        if i >= len(positional) or positional[i].name != p.name:
            problems.append(f"positional {p.name} missing")
    for p in (w for w in want if w.kind is w.KEYWORD_ONLY):
        q = have.get(p.name)
        if q is None or q.kind not in (q.KEYWORD_ONLY, q.POSITIONAL_OR_KEYWORD):
            problems.append(f"keyword {p.name} missing")
    named = {w.name for w in want}
    for q in have_list:  # what the Protocol does not pass must have a default
        if q.name not in named and q.default is q.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD):
            problems.append(f"{q.name} has no default")
    return problems


def _conforms(obj, proto, members=_members) -> list[str]:
    """How ``obj`` fails to implement ``proto`` (empty: it does); ``members`` lists the
    Protocol's members (its own by default)."""
    problems = []
    for name, spec in members(proto).items():
        if not hasattr(obj, name):
            problems.append(f"{name} missing")
        elif isinstance(spec, property):
            if not isinstance(inspect.getattr_static(type(obj), name, None), property):
                problems.append(f"{name} is not a property")
        elif spec is not None:
            problems += [f"{name}: {p}" for p in _accepts(getattr(type(obj), name), spec)]
    return problems


@pytest.fixture
def implementations(tmp_path):
    resolver = Resolver([("127.0.0.1", 53)])
    fetcher = Fetcher(user_agent="larbin_py-test")
    yield [
        (UrlStore(str(tmp_path / "store"), ram_urls=4), interfaces.UrlQueue),
        (MemoryQueue(), interfaces.UrlQueue),
        (SeenSet(), interfaces.SeenStore),
        (MemorySeen(), interfaces.SeenStore),
        (resolver, interfaces.Resolver),
        (fetcher, interfaces.Fetcher),
    ]
    resolver.close()


def test_the_real_parts_and_the_fakes_implement_the_protocols(implementations):
    for obj, proto in implementations:
        assert isinstance(obj, proto), (type(obj).__name__, proto.__name__)
        assert _conforms(obj, proto) == [], (type(obj).__name__, proto.__name__)


def test_the_signature_check_sees_a_part_that_does_not_fit():
    class Odd:  # has every name, but pop wants an argument and fetch is not async
        corrupt_records = 0
        in_memory = on_disk_only = 0
        push = flush = read_position = write_position = release_through = ram_records = close = \
            MemoryQueue.push

        def pop(self, n): ...

        def __len__(self): return 0

    problems = _conforms(Odd(), interfaces.UrlQueue)
    assert "pop: n has no default" in problems and "in_memory is not a property" in problems

    class SyncFetcher:
        stats = {}

        def fetch(self, url, ip, port, *, cookie=None, addresses=()): ...

        async def close(self): ...

    assert _conforms(SyncFetcher(), interfaces.Fetcher) == ["fetch: async differs"]


# ----------------------------------------------------------------------
# Offer: rules, the cache of recent links, the seen test and queueing
# ----------------------------------------------------------------------
class SpyRules(UrlRules):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.asked: list[list[str]] = []

    def admit_many(self, urls, *args, **kw):
        self.asked.append(list(urls))
        return UrlRules.admit_many(self, urls, *args, **kw)


def fake_frontier(**kw) -> Frontier:
    args = dict(ram_urls=100, max_urls_by_site=10, max_requests=10, wait_duration=1.0,
                rng=random.Random(1), agent="larbin", stores=memory_stores(), seen=MemorySeen(), retries=3)
    args.update(kw)
    return assemble(**args)


def test_offer_queues_the_new_links_once_and_counts_every_refusal():
    rules = SpyRules(depth_in_site=2, no_external_links=True, get_cgi=False)
    f = fake_frontier(rules=rules)
    seen = f.admission.seen
    page = "http://a.test/"
    links = ["http://a.test/1", "http://a.test/2", "http://b.test/", "http://a.test/1", "http://a.test/q?x=1"]
    assert f.admission.offer(page, 2, links) == 2
    assert seen.batches == 1  # one batched test-and-add for the page
    main = f.lanes.main
    assert [(r.url, r.depth, r.retries, r.hops) for r in main.ram_records()] == \
        [("http://a.test/1", 1, 3, 0), ("http://a.test/2", 1, 3, 0)]
    assert f.admission.rejected == {"outSite": 1, "cgi": 1, "seen": 1}
    assert f.taken == 2 and f.conservation() == (2, 2)
    # Met again: answered from the cache of recent links, without the rules
    assert f.admission.offer("http://a.test/1", 1, ["http://a.test/2", "http://a.test/3"]) == 1
    assert rules.asked[-1] == ["http://a.test/3"] and f.admission.rejected["seen"] == 2
    # A page with no depth left refuses its site's links as too deep
    assert f.admission.offer("http://a.test/3", 0, ["http://a.test/4"]) == 0 and f.admission.rejected["tooDeep"] == 1
    # A redirect's target keeps the page's depth and carries its hops
    assert f.admission.offer("http://a.test/5", 0, ("http://a.test/6",), redirect=True, hops=2) == 1
    last = list(main.ram_records())[-1]
    assert (last.url, last.depth, last.hops) == ("http://a.test/6", 0, 2)
    assert len(seen) == 4 == f.taken and f.conservation() == (4, 4)


def test_offer_meets_the_seen_store_for_links_the_cache_lost():
    f = fake_frontier(seen=MemorySeen([]))
    f.admission.seen_urls.size = 2
    links = [f"http://a.test/{i}" for i in range(10)]
    assert f.admission.offer("http://a.test/", 3, links) == 10
    assert f.admission.offer("http://a.test/", 3, links) == 0
    assert f.admission.rejected["seen"] == 10 and len(f.lanes.main) == 10


def test_offer_url_answers_accepted_duplicate_or_the_rules_reason():
    f = fake_frontier(rules=UrlRules(depth_in_site=4, forbidden_extensions=(".zip",)))
    assert f.admission.offer_url("http://a.test/") == ("accepted", None)
    assert f.admission.offer_url("http://a.test/") == ("duplicate", None)
    assert f.admission.offer_url("http://a.test/x.zip") == ("rejected", "forbiddenExtension")
    assert f.admission.offer_url("http://b.test/", priority=False) == ("accepted", None)
    assert [(r.url, r.depth, r.retries) for r in f.lanes.prio.ram_records()] == [("http://a.test/", 4, 3)]
    assert [r.url for r in f.lanes.main.ram_records()] == ["http://b.test/"]
    # a start URL's duplicate is the caller's answer, not a refused link
    assert f.admission.rejected == {} and f.taken == 2


def test_more_to_load_says_when_load_stopped_at_its_batch_with_room_left():
    f = fake_frontier(ram_urls=30, max_urls_by_site=100)
    assert not f.more_to_load()  # nothing queued
    assert f.admission.offer("http://a.test/", 3, [f"http://a.test/{i}" for i in range(10)]) == 10
    f.admission.offer_url("http://b.test/")  # the priority lane counts too
    assert f.more_to_load()
    assert f.load(0.0, max_reads=4) == 4 and f.more_to_load()  # the batch size stopped it
    assert f.load(0.0) == 7 and not f.more_to_load()  # both lanes drained
    assert f.admission.offer("http://a.test/", 3, [f"http://a.test/x{i}" for i in range(40)]) == 40
    f.load(0.0)
    assert f.in_sites == 30 and not f.is_get and len(f.lanes.main) == 21
    assert not f.more_to_load()  # the gate is closed: the frontier's own events reopen it


def test_a_frontier_on_memory_stores_crawls_and_checkpoints_like_on_disk(tmp_path):
    f = fake_frontier(ram_urls=20, max_urls_by_site=3, wait_duration=0.01)
    urls = [f"http://h{i % 4}.test/{i}" for i in range(40)]
    assert f.admission.offer("http://h0.test/", 5, urls) == 40
    sim = Sim(f, ips={f"h{i}.test": f"10.0.0.{i}" for i in range(4)}, latency=0.005)
    sim.run()
    assert sorted(sim.fetched) == sorted(urls)
    assert f.conservation() == (40, 40) and f.idle()
    state, carry = codec.snapshot(f, sim.now, 1000.0)
    assert carry == [] and state.stores["main"] == [0, 40] and state.fetched == 40


def test_the_default_stores_are_segments_in_state_dir(tmp_path):
    f = assemble(str(tmp_path / "fr"), ram_urls=10, max_urls_by_site=5, max_requests=5, wait_duration=1.0)
    assert all(isinstance(s, UrlStore) for s in (f.lanes.main, f.lanes.prio, f.lanes.wait))
    assert isinstance(f.admission.seen, SeenSet)
    assert sorted(p.name for p in (tmp_path / "fr").iterdir()) == ["main", "priority", "wait"]
    with pytest.raises(ValueError):
        assemble(ram_urls=10, max_urls_by_site=5, max_requests=5, wait_duration=1.0)


# ----------------------------------------------------------------------
# Stats: O(1), the same figures as a walk over every site
# ----------------------------------------------------------------------
def test_top_counts_match_a_full_sort():
    rng = random.Random(7)
    top = TopCounts(10)
    counts: dict[str, int] = {}
    for _ in range(5000):
        key = f"k{rng.randrange(60)}"
        counts[key] = counts.get(key, 0) + 1
        top.update(key, counts[key])
        best = sorted(counts.values(), reverse=True)[:10]
        assert sorted(top.counts.values(), reverse=True) == best
    assert [n for _, n in top.top()] == sorted(counts.values(), reverse=True)[:10]


class CheckedSim(Sim):
    """A Sim checking, at every pump, the frontier's running counts against a walk of its sites."""

    def pump(self):
        super().pump()
        f = self.f
        sites = f.sites.values()
        assert f.ready_sites == sum(1 for s in sites if s.queued)
        stats = frontier_stats(f)
        assert stats["sites"]["ready"] == f.ready_sites
        busiest = sorted((s.pages for s in sites if s.pages), reverse=True)[:10]
        assert [h["pages"] for h in stats["hosts"]["busiest"]] == busiest
        failing = sorted((s.errors for s in sites if s.errors), reverse=True)[:10]
        assert [h["errors"] for h in stats["hosts"]["failing"]] == failing


def test_stats_keep_ready_busiest_and_failing_as_a_walk_would_find_them(tmp_path):
    rng = random.Random(3)
    hosts = [f"s{i}.test" for i in range(30)]
    f = fake_frontier(ram_urls=60, max_urls_by_site=4, max_requests=8, wait_duration=0.05, retries=1,
                      prune_after=None)
    for i in range(400):
        f.admission.push(f"http://{rng.choice(hosts)}/{i}", 3, 1)
    outcomes = {}

    def outcome(req, n):
        return outcomes.setdefault((req.url, n), rng.choice(["ok", "ok", "ok", "err40X", "noConnection"]))

    sim = CheckedSim(f, ips={h: f"10.1.0.{i % 7}" for i, h in enumerate(hosts)}, page_outcome=outcome,
                     latency=0.02)
    sim.run()
    assert f.idle() and f.conservation()[0] == f.conservation()[1] == 400
    stats = frontier_stats(f)
    assert stats["fetched"] == len(sim.fetched) and stats["sites"]["known"] == 30
    assert stats["hosts"]["busiest"][0]["host"] in hosts


# ----------------------------------------------------------------------
# Pruning idle sites and IPs (fake clock)
# ----------------------------------------------------------------------
def pruning_frontier(tmp_path, **kw) -> Frontier:
    args = dict(ram_urls=100, max_urls_by_site=10, max_requests=10, wait_duration=1.0,
                rng=random.Random(1), agent="larbin", prune_after=10.0, jitter=0.0)
    args.update(kw)
    return assemble(str(tmp_path / "fr"), **args)


def advance(sim: Sim, t: float) -> None:
    sim.now = t
    sim.f.tick(t)


def test_an_idle_site_and_its_ip_are_pruned_after_prune_after(tmp_path):
    f = pruning_frontier(tmp_path)
    f.admission.push("http://a.test/1", 3, 2)
    sim = Sim(f, ips={"a.test": "10.0.0.1"})
    sim.run()
    end = sim.now
    assert sim.fetched == ["http://a.test/1"] and "http://a.test:80" in f.sites
    advance(sim, end + 5.0)
    assert "http://a.test:80" in f.sites and "10.0.0.1" in f.ips  # idle, not long enough
    advance(sim, end + 10.5)
    assert f.sites == {} and f.pruning.sites_pruned == 1
    assert "10.0.0.1" in f.ips  # the IP goes a prune_after later: it only now lost its last site
    advance(sim, end + 21.0)
    assert f.ips == {} and f.pruning.ips_pruned == 1
    stats = frontier_stats(f)
    assert stats["sites"]["known"] == 0 and stats["sites"]["total"] == 1 and stats["sites"]["pruned"] == 1
    assert stats["hosts"]["busiest"] == [{"host": "a.test", "pages": 1}]  # the table outlives the site
    assert f.conservation() == (1, 1)


def test_a_site_is_kept_while_its_next_request_must_wait(tmp_path):
    # waitDuration 30 s and idle pruning after 10 s: the site (and its IP)
    # stay until their next allowed time, so a URL for it then still waits.
    f = pruning_frontier(tmp_path, wait_duration=30.0)
    f.admission.push("http://a.test/1", 3, 2)
    sim = Sim(f, ips={"a.test": "10.0.0.1"})
    sim.run()
    last = sim.starts[-1][0]
    advance(sim, last + 20.0)
    assert "http://a.test:80" in f.sites
    f.admission.push("http://a.test/2", 3, 2)
    sim.run()
    starts = [t for t, k, _, _ in sim.starts if k == PAGE]
    assert len(starts) == 2 and starts[1] - starts[0] >= 30.0 - 1e-9
    advance(sim, starts[1] + 29.0)
    assert "http://a.test:80" in f.sites  # idle for 29 s, but its next request is 1 s away
    advance(sim, starts[1] + 30.5)
    assert f.sites == {}


def test_ip_politeness_holds_when_one_site_of_a_shared_ip_is_pruned(tmp_path):
    f = pruning_frontier(tmp_path, wait_duration=5.0, prune_after=1.0)
    f.admission.push("http://a.test/1", 3, 2)
    sim = Sim(f, ips={"a.test": "10.0.0.9", "b.test": "10.0.0.9"})
    sim.run()
    a_last = sim.starts[-1][0]
    advance(sim, a_last + 5.5)
    assert "http://a.test:80" not in f.sites and "10.0.0.9" in f.ips
    f.admission.push("http://b.test/1", 3, 2)
    f.admission.push("http://a.test/2", 3, 2)  # a made again, on the same IP as b
    sim.run()
    on_ip = [t for t, _, _, ip in sim.starts if ip == "10.0.0.9"]
    assert all(b - a >= 5.0 - 1e-9 for a, b in zip(on_ip, on_ip[1:]))
    assert sorted(sim.fetched) == ["http://a.test/1", "http://a.test/2", "http://b.test/1"]


def test_a_pruned_site_made_again_keeps_its_robots_rules_until_their_ttl(tmp_path):
    f = pruning_frontier(tmp_path, wait_duration=0.5)
    f.admission.push("http://r.test/ok", 3, 2)
    body = "User-agent: *\nDisallow: /private\nCrawl-delay: 3\n"
    sim = Sim(f, ips={"r.test": "10.0.0.4"}, robots_body={"r.test": body})
    sim.run()
    advance(sim, sim.now + 20.0)
    assert f.sites == {}
    f.admission.push("http://r.test/private/x", 3, 2)
    f.admission.push("http://r.test/ok2", 3, 2)
    f.admission.push("http://r.test/ok3", 3, 2)
    sim.run()
    kinds = [k for _, k, _, _ in sim.starts]
    assert kinds.count(ROBOTS) == 1  # not fetched again: the rules came back with the site
    assert f.forgotten["forbiddenRobots"] == 1 and "http://r.test/private/x" not in sim.fetched
    pages = [t for t, k, _, _ in sim.starts if k == PAGE]
    assert pages[-1] - pages[-2] >= 3.0 - 1e-9  # the crawl-delay came back too
    # Past the TTL the rules are not kept: robots.txt is asked again first
    advance(sim, sim.now + robots.CACHE_TTL + 20.0)
    assert f.sites == {}
    f.admission.push("http://r.test/ok4", 3, 2)
    sim.run(until=sim.now + 1000.0)
    kinds = [k for _, k, _, _ in sim.starts]
    assert kinds.count(ROBOTS) == 2 and kinds[-2:] == [ROBOTS, PAGE]


def test_the_kept_records_are_bounded_and_a_dropped_one_costs_a_robots_request(tmp_path):
    f = pruning_frontier(tmp_path, wait_duration=0.1, keep_sites=1)
    f.admission.push("http://a.test/1", 3, 2)
    f.admission.push("http://b.test/1", 3, 2)
    sim = Sim(f, ips={"a.test": "10.0.0.1", "b.test": "10.0.0.2"})
    sim.run()
    advance(sim, sim.now + 20.0)
    assert f.sites == {} and len(f.pruning.kept) == 1  # a's record made way for b's
    f.admission.push("http://a.test/2", 3, 2)
    f.admission.push("http://b.test/2", 3, 2)
    sim.run()
    robots_by_host = [h for _, k, h, _ in sim.starts if k == ROBOTS]
    assert sorted(robots_by_host) == ["a.test", "a.test", "b.test"]
    assert frontier_stats(f)["sites"]["total"] == 3  # a counted again: its record was gone


def test_a_site_waiting_on_a_dns_retry_is_not_pruned(tmp_path):
    f = pruning_frontier(tmp_path, dns_retry_base=30.0)
    f.admission.push("http://d.test/1", 3, 0)  # no retry left: forgotten at the first failure
    sim = Sim(f, ips={"d.test": "10.0.0.5"}, dns_fail=lambda host, n: True)
    sim.run(until=1.0)
    assert f.forgotten["noDNS"] == 1
    site = f.sites["http://d.test:80"]
    advance(sim, 20.0)
    assert f.sites.get("http://d.test:80") is site  # its retry timer is pending
    advance(sim, 31.0)  # the timer ran: no URL waits, the state went back to new
    advance(sim, 42.0)
    assert f.sites == {}


def test_a_busy_site_is_never_pruned_and_conservation_holds(tmp_path):
    f = pruning_frontier(tmp_path, wait_duration=2.0, prune_after=0.5, max_urls_by_site=3, ram_urls=10)
    urls = [f"http://h{i % 3}.test/{i}" for i in range(60)]
    for u in urls:
        f.admission.push(u, 3, 2)
    sim = Sim(f, ips={f"h{i}.test": f"10.0.3.{i}" for i in range(3)}, latency=0.3)
    sim.run()
    assert sorted(sim.fetched) == sorted(urls)
    assert f.conservation() == (60, 60)
    assert [k for _, k, _, _ in sim.starts].count(ROBOTS) == 3  # never pruned while it had work
    by_host: dict[str, list[float]] = {}
    for t, _, h, _ in sim.starts:
        by_host.setdefault(h, []).append(t)
    for seq in by_host.values():
        assert all(b - a >= 2.0 - 1e-9 for a, b in zip(seq, seq[1:]))


def test_an_ip_left_by_its_sites_stays_until_its_next_allowed_time(tmp_path):
    # a.test moves from .1 to .2 right after a request to .1: the old IP has
    # no site left but must still space the next request to it (b.test's).
    f = pruning_frontier(tmp_path, wait_duration=30.0, prune_after=1.0)
    f.admission.push("http://a.test/1", 3, 2)
    sim = Sim(f, ips={"a.test": "10.0.0.1", "b.test": "10.0.0.1"})
    sim.run()
    last = max(t for t, _, _, ip in sim.starts if ip == "10.0.0.1")
    site = f.sites["http://a.test:80"]
    advance(sim, last + 2.0)
    site.dns_event("ask")  # its address went stale and the new answer differs
    f.dns.pending += 1
    f.dns_resolved(site, ("10.0.0.2",), 300.0, sim.now)
    assert f.ips["10.0.0.1"].sites == 0
    advance(sim, last + 5.0)
    assert "10.0.0.1" in f.ips  # idle long enough, but its next request is 25 s away
    f.admission.push("http://b.test/1", 3, 2)
    sim.run()
    on_ip = [t for t, _, _, ip in sim.starts if ip == "10.0.0.1"]
    assert len(on_ip) == 4 and all(b - a >= 30.0 - 1e-9 for a, b in zip(on_ip, on_ip[1:]))
    advance(sim, sim.now + 100.0)
    assert f.sites == {}
    advance(sim, sim.now + 1.5)  # an IP goes prune_after after its last site
    assert f.ips == {}
