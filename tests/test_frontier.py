"""The frontier driven by a discrete-event simulation with a fake clock.

No sockets and no sleeping: a tiny event queue plays DNS answers and server
responses at chosen virtual times, so politeness, the gate, retries and
conservation are checked exactly.
"""

from __future__ import annotations

import heapq
import random
import zlib
from collections import defaultdict

import pytest

from larbin_py import robots
from larbin_py.frontier import codec
from larbin_py.frontier.assembly import assemble
from larbin_py.frontier.refill import REFILL_SHARE
from larbin_py.frontier.scheduler import PAGE, ROBOTS, Frontier, site_key


class Sim:
    """Drives a Frontier: resolves names, answers requests after ``latency``."""

    def __init__(self, frontier: Frontier, *, ips: dict[str, str], latency: float = 0.05,
                 robots_body: dict[str, str] | None = None, page_outcome=None, dns_fail=None):
        self.f = frontier
        self.ips = ips
        self.latency = latency
        self.robots_body = robots_body or {}
        self.page_outcome = page_outcome or (lambda req, n: "ok")
        self.dns_fail = dns_fail or (lambda host, n: False)
        self.now = 0.0
        self.events: list = []
        self.seq = 0
        self.starts: list[tuple[float, str, str, str]] = []  # time, kind, host, ip
        self.active_per_ip: dict[str, int] = defaultdict(int)
        self.max_active_per_ip = 0
        self.max_requests_seen = 0
        self.fetched: list[str] = []
        self.attempts: dict[str, int] = defaultdict(int)
        self.dns_queries: dict[str, int] = defaultdict(int)
        self.max_mem = 0

    def at(self, t, fn, *args):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn, args))

    def pump(self):
        f = self.f
        f.tick(self.now)
        f.load(self.now)
        for site in f.dns.take():
            self.dns_queries[site.host] += 1
            self.at(self.now + 0.01, self.dns_answer, site)
        while (req := f.next_request(self.now)) is not None:
            self.starts.append((self.now, req.kind, req.site.host, req.ip))
            self.active_per_ip[req.ip] += 1
            self.max_active_per_ip = max(self.max_active_per_ip, self.active_per_ip[req.ip])
            self.max_requests_seen = max(self.max_requests_seen, f.requests)
            self.at(self.now + self.latency, self.answer, req)
        self.max_mem = max(self.max_mem, f.urls_in_memory())
        taken, accounted = f.conservation()
        assert taken == accounted

    def dns_answer(self, site):
        if self.dns_fail(site.host, self.dns_queries[site.host]):
            self.f.dns_failed(site, "servfail", self.now)
        else:
            self.f.dns_resolved(site, (self.ips[site.host],), 300.0, self.now)

    def answer(self, req):
        self.active_per_ip[req.ip] -= 1
        if req.kind == ROBOTS:
            body = self.robots_body.get(req.site.host)
            self.attempts[req.url] += 1
            if body == "5xx":
                self.f.robots_unavailable(req, self.now)
            elif body and body.startswith("unsent:") and self.attempts[req.url] <= int(body[7:]):
                self.f.robots_unavailable(req, self.now, free=True)  # never reached the server
            else:
                rules = robots.RobotsTxt.parse(body) if body else robots.RobotsTxt.allow_all()
                self.f.robots_known(req, rules, robots.CACHE_TTL, self.now)
            return
        self.attempts[req.url] += 1
        outcome = self.page_outcome(req, self.attempts[req.url])
        status = {"ok": 200, "err40X": 404, "429": 429}.get(outcome)
        self.f.server_answered(req, self.latency, status, self.now, None)
        if outcome == "429":
            self.f.retry(req, "err50X", self.now)
        elif outcome == "ok":
            self.fetched.append(req.url)
            self.f.fetched_ok(req, self.now)
        elif outcome == "err40X":
            self.f.forget(req, "err40X", self.now)
        else:
            self.f.retry(req, outcome, self.now)

    def run(self, until: float = 10_000.0):
        self.pump()
        while self.now < until:
            nxt = self.f.next_wakeup()
            t_ev = self.events[0][0] if self.events else None
            cands = [t for t in (nxt, t_ev) if t is not None]
            if not cands:
                break
            self.now = max(self.now, min(cands))
            while self.events and self.events[0][0] <= self.now:
                _, _, fn, args = heapq.heappop(self.events)
                fn(*args)
            self.pump()
            if self.f.idle() and not self.events:
                break


