"""The frontier's smaller rooms on their own: its lanes, its DNS queue, politeness after a
start (follow-ups), and the wait lane's refills.  Plain objects, a fake clock."""

from __future__ import annotations

import random

import pytest

from larbin_py.frontier.addresses import AddressPolicy
from larbin_py.frontier.dns_queue import DnsQueue
from larbin_py.frontier.follow_ups import FollowUps
from larbin_py.frontier.ip_leases import LeasePolicy, OpenGate
from larbin_py.frontier.lanes import Lanes, disk_stores
from larbin_py.frontier.refill import REFILL_SHARE, WaitRefill
from larbin_py.frontier.sites import DnsState, IPSite, LeaseState, NamedSite
from larbin_py.frontier.store import UrlRecord
from larbin_py.testing.fakes import MemoryQueue, memory_stores
from larbin_py.transitions import IllegalTransition


def site(host: str = "a.test") -> NamedSite:
    return NamedSite(f"http://{host}:80", "http", host, 80)


# ----------------------------------------------------------------------
# Lanes
# ----------------------------------------------------------------------
def test_the_lanes_share_the_ram_budget_and_a_main_lane_may_be_injected():
    factory = memory_stores()
    lanes = Lanes(factory, 1000)
    assert (factory.lanes["main"].ram_urls, factory.lanes["priority"].ram_urls, factory.lanes["wait"].ram_urls) \
        == (800, 100, 100)
    inbox = MemoryQueue("inbox")
    other = memory_stores()
    assert Lanes(other, 1000, main=inbox).main is inbox and "main" not in other.lanes


def test_drop_removes_what_it_names_and_keeps_the_rest_in_order():
    lanes = Lanes(memory_stores(), 100)
    for i in range(6):
        lanes.main.push(UrlRecord(f"http://{'ab'[i % 2]}.test/{i}", 1, 0))
    lanes.wait.push(UrlRecord("http://a.test/w", 1, 0))
    lanes.prio.push(UrlRecord("http://b.test/p", 1, 0))
    assert lanes.drop(lambda rec: "//a.test" in rec.url) == 4
    assert [r.url for r in lanes.main.ram_records()] == ["http://b.test/1", "http://b.test/3", "http://b.test/5"]
    assert lanes.queued == 4 and len(lanes.wait) == 0


def test_positions_reopen_the_disk_lanes_past_their_ram_windows_and_replay_the_wait_lane(tmp_path):
    lanes = Lanes(disk_stores(str(tmp_path)), 10)  # RAM windows: main 8, priority 1, wait 1
    for i in range(12):
        lanes.main.push(UrlRecord(f"http://a.test/{i}", 1, 0))
    for i in range(3):
        lanes.wait.push(UrlRecord(f"http://w.test/{i}", 1, 0))
    lanes.flush()
    assert lanes.parked_at_start == 0 and lanes.in_memory == 9 and lanes.on_disk_only == 6
    carried = [r.url for r in lanes.ram_records()]  # what a checkpoint carries: the windows
    assert carried == ["http://w.test/0"] + [f"http://a.test/{i}" for i in range(8)]
    positions = lanes.positions()
    assert set(positions) == {"main", "priority", "wait", "wait_end"}
    lanes.close()
    again = Lanes(disk_stores(str(tmp_path), positions=positions), 10, reopened=True)
    assert again.queued == 6 and again.parked_at_start == 2 and again.damage() == []
    assert again.main.pop().url == "http://a.test/8" and again.wait.pop().url == "http://w.test/1"
    again.close()


# ----------------------------------------------------------------------
# The DNS queue
# ----------------------------------------------------------------------
def test_names_asked_are_taken_once_and_counted_until_answered():
    q = DnsQueue()
    a, b = site("a.test"), site("b.test")
    q.ask(a)
    q.ask(b)
    assert q.take() == [a, b] and q.take() == [] and q.pending == 2
    assert q.answered(a, ["10.0.0.1", "10.0.0.2"], 60.0, 1.0) == ("10.0.0.1", "10.0.0.2")
    assert a.dns is DnsState.OK and a.dns_expiry == 61.0 and q.pending == 1
    with pytest.raises(IllegalTransition):
        q.answered(a, ["10.0.0.1"], 60.0, 1.0)  # not asked again: a bug, said loudly


def test_an_answer_of_refused_addresses_refuses_the_site_until_it_expires():
    q = DnsQueue(AddressPolicy("deny"))
    a = site("evil.test")
    q.ask(a)
    assert q.answered(a, ["169.254.169.254", "10.0.0.1"], 5.0, 0.0) == ()
    assert a.dns is DnsState.REFUSED and a.ips == () and a.dns_expiry == 5.0
    seeds = DnsQueue(AddressPolicy("seeds"))
    seeds.addresses.allow_host("Seed.Test")
    s = site("seed.test")
    seeds.ask(s)
    assert seeds.answered(s, ["127.0.0.1"], 5.0, 0.0) == ("127.0.0.1",)
    with pytest.raises(ValueError, match="private_networks: expected one of allow, seeds, deny"):
        AddressPolicy("sometimes")


