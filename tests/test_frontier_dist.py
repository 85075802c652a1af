"""The frontier's distributed-mode seams on a fake clock: drop (sites handed
over), on_done (every record's end, the ack), the injected main lane and the
sink, and the IP lease states (only HELD IPs scheduled)."""

from __future__ import annotations

import random

import pytest

from larbin_py.testing.fakes import MemoryQueue, memory_stores
from larbin_py.frontier.assembly import assemble
from larbin_py.frontier.ip_leases import LeasePolicy, OpenGate
from larbin_py.frontier.sites import LeaseState
from larbin_py.frontier.store import UrlRecord, decode_record, encode_record

from test_frontier import Sim


def make(*, ip_leases=False, ip_lease_hold=10.0, **kw):
    """A frontier on memory stores; ``ip_leases``: with a LeasePolicy as its gate (``f.ip_leases``)."""
    args = dict(ram_urls=1000, max_urls_by_site=40, max_requests=50, wait_duration=1.0,
                rng=random.Random(1), agent="larbin", stores=memory_stores())
    args.update(kw)
    if ip_leases:
        args["ip_leases"] = LeasePolicy(wait_duration=args["wait_duration"], hold=ip_lease_hold)
    return assemble(**args)


def test_tag_survives_the_record_encoding():
    rec = UrlRecord("http://a.test/x", 3, 2, 1, "17/1700000000000-5")
    assert decode_record(encode_record(rec)) == rec
    plain = UrlRecord("http://a.test/y", 1, 0)
    assert decode_record(encode_record(plain)) == plain
    assert b"17/" not in encode_record(plain)


def test_on_done_hears_every_terminal_outcome():
    done = []
    f = make(on_done=lambda rec, outcome: done.append((rec.url, outcome)))
    for i in range(6):
        f.admission.push(f"http://a.test/{i}", 3, 0)
    f.admission.push("http://b.test/x", 3, 0)
    sim = Sim(f, ips={"a.test": "10.0.0.1", "b.test": "10.0.0.2"},
              page_outcome=lambda req, n: "err40X" if req.url.endswith("/3") else "ok",
              robots_body={"b.test": "User-agent: *\nDisallow: /"})
    sim.run()
    outcomes = dict(done)
    assert len(done) == 7 == f.fetched + sum(f.forgotten.values())
    assert outcomes["http://a.test/3"] == "err40X"
    assert outcomes["http://b.test/x"] == "forbiddenRobots"
    assert [u for u, o in done if o == "fetched"] == sim.fetched


@pytest.mark.parametrize("park_urls", [0, None], ids=["wait lane", "park"])
def test_drop_gives_up_fifos_and_parked_records_and_keeps_conservation(park_urls):
    f = make(max_urls_by_site=4, wait_duration=0.5, park_urls=park_urls)
    for i in range(20):
        f.admission.push(f"http://a.test/{i}", 3, 2)
        f.admission.push(f"http://b.test/{i}", 3, 2)
    sim = Sim(f, ips={"a.test": "10.0.0.1", "b.test": "10.0.0.2"})
    sim.now = 0.0
    sim.pump()
    # a.test's and b.test's surplus is parked (in memory, or with no park in the wait lane)
    assert (len(f.lanes.wait) > 0) if park_urls == 0 else (len(f.lanes.wait) == 0 and f.parked == 32)
    n = f.drop(lambda host: host == "a.test")
    assert f.parked == (0 if park_urls == 0 else 16)
    assert n == 20 and f.handed_over == 20
    taken, accounted = f.conservation()
    assert taken == accounted == 20
    sim.run()
    assert sorted(sim.fetched) == sorted(f"http://b.test/{i}" for i in range(20))
    assert f.idle()


def test_drop_hands_over_a_running_requests_retry():
    f = make(wait_duration=0.1)
    for i in range(3):
        f.admission.push(f"http://a.test/{i}", 3, 2)
    sim = Sim(f, ips={"a.test": "10.0.0.1"}, page_outcome=lambda req, n: "noConnection")
    sim.now = 0.0
    sim.pump()
    for _ in range(50):  # until the first page request runs
        if f.in_flight:
            break
        t = min(x for x in (f.next_wakeup(), sim.events[0][0] if sim.events else None) if x is not None)
        sim.now = t
        while sim.events and sim.events[0][0] <= sim.now:
            _, _, fn, args = __import__("heapq").heappop(sim.events)
            fn(*args)
        sim.pump()
    assert f.in_flight == 1
    assert f.drop(lambda host: True) == 2
    sim.run()
    assert f.handed_over == 3 and f.fetched == 0 and not f.forgotten
    assert f.idle() and f.conservation() == (0, 0)
    # a URL of the site placed again makes it the worker's own again
    f.admission.push("http://a.test/new", 3, 0)
    sim.page_outcome = lambda req, n: "ok"
    sim.run()
    assert sim.fetched == ["http://a.test/new"]