def make(tmp_path, **kw):
    args = dict(ram_urls=1000, max_urls_by_site=40, max_requests=50, wait_duration=1.0,
                rng=random.Random(1), agent="larbin")
    args.update(kw)
    return assemble(str(tmp_path / "frontier"), **args)


def test_site_key_forms():
    assert site_key("http://a.test/x") == ("http://a.test:80", "http", "a.test", 80)
    assert site_key("https://a.test:8443/") == ("https://a.test:8443", "https", "a.test", 8443)
    assert site_key("http://u:p@a.test/") [0] == "http://a.test:80"
    assert site_key("http://[::1]:81/x")[2:] == ("[::1]", 81)
    assert site_key("ftp://a/") is None
    assert site_key("http:///x") is None


def test_robots_first_then_pages_and_politeness_per_host(tmp_path):
    f = make(tmp_path, wait_duration=1.0)
    for i in range(5):
        f.admission.push(f"http://a.test/{i}", 3, 2)
    sim = Sim(f, ips={"a.test": "10.0.0.1"})
    sim.run()
    kinds = [k for _, k, _, _ in sim.starts]
    assert kinds[0] == ROBOTS and kinds.count(ROBOTS) == 1
    assert sorted(sim.fetched) == sorted(f"http://a.test/{i}" for i in range(5))
    times = [t for t, _, _, _ in sim.starts]
    assert all(b - a >= 1.0 - 1e-9 for a, b in zip(times, times[1:]))
    # the jitter is at most 5 % of the delay by default, and it does vary
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(g <= 1.05 + sim.latency + 1e-9 for g in gaps)
    assert len({round(g, 6) for g in gaps}) > 1
    assert f.idle() and f.conservation()[0] == f.conservation()[1] == 5


def test_per_ip_politeness_and_one_connection_per_ip(tmp_path):
    f = make(tmp_path, wait_duration=0.5)
    hosts = [f"h{i}.test" for i in range(6)]
    ips = {h: ("10.0.0.1" if i % 2 else "10.0.0.2") for i, h in enumerate(hosts)}
    for h in hosts:
        for j in range(4):
            f.admission.push(f"http://{h}/{j}", 3, 2)
    sim = Sim(f, ips=ips, latency=0.3)
    sim.run()
    assert len(sim.fetched) == 24
    assert sim.max_active_per_ip == 1
    by_ip = defaultdict(list)
    by_host = defaultdict(list)
    for t, _, host, ip in sim.starts:
        by_ip[ip].append(t)
        by_host[host].append(t)
    for seq in list(by_ip.values()) + list(by_host.values()):
        assert all(b - a >= 0.5 - 1e-9 for a, b in zip(seq, seq[1:]))
    # two IPs really work in parallel: the crawl takes about half the serial time
    assert sim.now < 0.5 * 30 * 0.75


def test_crawl_delay_from_robots_spaces_a_host(tmp_path):
    f = make(tmp_path, wait_duration=0.2)
    for j in range(4):
        f.admission.push(f"http://slow.test/{j}", 3, 2)
    sim = Sim(f, ips={"slow.test": "10.0.0.3"}, robots_body={"slow.test": "User-agent: *\nCrawl-delay: 2\n"})
    sim.run()
    times = [t for t, k, _, _ in sim.starts if k == PAGE]
    assert len(times) == 4
    assert all(b - a >= 2.0 - 1e-9 for a, b in zip(times, times[1:]))


def test_robots_forbidden_urls_are_forgotten_without_request(tmp_path):
    f = make(tmp_path, wait_duration=0.1)
    f.admission.push("http://r.test/ok", 3, 2)
    f.admission.push("http://r.test/private/x", 3, 2)
    sim = Sim(f, ips={"r.test": "10.0.0.4"}, robots_body={"r.test": "User-agent: *\nDisallow: /private\n"})
    sim.run()
    assert sim.fetched == ["http://r.test/ok"]
    assert f.forgotten["forbiddenRobots"] == 1
    assert all(h != "r.test" or k != PAGE or True for _, k, h, _ in sim.starts)
    assert len([1 for _, k, _, _ in sim.starts if k == PAGE]) == 1