def test_a_failed_name_is_asked_again_after_a_doubling_delay_up_to_a_cap():
    q = DnsQueue(retry_base=2.0)
    a = site()
    delays = []
    for n in range(9):
        q.ask(a)
        delays.append(q.failed(a, 100.0) - 100.0)
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 128.0, 128.0]
    assert a.dns is DnsState.FAILED and a.retry_at == 228.0 and q.pending == 0


# ----------------------------------------------------------------------
# Follow-ups: politeness after a request's start
# ----------------------------------------------------------------------
class Req:
    def __init__(self, s: NamedSite, ip: str, started: float = 0.0) -> None:
        self.site, self.ip, self.started = s, ip, started


def follow_ups(gate=None, **kw):
    ips = {"10.0.0.1": IPSite("10.0.0.1")}
    args = dict(wait_duration=1.0, jitter=0.0, rng=random.Random(1), gate=gate or OpenGate())
    args.update(kw)
    return FollowUps(ips, **args), ips["10.0.0.1"]


def test_a_follow_up_waits_for_both_the_site_and_the_ip_and_pushes_both():
    f, ip = follow_ups()
    s = site()
    s.crawl_delay = 3.0
    req = Req(s, "10.0.0.1")
    s.next_allowed, ip.next_allowed = 2.0, 1.5
    assert f.delay(req, 0.5) == 1.5 and f.delay(req, 5.0) == 0.0
    f.started(req, 5.0)
    assert ip.last_start == 5.0 and ip.next_allowed == 6.0 and s.next_allowed == 8.0  # the crawl-delay
    gone = Req(site("b.test"), "10.9.9.9")  # its IP was pruned meanwhile: the site's own clock
    f.started(gone, 1.0)
    assert gone.site.next_allowed == 2.0


def test_a_late_send_moves_the_clocks_to_count_from_it_never_back():
    f, ip = follow_ups()
    s = site()
    req = Req(s, "10.0.0.1", started=0.0)
    s.next_allowed = ip.next_allowed = 1.0
    f.sent_late(req, 0.25)
    assert (ip.last_start, ip.next_allowed, s.next_allowed) == (0.25, 1.25, 1.25)
    f.sent_late(req, 0.1)  # an earlier send (a request side by side): nothing moves back
    f.sent_late(req, None)
    assert (ip.next_allowed, s.next_allowed) == (1.25, 1.25)


def test_a_follow_up_is_allowed_only_as_a_start_would_be():
    assert follow_ups()[0].allowed(Req(site(), "10.0.0.1"), 1e12)  # one process: always
    gate = LeasePolicy(wait_duration=1.0)
    f, ip = follow_ups(gate)
    req = Req(site(), "10.0.0.1")
    assert not f.allowed(req, 0.0)  # no lease
    ip.lease = LeaseState.HELD
    gate.deadline = 10.0
    assert f.allowed(req, 9.0) and not f.allowed(req, 10.5)
    ip.lease = LeaseState.EXPIRING
    assert not f.allowed(req, 9.0)


# ----------------------------------------------------------------------
# Refills of the wait lane
# ----------------------------------------------------------------------
def test_a_site_wants_a_refill_only_once_drained_to_half_its_bound():
    r = WaitRefill(8)
    s = site()
    for _ in range(3):
        r.park(s)
    assert s.overflow == 3 and r.parked_sites == 1
    s.fifo.extend(UrlRecord(f"http://a.test/{i}", 1, 0) for i in range(5))
    r.freed(s)
    assert not r.wanting and not r.rotating  # 5 of 8 held: not yet
    s.fifo.pop()
    r.freed(s)
    assert r.wanting == {s} and r.rotating  # 4 held: half free; the only parked site: rotate


def test_a_rotation_starts_when_one_in_refill_share_parked_sites_wants():
    r = WaitRefill(2)
    parked = [site(f"h{i}.test") for i in range(2 * REFILL_SHARE)]
    for s in parked:
        r.park(s)
        s.fifo.append(UrlRecord("http://x.test/", 1, 0))  # still has a URL to send
    r.freed(parked[0])
    assert r.wanting == {parked[0]} and not r.rotating
    r.freed(parked[1])
    assert r.rotating  # 2 of 8 parked sites want one
    r.hit()
    assert r.rotating  # others still want
    r.placed(parked[0], from_wait=True)
    r.placed(parked[1], from_wait=True)
    assert not r.wanting and r.parked_sites == 2 * REFILL_SHARE - 2
    r.hit()
    assert not r.rotating


def test_a_whole_turn_without_a_fit_ends_the_rotation_and_clears_the_wanting_counts():
    r = WaitRefill(2)
    s = site()
    r.park(s)
    r.freed(s)  # empty FIFO, parked URLs: rotate at once
    assert r.rotating
    r.miss(waiting=2)
    assert r.rotating
    r.miss(waiting=2)  # a whole turn of the wait lane: its count was off (a damaged store)
    assert not r.rotating and not r.wanting and s.overflow == 0 and r.parked_sites == 0


def test_a_handed_over_site_stops_wanting_and_a_filtered_lane_restarts_the_turn():
    r = WaitRefill(2)
    s = site()
    r.park(s)
    r.freed(s)
    r.misses = 1
    r.forget(s)
    assert s.overflow == 0 and r.parked_sites == 0 and not r.wanting
    r.lane_filtered()
    assert r.misses == 0 and not r.rotating