def test_injected_main_lane_and_sink():
    main = MemoryQueue("inbox")
    added = []

    class Sink:
        def add_many(self, links, depths, hops):
            added.extend(zip(links, depths))

    f = make(main=main, sink=Sink())
    assert f.lanes.main is main
    assert f.admission.offer("http://a.test/", 3, ["http://a.test/1", "http://b.test/2"]) == 2
    assert added == [("http://a.test/1", 2), ("http://b.test/2", 2)]
    assert len(main) == 0 and f.taken == 0  # queued by their owner, not here
    # met lately: refused by the local cache, never sent twice
    assert f.admission.offer("http://a.test/", 3, ["http://a.test/1"]) == 0
    assert f.admission.rejected["seen"] == 1
    assert f.admission.offer_url("http://c.test/") == ("accepted", None)
    assert added[-1][0] == "http://c.test/"


class LeaseSim(Sim):
    """A Sim whose coordinator grants IP leases on request (after ``grant_delay``)."""

    def __init__(self, f, *, grant=lambda ip, now: (True, now), **kw):
        super().__init__(f, **kw)
        self.grant = grant
        self.asked: list[tuple[float, str]] = []

    def pump(self):
        for ip in self.f.ip_leases.wanted(self.now):
            self.asked.append((self.now, ip))
            ok, t = self.grant(ip, self.now)
            if ok:
                self.at(self.now + 0.01, self.f.ip_leases.granted, ip, t, None, self.now + 0.01)
            else:
                self.at(self.now + 0.01, self.f.ip_leases.denied, ip, t)
        super().pump()

    def run(self, until=10_000.0):
        self.pump()
        while self.now < until:
            cands = [t for t in (self.f.next_wakeup(), self.events[0][0] if self.events else None)
                     if t is not None]
            ask = self.f.ip_leases.next_ask()
            if ask is not None:
                cands.append(ask)
            if not cands:
                break
            self.now = max(self.now, min(cands))
            import heapq
            while self.events and self.events[0][0] <= self.now:
                _, _, fn, args = heapq.heappop(self.events)
                fn(*args)
            self.pump()
            if self.f.idle() and not self.events:
                break


def test_only_held_ips_are_scheduled():
    f = make(ip_leases=True, wait_duration=0.5)
    for i in range(4):
        f.admission.push(f"http://a.test/{i}", 3, 0)
    denials = {"n": 0}

    def grant(ip, now):
        if denials["n"] < 2:  # held elsewhere twice, then granted from t=5
            denials["n"] += 1
            return False, now + 1.0
        return True, 5.0

    sim = LeaseSim(f, ips={"a.test": "10.0.0.1"}, grant=grant)
    sim.run()
    assert len(sim.fetched) == 4
    asks = [t for t, _ in sim.asked]
    assert len(asks) == 3 and asks[1] >= asks[0] + 1.0 and asks[2] >= asks[1] + 1.0
    assert sim.starts[0][0] >= 5.0  # not before the previous holder's last start + delay
    ip = f.ips["10.0.0.1"]
    assert ip.lease is LeaseState.HELD
    # idle long enough: released, with its last start and pace for the next holder
    assert f.ip_leases.to_release(sim.now) == []
    out = f.ip_leases.to_release(sim.now + 5.0)
    assert [o[0] for o in out] == ["10.0.0.1"] and out[0][1] == sim.starts[-1][0]
    assert set(out[0][2]) == {"penalty", "retry_until", "srtt", "floor"}
    assert ip.lease is LeaseState.NONE and f.ip_leases.held() == []

    # a worker that stops gives back every lease with no request running, at once
    f.admission.push("http://a.test/9", 3, 0)
    sim.run()
    assert f.ip_leases.to_release(sim.now) == []
    assert [o[0] for o in f.ip_leases.to_release(sim.now, every=True)] == ["10.0.0.1"]


def test_suspended_leases_start_nothing_until_resumed():
    f = make(ip_leases=True, wait_duration=0.5)
    for i in range(3):
        f.admission.push(f"http://a.test/{i}", 3, 0)
    sim = LeaseSim(f, ips={"a.test": "10.0.0.1"})
    sim.run(until=0.7)  # robots.txt and the first page
    started = len(sim.starts)
    assert started >= 1
    f.ip_leases.suspend()
    assert f.ips["10.0.0.1"].lease is LeaseState.EXPIRING
    sim.run(until=5.0)
    assert len(sim.starts) == started
    f.ip_leases.resume(sim.now)
    sim.run()
    assert len(sim.fetched) == 3