def test_full_site_fifo_parks_urls_and_loses_none(tmp_path):
    f = make(tmp_path, ram_urls=50, max_urls_by_site=5, wait_duration=0.01)
    urls = [f"http://big.test/{i}" for i in range(500)] + [f"http://small{i}.test/" for i in range(20)]
    for u in urls:
        f.admission.push(u, 3, 2)
    ips = {"big.test": "10.0.1.1", **{f"small{i}.test": f"10.0.2.{i}" for i in range(20)}}
    sim = Sim(f, ips=ips, latency=0.005)
    sim.run()
    assert sorted(sim.fetched) == sorted(urls)
    assert len(sim.fetched) == len(set(sim.fetched))
    # RAM: store windows (<= ram_urls) + site FIFOs (<= ram_urls) + in flight
    assert sim.max_mem <= 2 * 50 + 50
    assert f.lanes.wait.pushed > 0  # the wait store really was used


def check_parking(f):
    """The wait store holds exactly the records the sites count as parked."""
    assert sum(site.overflow for site in f.sites.values()) == len(f.lanes.wait)
    assert f.refill.parked_sites == sum(1 for site in f.sites.values() if site.overflow > 0)
    assert all(site.overflow > 0 for site in f.refill.wanting)


class LinkSim(Sim):
    """A Sim whose fetched pages link to further pages (a growing frontier)."""

    def __init__(self, f, *, links, **kw):
        super().__init__(f, **kw)
        self.links = links  # url -> list of urls it links to
        self.pushed = set()

    def pump(self):
        super().pump()
        check_parking(self.f)

    def answer(self, req):
        before = len(self.fetched)
        super().answer(req)
        if len(self.fetched) > before:
            for link in self.links.get(req.url, ()):
                if link not in self.pushed:
                    self.pushed.add(link)
                    self.f.admission.push(link, 3, 2)


def linked_web(rng, sites, pages, out_links):
    urls = {s: [f"http://w{s}.test/{p}" for p in range(pages)] for s in range(sites)}
    links = {}
    for s, own in urls.items():
        for u in own:
            links[u] = rng.sample(own, min(out_links, pages)) + [rng.choice(urls[rng.randrange(sites)])]
    return urls, links


@pytest.mark.parametrize("park_urls", [0, None], ids=["wait lane", "park and wait lane"])
@pytest.mark.parametrize("seed", range(12))
def test_refills_keep_the_parked_counts_exact_and_lose_nothing(tmp_path, seed, park_urls):
    rng = random.Random(seed)
    bound = rng.choice([1, 2, 3, 5, 8])
    sites = rng.choice([3, 12, 40])
    urls, links = linked_web(rng, sites, rng.choice([5, 20, 60]), rng.choice([2, 6, 15]))
    f = make(tmp_path, ram_urls=rng.choice([8, 30, 200]), max_urls_by_site=bound, wait_duration=0.01,
             rng=rng, max_requests=rng.choice([2, 10, 50]), park_urls=park_urls)
    sim = LinkSim(f, links=links, ips={f"w{s}.test": f"10.0.7.{s % 5}" for s in range(sites)},
                  latency=0.003, page_outcome=lambda req, n: rng.choice(["ok", "ok", "ok", "timeout"]))
    for s in range(sites):
        sim.pushed.add(urls[s][0])
        f.admission.push(urls[s][0], 3, 2)
    sim.run()
    assert f.idle()
    taken, accounted = f.conservation()
    assert taken == accounted == len(sim.pushed)
    assert len(f.lanes.wait) == 0 and not f.refill.wanting and f.refill.parked_sites == 0
    assert f.parked == 0 and not f._unpark and not any(site.parked for site in f.sites.values())


def test_refills_rotate_the_wait_store_in_batches(tmp_path):
    # 100 full sites, each with far more URLs than its bound: Larbin's rotation
    # popped about one record per full site for every page fetched.
    rng = random.Random(5)
    f = make(tmp_path, ram_urls=5000, max_urls_by_site=10, wait_duration=0.0, max_requests=20, park_urls=0)
    hosts = {f"b{i}.test": f"10.0.8.{i}" for i in range(100)}
    urls = [f"http://{h}/{n}" for n in range(60) for h in hosts]
    rng.shuffle(urls)
    for url in urls:
        f.admission.push(url, 3, 2)

    class Varied(Sim):  # servers answer in 5 to 15 ms
        latency = property(lambda self: rng.uniform(0.005, 0.015), lambda self, value: None)

    sim = Varied(f, ips=hosts)
    sim.run()
    assert len(sim.fetched) == 6000
    assert len(f.lanes.wait) == 0 and f.lanes.wait.pushed > 4000  # the sites really overflowed
    print("wait-store pops per page:", f.lanes.wait.popped / len(sim.fetched))
    assert f.lanes.wait.popped / len(sim.fetched) < 2 * REFILL_SHARE


@pytest.mark.parametrize("park_urls", [0, None], ids=["wait lane", "park"])
def test_a_site_that_runs_dry_is_refilled_at_once(tmp_path, park_urls):
    # One fast site among 40 slow parked ones (crawl-delay 30 s): the batch
    # share is never reached, yet the fast site must not stall waiting for it.
    f = make(tmp_path, ram_urls=5000, max_urls_by_site=4, wait_duration=0.0, park_urls=park_urls)
    hosts = {"fast.test": "10.0.9.1", **{f"slow{i}.test": f"10.0.9.{i + 2}" for i in range(40)}}
    for n in range(40):
        for h in hosts:
            f.admission.push(f"http://{h}/{n}", 3, 2)
    slow = "User-agent: *\nCrawl-delay: 30\n"
    sim = Sim(f, ips=hosts, latency=0.01, robots_body={h: slow for h in hosts if h.startswith("slow")})
    sim.run(until=60.0)
    fast = [t for t, kind, h, _i in sim.starts if kind == PAGE and h == "fast.test"]
    assert len(fast) == 40
    # one request after the other, each as soon as the last answered
    assert max(b - a for a, b in zip(fast, fast[1:])) <= 0.01 + 1e-9


def test_retries_then_forgotten_with_reason(tmp_path):
    f = make(tmp_path, wait_duration=0.01)
    f.admission.push("http://flaky.test/a", 3, 3)  # fails twice then works
    f.admission.push("http://flaky.test/b", 3, 3)  # always fails
    outcome = lambda req, n: ("ok" if n >= 3 else "noConnection") if req.url.endswith("/a") else "timeout"
    sim = Sim(f, ips={"flaky.test": "10.0.0.5"}, page_outcome=outcome)
    sim.run()
    assert sim.fetched == ["http://flaky.test/a"]
    assert sim.attempts["http://flaky.test/b"] == 4  # the first try and 3 retries
    assert f.forgotten["timeout"] == 1
    assert f.retried["noConnection"] == 2 and f.retried["timeout"] == 3


def test_dns_failure_costs_a_retry_and_is_asked_again(tmp_path):
    f = make(tmp_path, wait_duration=0.01, dns_retry_base=1.0)
    f.admission.push("http://dns.test/x", 3, 3)
    f.admission.push("http://dead.test/x", 3, 2)
    sim = Sim(f, ips={"dns.test": "10.0.0.6", "dead.test": "10.0.0.7"},
              dns_fail=lambda host, n: host == "dead.test" or n < 2)
    sim.run()
    assert sim.fetched == ["http://dns.test/x"]
    assert sim.dns_queries["dns.test"] == 2
    assert sim.dns_queries["dead.test"] == 3  # the first try and two retries
    assert f.forgotten["noDNS"] == 1
    assert f.idle()


def test_robots_unavailable_retries_then_disallows(tmp_path):
    f = make(tmp_path, wait_duration=0.01)
    f.admission.push("http://down.test/1", 3, 2)
    f.admission.push("http://down.test/2", 3, 2)
    sim = Sim(f, ips={"down.test": "10.0.0.8"}, robots_body={"down.test": "5xx"})
    sim.run()
    robots_starts = [k for _, k, _, _ in sim.starts if k == ROBOTS]
    assert len(robots_starts) == robots.MAX_ERROR_ATTEMPTS
    assert sim.fetched == []
    assert f.forgotten["forbiddenRobots"] == 2