def test_contended_lease_is_released_after_the_hold_when_idle():
    f = make(ip_leases=True, wait_duration=0.2, ip_lease_hold=2.0)
    for i in range(30):
        f.admission.push(f"http://a.test/{i}", 3, 0)
    sim = LeaseSim(f, ips={"a.test": "10.0.0.1"})
    sim.run(until=1.0)
    f.ip_leases.contended("10.0.0.1")
    released = []
    while not released and sim.now < 10:
        sim.run(until=sim.now + 0.05)
        if f.requests == 0:
            released = f.ip_leases.to_release(sim.now)
    assert released and 2.0 <= sim.now < 3.0
    ip = f.ips["10.0.0.1"]
    assert ip.lease is LeaseState.WANTED and ip.lease_retry > sim.now  # the waiter goes first


def test_leases_off_never_touch_lease_state():
    f = make()
    f.admission.push("http://a.test/1", 3, 0)
    sim = Sim(f, ips={"a.test": "10.0.0.1"})
    sim.run()
    assert sim.fetched == ["http://a.test/1"]
    # one process: the open gate (its want() raises: never asked) and no lease state
    assert isinstance(f.ip_leases, OpenGate) and f.ips["10.0.0.1"].lease is LeaseState.NONE


def test_a_released_lease_is_asked_for_again_when_work_comes_back():
    f = make(ip_leases=True, wait_duration=0.2)
    f.admission.push("http://a.test/1", 3, 0)
    sim = LeaseSim(f, ips={"a.test": "10.0.0.1"})
    sim.run()
    assert sim.fetched == ["http://a.test/1"] and len(sim.asked) == 1
    assert [o[0] for o in f.ip_leases.to_release(sim.now + 1.0)] == ["10.0.0.1"]
    sim.now += 1.0
    f.admission.push("http://a.test/2", 3, 0)
    sim.run()
    assert len(sim.asked) == 2 and sim.fetched[-1] == "http://a.test/2"


def test_a_released_lease_carries_the_time_the_last_request_reached_the_wire():
    f = make(ip_leases=True, wait_duration=0.2)
    f.admission.push("http://a.test/1", 3, 0)
    f.load(0.0)
    site = f.dns.take()[0]
    f.dns_resolved(site, ("10.0.0.1",), 300.0, 0.0)
    f.ip_leases.granted("10.0.0.1", 0.0, None, 0.0)
    f.obey_robots = False
    req = f.next_request(0.0)
    assert req is not None and req.started == 0.0
    f.follow_ups.sent_late(req, 0.15)  # a slow connect: the server saw it at 0.15
    f.fetched_ok(req, 0.2)
    (ip, last_start, pace), = f.ip_leases.to_release(5.0)
    assert ip == "10.0.0.1" and last_start == 0.15


def test_no_request_starts_past_the_lease_deadline():
    f = make(ip_leases=True, wait_duration=0.2, obey_robots=False)
    for i in range(3):
        f.admission.push(f"http://a.test/{i}", 3, 0)
    f.load(0.0)
    f.dns_resolved(f.dns.take()[0], ("10.0.0.1",), 300.0, 0.0)
    f.ip_leases.granted("10.0.0.1", 0.0, None, 0.0)
    f.ip_leases.deadline = 1.0
    req = f.next_request(0.5)
    assert req is not None
    f.fetched_ok(req, 0.6)
    assert f.next_request(1.1) is None  # renewal late: the lease may have lapsed
    assert f.next_wakeup() is None  # no timer spinning until the renewal
    f.ip_leases.deadline = 3.0  # renewed
    assert f.next_request(1.2) is not None


def test_a_follow_up_starts_only_while_the_ips_lease_allows():
    """A robots.txt hop or a dynamic page's sub-request follows a running request:
    past the lease deadline, or with the lease suspended, it must not start."""
    f = make(ip_leases=True, wait_duration=0.2, obey_robots=False)
    f.admission.push("http://a.test/0", 3, 0)
    f.load(0.0)
    f.dns_resolved(f.dns.take()[0], ("10.0.0.1",), 300.0, 0.0)
    f.ip_leases.granted("10.0.0.1", 0.0, None, 0.0)
    f.ip_leases.deadline = 1.0
    req = f.next_request(0.5)
    assert req is not None and f.follow_ups.allowed(req, 0.9)
    assert not f.follow_ups.allowed(req, 1.1)  # renewal late
    f.ip_leases.deadline = 3.0
    f.ip_leases.suspend()
    assert not f.follow_ups.allowed(req, 1.2)  # suspended (a ZooKeeper session lapsed, say)
    f.ip_leases.resume(1.3)
    assert f.follow_ups.allowed(req, 1.3)
    g = make(wait_duration=0.2, obey_robots=False)  # one process: no leases, always
    assert g.follow_ups.allowed(req, 1e9)