def test_a_robots_request_that_never_reached_the_server_is_asked_again_without_counting(tmp_path):
    """Five robots.txt requests in a row that never went out (a stale kept-alive connection, a
    request no longer allowed out: ``free``) do not give the site up as three failures would:
    the sixth reads it, and its pages are fetched; each try spaced by the site's delay."""
    f = make(tmp_path, wait_duration=0.5)
    f.admission.push("http://flaky.test/1", 3, 2)
    f.admission.push("http://flaky.test/2", 3, 2)
    sim = Sim(f, ips={"flaky.test": "10.0.0.8"}, robots_body={"flaky.test": "unsent:5"})
    sim.run()
    robots_starts = [t for t, k, _, _ in sim.starts if k == ROBOTS]
    assert len(robots_starts) == 6 > robots.MAX_ERROR_ATTEMPTS
    assert all(b - a >= 0.5 for a, b in zip(robots_starts, robots_starts[1:])), robots_starts
    assert sorted(sim.fetched) == ["http://flaky.test/1", "http://flaky.test/2"]
    assert not f.forgotten and f.idle()


def test_max_requests_caps_concurrency(tmp_path):
    f = make(tmp_path, wait_duration=0.0, max_requests=3)
    hosts = {f"c{i}.test": f"10.0.3.{i}" for i in range(10)}
    for h in hosts:
        f.admission.push(f"http://{h}/", 3, 2)
    sim = Sim(f, ips=hosts, latency=1.0)
    sim.run()
    assert len(sim.fetched) == 10
    assert sim.max_requests_seen <= 3


def test_priority_lane_is_loaded_first(tmp_path):
    f = make(tmp_path, ram_urls=1000, wait_duration=0.0, max_requests=1)
    for i in range(5):
        f.admission.push(f"http://q.test/n{i}", 3, 2)
    f.admission.push("http://q.test/urgent", 3, 2, priority=True)
    sim = Sim(f, ips={"q.test": "10.0.0.9"})
    sim.run()
    assert sim.fetched[0] == "http://q.test/urgent"


def test_gate_closes_when_sites_hold_ram_urls(tmp_path):
    f = make(tmp_path, ram_urls=10, max_urls_by_site=100)
    for i in range(100):
        f.admission.push(f"http://g{i}.test/", 3, 2)
    f.load(0.0)
    assert f.in_sites == 10 and not f.is_get
    assert len(f.lanes.main) == 90


def test_the_park_keeps_a_full_sites_urls_in_memory_in_order_within_its_bound(tmp_path):
    # a.test's FIFO holds 4; the park takes the next 10 (its bound), the wait
    # lane the last 6.  They come back in the order they came, the park's
    # first, and the wait lane is popped once a record: no rotation past others.
    f = make(tmp_path, max_urls_by_site=4, park_urls=10, wait_duration=0.01)
    urls = [f"http://a.test/{i}" for i in range(20)]
    for u in urls:
        f.admission.push(u, 3, 2)
    f.load(0.0)
    site = f.sites["http://a.test:80"]
    assert [r.url for r in site.fifo] == urls[:4] and [r.url for r in site.parked] == urls[4:14]
    assert f.parked == 10 and len(f.lanes.wait) == 6 and site.overflow == 6
    assert f.queued == 20 and f.in_sites == 4 and f.is_get  # the gate counts FIFOs only
    sim = Sim(f, ips={"a.test": "10.0.0.9"}, latency=0.002)
    sim.run()
    assert sim.fetched == urls
    assert f.lanes.wait.popped == 6 and f.lanes.wait.pushed == 6
    assert f.idle() and f.parked == 0 and f.conservation() == (20, 20)


def test_parked_urls_do_not_close_the_gate_on_other_sites(tmp_path):
    # One large site first in the main lane: its surplus is parked, not counted
    # in the gate (ram_urls 20), so the small site behind it is loaded too.
    f = make(tmp_path, ram_urls=20, max_urls_by_site=5, park_urls=100)
    for i in range(100):
        f.admission.push(f"http://big.test/{i}", 3, 2)
    for i in range(5):
        f.admission.push(f"http://small.test/{i}", 3, 2)
    f.load(0.0)
    assert len(f.sites["http://big.test:80"].fifo) == 5 and f.parked == 95
    assert len(f.sites["http://small.test:80"].fifo) == 5 and len(f.lanes.main) == 0
    assert f.in_sites == 10 and f.is_get


def test_a_checkpoint_carries_the_parked_urls_and_a_reload_crawls_each_once(tmp_path):
    f = make(tmp_path, max_urls_by_site=3, park_urls=50, wait_duration=0.01)
    urls = [f"http://p{i % 2}.test/{i}" for i in range(40)]
    for u in urls:
        f.admission.push(u, 3, 2)
    ips = {"p0.test": "10.0.5.1", "p1.test": "10.0.5.2"}
    sim = Sim(f, ips=ips, latency=0.002)
    sim.run(until=0.05)  # stopped with URLs fetched, running, in the FIFOs and parked
    assert 0 < len(sim.fetched) < 20 and f.parked > 10 and f.in_flight > 0
    state, carry = codec.snapshot(f, sim.now, 1000.0)
    assert {r.url for r in carry} >= {r.url for site in f.sites.values() for r in site.parked}
    assert len(carry) == f.in_sites + f.parked + f.in_flight + f.lanes.in_memory
    f.close()
    g = make(tmp_path, max_urls_by_site=3, park_urls=50, wait_duration=0.01, positions=state.stores)
    codec.restore(g, state, carry, 0.0, 1000.0)
    assert g.conservation() == (40, 40)
    later = Sim(g, ips=ips, latency=0.002)
    later.run()
    done = set(sim.fetched) - {r.url for r in carry}  # the in-flight ones were carried: asked again
    assert sorted(done | set(later.fetched)) == sorted(urls) and not done & set(later.fetched)
    assert g.idle() and g.conservation() == (40, 40)


@pytest.mark.parametrize("seed", range(3))
def test_conservation_under_random_outcomes(tmp_path, seed):
    rng = random.Random(seed)
    f = make(tmp_path, ram_urls=30, max_urls_by_site=3, wait_duration=0.01, rng=rng)
    hosts = {f"x{i}.test": f"10.0.4.{i % 4}" for i in range(12)}
    urls = [f"http://x{i % 12}.test/{i}" for i in range(300)]
    for u in urls:
        f.admission.push(u, 3, 2)
    choices = ["ok", "ok", "ok", "err40X", "noConnection", "timeout"]
    sim = Sim(f, ips=hosts, latency=0.002, page_outcome=lambda req, n: rng.choice(choices))
    sim.run()
    assert f.idle()
    taken, accounted = f.conservation()
    assert taken == accounted == 300
    assert f.fetched + sum(f.forgotten.values()) == 300


def gaps_on(sim, ip):
    starts = [t for t, kind, _h, i in sim.starts if i == ip and kind == PAGE]
    return [round(b - a, 6) for a, b in zip(starts, starts[1:])]


def test_429_doubles_the_server_delay_and_successes_bring_it_back(tmp_path):
    f = make(tmp_path, wait_duration=1.0, jitter=0.0)
    for i in range(12):
        f.admission.push(f"http://a.test/{i}", 3, 5)
    # the 3rd and 4th requests are answered 429, everything else 200
    answers = iter(["ok", "ok", "429", "429"] + ["ok"] * 20)
    sim = Sim(f, ips={"a.test": "10.0.0.1"}, latency=0.01,
              page_outcome=lambda req, n: next(answers))
    sim.run()
    gaps = gaps_on(sim, "10.0.0.1")
    assert gaps[:2] == [1.0, 1.0]
    # counted from the 429 answer (0.01 s after the start), doubled twice
    assert gaps[2] == pytest.approx(0.01 + 2.0) and gaps[3] == pytest.approx(0.01 + 4.0)
    # then each success lets the penalty decay towards 1, never below
    later = gaps[4:]
    assert all(a >= b for a, b in zip(later, later[1:]))
    assert later[1] < later[0] <= 4.0 and later[-1] == pytest.approx(1.0)
    assert len(sim.fetched) == 12


def test_a_slow_server_is_asked_less_often(tmp_path):
    f = make(tmp_path, wait_duration=0.2, jitter=0.0, server_rtt_factor=3.0)
    for i in range(10):
        f.admission.push(f"http://slow.test/{i}", 3, 2)

    def slow_down(req, n):  # the server answers in 0.05 s, then slows to 0.5 s
        if len(sim.fetched) >= 3:
            sim.latency = 0.5
        return "ok"

    sim = Sim(f, ips={"slow.test": "10.0.0.1"}, latency=0.05, page_outcome=slow_down)
    sim.run()
    gaps = gaps_on(sim, "10.0.0.1")
    assert gaps[0] == pytest.approx(0.2)  # at its usual speed: waitDuration
    # once slowed (smoothed RTT over twice its best), 3 x smoothed RTT between starts
    assert max(gaps) > 3 * 0.2
    assert len(sim.fetched) == 10


def test_connect_lag_moves_the_next_start_without_adding_up(tmp_path):
    f = make(tmp_path, wait_duration=0.0, conn_per_ip=10, obey_robots=False, jitter=0.0)
    for i in range(5):
        f.admission.push(f"http://s{i}.test/", 3, 2)
    f.load(0.0)
    for site in f.dns.take():
        f.dns_resolved(site, ("10.0.0.9",), 300.0, 0.0)
    reqs = []
    while (req := f.next_request(0.0)) is not None:
        reqs.append(req)
    assert len(reqs) == 5  # waitDuration 0, ten connections per IP: all at once
    for req in reqs:  # each waited 50 ms for its connection
        f.follow_ups.sent_late(req, 0.05)
    assert f.ips["10.0.0.9"].next_allowed == pytest.approx(0.05)  # not 5 x 0.05
    g = make(tmp_path / "g", wait_duration=1.0, obey_robots=False, jitter=0.0)
    g.admission.push("http://a.test/", 3, 2)
    g.load(0.0)
    for site in g.dns.take():
        g.dns_resolved(site, ("10.0.0.8",), 300.0, 0.0)
    req = g.next_request(0.0)
    g.follow_ups.sent_late(req, 0.3)
    assert g.ips["10.0.0.8"].next_allowed == pytest.approx(1.3)
    assert req.site.next_allowed == pytest.approx(1.3)


@pytest.mark.parametrize("park_urls", [0, None], ids=["wait lane", "park"])
def test_robots_refusing_a_full_fifo_brings_the_parked_urls_back(tmp_path, park_urls):
    # One page links 41 URLs robots.txt disallows, then /ok.html: the FIFO
    # (40) takes the first 40, the last two wait in the park (or, with none,
    # the wait store).  Refusing the 40 frees the site while no request runs:
    # the frontier must load the parked URLs at once, not wait for an event
    # that never comes.
    f = make(tmp_path, max_urls_by_site=40, wait_duration=0.01, park_urls=park_urls)
    parked = []
    enter = f._enter
    f._enter = lambda site, rec, now, from_wait: parked.append(rec.url) if not enter(site, rec, now, from_wait) \
        else True
    root = "http://r.test/"
    links = {root: [f"http://r.test/no/{i}" for i in range(41)] + ["http://r.test/ok.html"]}
    sim = LinkSim(f, links=links, ips={"r.test": "10.0.0.4"}, latency=0.01,
                  robots_body={"r.test": "User-agent: *\nDisallow: /no/\n"})
    sim.pushed.add(root)
    f.admission.push(root, 3, 2)
    sim.run(until=60.0)
    assert parked == ["http://r.test/no/40", "http://r.test/ok.html"]  # the two really were parked
    assert f.lanes.wait.pushed == (2 if park_urls == 0 else 0)  # where park_urls says
    assert sim.fetched == [root, "http://r.test/ok.html"]
    assert f.forgotten["forbiddenRobots"] == 41
    assert f.idle() and sim.now < 1.0
    taken, accounted = f.conservation()
    assert taken == accounted == 43


@pytest.mark.parametrize("park_urls", [0, None], ids=["wait lane", "park"])
def test_a_name_that_fails_frees_room_for_its_parked_urls(tmp_path, park_urls):
    # The site's FIFO is full and more of its URLs are parked; its name fails
    # for good, so the FIFO's URLs are forgotten as noDNS: the parked ones must
    # come back (and be forgotten in turn) instead of waiting for ever.
    f = make(tmp_path, max_urls_by_site=4, wait_duration=0.01, park_urls=park_urls)
    for i in range(10):
        f.admission.push(f"http://gone.test/{i}", 3, 0)
    f.load(0.0)
    assert (len(f.lanes.wait), f.parked) == ((6, 0) if park_urls == 0 else (0, 6))
    sim = Sim(f, ips={}, dns_fail=lambda host, n: True)
    sim.run(until=600.0)
    assert f.forgotten["noDNS"] == 10
    assert f.idle() and len(f.lanes.wait) == 0


def test_records_keep_their_redirect_hops_and_old_lines_still_read(tmp_path):
    from larbin_py.frontier.store import UrlRecord, UrlStore, decode_record, encode_record

    plain = UrlRecord("http://a.test/x", 3, 2)
    assert encode_record(plain) == b"%08x 3 2 http://a.test/x\n" % zlib.crc32(b"3 2 http://a.test/x")
    assert decode_record(encode_record(plain)) == plain  # the format of old segments, unchanged
    hopped = UrlRecord("http://a.test/y", 3, 2, 4)
    assert decode_record(encode_record(hopped)) == hopped
    bad = bytearray(encode_record(hopped))
    bad[11] = ord("5")  # the hop count changed: the checksum catches it
    assert decode_record(bytes(bad)) is None
    # through the disk part of a store (RAM holds one record)
    store = UrlStore(str(tmp_path / "s"), ram_urls=1)
    recs = [UrlRecord(f"http://a.test/{i}", 1, 0, i % 3) for i in range(20)]
    for rec in recs:
        store.push(rec)
    assert [store.pop() for _ in recs] == recs
    store.close()
    f = make(tmp_path)
    f.admission.push("http://a.test/r", 2, 1, hops=3)
    f.load(0.0)
    assert f.sites["http://a.test:80"].fifo[0].hops == 3


def test_a_stale_address_found_by_next_request_is_asked_again_at_once(tmp_path):
    # One site, a DNS answer valid 1.5 s and a page every second: the second
    # page finds the address stale inside next_request.  Nothing else runs,
    # so next_wakeup must say the DNS request is due, or the crawl stalls.
    f = make(tmp_path, wait_duration=1.0)
    for i in range(4):
        f.admission.push(f"http://short.test/{i}", 3, 2)
    sim = Sim(f, ips={}, latency=0.01)
    sim.dns_answer = lambda site: f.dns_resolved(site, ("10.0.0.9",), 1.5, sim.now)
    sim.run(until=60.0)
    assert sorted(sim.fetched) == [f"http://short.test/{i}" for i in range(4)]
    assert sim.dns_queries["short.test"] >= 2
    assert f.idle()


def test_after_a_reload_the_parked_urls_are_replayed_without_waiting_for_an_event(tmp_path):
    # 3000 URLs parked in the wait store at the checkpoint; after --reload
    # the main and priority lanes are empty and nothing runs: loading stays
    # due (next_wakeup says now) until the replay is done.
    f = make(tmp_path, max_urls_by_site=1, ram_urls=5000, park_urls=0)
    for i in range(3001):
        f.admission.push(f"http://one.test/{i}", 3, 2)
    f.load(0.0, max_reads=10_000)
    assert len(f.lanes.wait) == 3000
    state, carry = codec.snapshot(f, 0.0, 1000.0)
    f.close()
    g = make(tmp_path, max_urls_by_site=1, ram_urls=5000, park_urls=0, positions=state.stores)
    codec.restore(g, state, carry, 0.0, 1000.0)
    g.load(5.0)  # the carried URLs first, then parked ones, 2000 reads
    assert len(g.lanes.prio) == 0 and len(g.lanes.main) == 0 and g.refill.replaying > 0
    for site in g.dns.take():
        g.dns_resolved(site, ("10.0.3.1",), 300.0, 5.0)
    g.max_requests = 0  # nothing may start: only loading moves
    assert g.next_wakeup() == 5.0
    sim = Sim(g, ips={"one.test": "10.0.3.1"}, latency=0.001)
    sim.now = 5.0
    sim.run(until=6.0)
    assert g.refill.replaying == 0
    g.max_requests = 50
    sim.run(until=10_000.0)
    assert len(sim.fetched) == 3001 and g.idle()
