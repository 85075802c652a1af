"""The coordinator's sans-I/O parts besides ownership and acks, without Redis:
what a pause counts (larbin_py.distributed.pauses), what an IP grant means
(ip_leases: after a failed tick, a full delay), when the member view acts
(member_view), how robots.txt answers age out (robots_share), and when the
frontier's gate closes and opens again (liveness)."""

from __future__ import annotations

import io
import json
import random

from larbin_py import robots as robots_mod
from larbin_py.distributed.ip_leases import IpLeases, not_before
from larbin_py.distributed.liveness import Liveness
from larbin_py.distributed.member_view import MemberView
from larbin_py.distributed.membership_redis import RedisMembership
from larbin_py.distributed.partition import assign
from larbin_py.distributed.pauses import Pauses
from larbin_py.distributed.redisio import Heartbeat, IpGrant, RedisIO
from larbin_py.distributed.robots_share import RobotsShare, decode, encode
from larbin_py.frontier.assembly import assemble
from larbin_py.frontier.ip_leases import LeasePolicy
from larbin_py.frontier.scheduler import Frontier
from larbin_py.frontier.sites import LeaseState
from larbin_py.testing.fakes import memory_stores

DAY = robots_mod.CACHE_TTL


# --- pauses ------------------------------------------------------------------

def test_a_pause_that_changes_kind_is_one_pause_its_seconds_split_by_kind():
    p = Pauses()
    assert p.failed("connection", "Redis at redis://h:1/0 unreachable", 10.0)  # news: say it
    assert not p.failed("connection", "still unreachable", 11.0)  # the same: said already
    assert p.down == "still unreachable"
    assert p.failed("LOADING", "Redis at redis://h:1/0 refused a tick: LOADING", 12.0)
    assert p.figures(12.5) == {"seconds": 2.5, "pauses": 1, "by_kind": {"LOADING": 0.5, "connection": 2.0}}
    assert p.to_report() == {"connection": 2.0}  # only what has ended
    p.reported({"connection": 2.0})
    assert p.resumed(15.0) == (3.0, "LOADING") and p.down is None
    assert p.to_report() == {"LOADING": 3.0}
    p.failed("OOM", "refused: OOM", 20.0)
    p.resumed(21.0)
    assert p.figures(30.0) == {"seconds": 6.0, "pauses": 2, "by_kind": {"LOADING": 3.0, "OOM": 1.0,
                                                                        "connection": 2.0}}


# --- IP grants -----------------------------------------------------------------

def grant(*, clean=True, last_start_ms=None, pace=None, wanted=False) -> IpGrant:
    return IpGrant(True, last_start_ms, pace, 0, wanted, clean)


def test_a_grant_waits_for_the_last_holder_s_start_plus_the_delay_in_this_worker_s_clock():
    wall, now = 1_700_000_000.0, 50.0  # the workers' clocks share no origin: wall times travel
    start, pace = not_before(grant(last_start_ms=int((wall - 0.5) * 1000)), now, wall, 2.0, unclean=False)
    assert abs(start - (now - 0.5 + 2.0)) < 1e-3 and pace is None
    assert not_before(grant(), now, wall, 2.0, unclean=False)[0] == now  # no start known: at once
    # the server's pace moves with the IP: its penalty stretches the delay, retry_until in our clock
    p = json.dumps({"penalty": 3.0, "retry_until": wall + 30.0, "srtt": 0.1, "floor": None})
    start, pace = not_before(grant(last_start_ms=int(wall * 1000), pace=p.encode()), now, wall, 2.0, unclean=False)
    assert abs(start - (now + 6.0)) < 1e-3 and abs(pace["retry_until"] - (now + 30.0)) < 1e-6
    # a pace that does not parse is none
    assert not_before(grant(pace=b"{not json"), now, wall, 2.0, unclean=False) == (now, None)
    assert not_before(grant(pace=b"[1, 2]"), now, wall, 2.0, unclean=False) == (now, None)


def test_a_grant_whose_last_start_is_unknown_waits_a_full_delay():
    wall, now = 1_700_000_000.0, 50.0
    old = int((wall - 60) * 1000)  # the last start known was long ago: at once, if it could be trusted
    assert not_before(grant(last_start_ms=old), now, wall, 2.0, unclean=False)[0] == now - 58.0
    assert not_before(grant(last_start_ms=old, clean=False), now, wall, 2.0, unclean=False)[0] == now + 2.0
    assert not_before(grant(last_start_ms=old), now, wall, 2.0, unclean=True)[0] == now + 2.0


def wanting_frontier(wait: float) -> Frontier:
    """A real frontier with one URL ready on 10.0.0.1, whose lease it wants."""
    f = assemble(ram_urls=100, max_urls_by_site=40, max_requests=5, wait_duration=wait, rng=random.Random(1),
                 agent="larbin", stores=memory_stores(), ip_leases=LeasePolicy(wait_duration=wait),
                 obey_robots=False)
    f.admission.push("http://a.test/1", 3, 0)
    f.load(0.0)
    site = f.dns.take()[0]
    f.dns_resolved(site, ("10.0.0.1",), 300.0, 0.0)
    return f


def test_an_ip_asked_in_a_failed_tick_is_asked_again_later_and_its_grant_waits_a_full_delay():
    wall = 1_700_000_000.0
    f = wanting_frontier(wait=2.0)
    ips = IpLeases(f, wait_duration=2.0, ttl=10.0)
    asked = ips.asks(1.0)
    assert asked == ["10.0.0.1"]
    ips.unanswered(asked, retry_at=3.0)  # the tick failed: the answer (and its last start) is lost
    assert ips.asks(2.0) == [] and ips.asks(3.0) == ["10.0.0.1"]
    known = grant(last_start_ms=int((wall - 60) * 1000))  # the last start it does carry is old
    ips.answered("10.0.0.1", known, now=3.0, wall=wall, retry_at=5.0)
    ip = f.ips["10.0.0.1"]
    assert ip.lease is LeaseState.HELD and ip.next_allowed == 5.0  # a full delay from the grant
    # once granted, the IP is clean again: the next grant trusts its last start
    ips.renewed("10.0.0.1", IpGrant(False, None, None, 0, False, True), now=4.0)  # the renewal refused: lost
    assert ip.lease is LeaseState.WANTED and f.ip_leases.held() == []  # (its URL still waits)
    assert ips.asks(4.0) == ["10.0.0.1"]
    ips.answered("10.0.0.1", known, now=4.0, wall=wall, retry_at=6.0)
    assert ip.next_allowed == 5.0 and "10.0.0.1" not in ips.unclean


def test_a_lease_let_go_before_any_request_here_passes_the_previous_holder_s_start_on():
    """A worker granted an IP whose wait is not over, and letting it go before its first
    request there (a stop, a contended lease), must hand on the previous holder's start:
    handing on its own older one (or none) let the next holder start at once."""
    wall, now = 1_700_000_000.0, 1.0
    f = wanting_frontier(wait=2.0)
    ips = IpLeases(f, wait_duration=2.0, ttl=10.0)
    assert ips.asks(now) == ["10.0.0.1"]
    previous = int((wall - 0.5) * 1000)  # the previous holder started a request 0.5 s ago
    ips.answered("10.0.0.1", grant(last_start_ms=previous), now=now, wall=wall, retry_at=3.0)
    assert f.ips["10.0.0.1"].next_allowed == now - 0.5 + 2.0
    [(ip, start_ms, _pace)] = ips.releases(now + 0.2, wall + 0.2, every=True)  # a stop, nothing sent
    assert ip == "10.0.0.1" and start_ms >= previous
    # the next holder waits for that start plus the delay
    start, _pace = not_before(grant(last_start_ms=start_ms), 70.0, wall + 0.3, 2.0, unclean=False)
    assert start >= 70.0 - 0.8 + 2.0 - 1e-6
    # a grant whose previous start is unknown counts as a start now: a full delay for the next one
    f = wanting_frontier(wait=2.0)
    ips = IpLeases(f, wait_duration=2.0, ttl=10.0)
    ips.asks(now)
    ips.answered("10.0.0.1", grant(clean=False), now=now, wall=wall, retry_at=3.0)
    [(_ip, start_ms, _pace)] = ips.releases(now + 0.2, wall + 0.2, every=True)
    assert start_ms >= int(wall * 1000)


def test_a_released_start_is_rounded_up_by_the_loop_clock_s_step():
    """loop.time() is cut to the millisecond: a start it dates at t may have happened up to
    1 ms later, so the start handed on is rounded up by a step (never before the real one)."""
    wall = 1_700_000_000.0
    f = wanting_frontier(wait=0.02)
    ips = IpLeases(f, wait_duration=0.02, ttl=10.0)
    ips.asks(1.0)
    ips.answered("10.0.0.1", grant(), now=1.0, wall=wall, retry_at=3.0)
    req = f.next_request(1.0)
    assert req is not None and f.ips["10.0.0.1"].last_start == 1.0
    f.fetched_ok(req, 1.01)
    [(_ip, start_ms, _pace)] = ips.releases(1.5, wall + 0.5, every=True)
    assert start_ms >= int(wall * 1000) + 1


def test_a_denied_ip_is_asked_again_at_the_retry_time():
    f = wanting_frontier(wait=1.0)
    ips = IpLeases(f, wait_duration=1.0, ttl=10.0)
    assert ips.asks(0.0) == ["10.0.0.1"]
    ips.answered("10.0.0.1", IpGrant(False, None, None, 800, True, True), now=0.0, wall=0.0, retry_at=2.0)
    assert ips.asks(1.9) == [] and ips.asks(2.0) == ["10.0.0.1"]
    assert "10.0.0.1" not in ips.unclean


# --- the member view -------------------------------------------------------------

def test_a_member_gone_acts_at_once_a_member_joined_waits_for_a_stable_view():
    v = MemberView("w1", 64, settle=4.0)
    v.reset({"w1", "w2"}, 0.0)
    assert v.joined() and v.mine() == {p for p, w in assign(64, {"w1", "w2"}).items() if w == "w1"}
    assert not v.stable(3.9) and v.stable(4.0)
    assert not v.update({"w1", "w2", "w3"}, 10.0)  # a join: nothing at once
    assert not v.stable(13.9) and v.stable(14.0)  # gives away once every worker has seen w3
    assert not v.update({"w1", "w2", "w3"}, 12.0) and v.since == 10.0  # the same view
    assert v.update({"w1", "w3"}, 20.0)  # w2 died: acquire its partitions at once
    assert v.update({"w3"}, 21.0)  # this worker out of its own view (its lease lapsed): a member gone too
    assert not v.joined() and v.mine() == set()
    assert v.update({"w1", "w3"}, 22.0)  # back in: acquire at once


# --- robots.txt answers ------------------------------------------------------------

def test_robots_answers_are_written_for_a_day_then_pruned_unless_renewed():
    r = RobotsShare()
    r.answer(3, "http://a.test/robots.txt", 1000.0, None)
    r.answer(3, "http://b.test/robots.txt", 1000.0, b"User-agent: *\nDisallow: /x\n")
    out = r.take_out()
    assert decode(out[3]["http://a.test/robots.txt"]) == (1000.0, None)
    assert decode(out[3]["http://b.test/robots.txt"]) == (1000.0, b"User-agent: *\nDisallow: /x\n")
    assert r.take_out() == {}
    r.answer(3, "http://a.test/robots.txt", 5000.0, None)  # fetched again: its day starts again
    r.take_out()
    r.expire(1000.0 + DAY, held={3})
    assert r.take_prune() == {3: ["http://b.test/robots.txt"]}
    r.expire(5000.0 + DAY, held=set())  # the partition went to another worker: its owner decides
    assert r.take_prune() == {}


def test_a_takeover_loads_the_live_answers_and_prunes_the_expired_and_a_failed_tick_keeps_the_prunes():
    r = RobotsShare()
    wall = 100_000.0
    live = r.load(5, {"http://a.test/robots.txt": encode(wall - DAY - 1, None),
                      "http://b.test/robots.txt": encode(wall - DAY + 60, b"User-agent: *\nDisallow: /x\n"),
                      "http://c.test/robots.txt": b"Bnot-a-time\nUser-agent: *\n"}, wall)
    (url, rules, left), = live
    assert url == "http://b.test/robots.txt" and abs(left - 60) < 1e-6 and r.loaded == 1
    assert not rules.allowed("larbin", "/x/1") and rules.allowed("larbin", "/y")
    prune = r.take_prune()
    assert prune == {5: ["http://a.test/robots.txt"]}
    r.put_back(prune)  # the tick that carried it failed
    r.expire(wall + 61, held={5})  # b's day ends too
    assert r.take_prune() == {5: ["http://a.test/robots.txt", "http://b.test/robots.txt"]}
    r.count_pruned(2)
    assert r.pruned == 2


# --- the gate ---------------------------------------------------------------------

def test_past_the_renewal_s_deadline_the_ip_leases_are_suspended_until_a_heartbeat_renews_them():
    clock = [0.0]
    f = wanting_frontier(wait=0.5)
    f.ip_leases.granted("10.0.0.1", 0.0, None, 0.0)
    leases = RedisMembership(RedisIO("redis://127.0.0.1:1/0"), 10.0, clock=lambda: clock[0])
    leases.worker = "w1"
    gate = Liveness(f, leases, leases, worker="w1", lease_ttl=10.0, err=io.StringIO())
    assert gate.check(clock[0]) is None and not gate.suspended  # never renewed: nothing to lapse yet
    leases.absorb(Heartbeat(frozenset({"w1"}), []), sent_at=0.0)
    gate.renewed(0.0 + 10.0 - leases.margin)
    assert f.ip_leases.deadline == 8.0 and gate.safe()
    clock[0] = 7.9
    assert gate.check(clock[0]) is None and not gate.suspended
    clock[0] = 8.0  # the lease may be another's from now on
    assert gate.check(clock[0]) is None and gate.suspended and not gate.safe()
    assert f.ips["10.0.0.1"].lease is LeaseState.EXPIRING
    assert not gate.resume(clock[0])  # not before a heartbeat renewed them
    leases.absorb(Heartbeat(frozenset({"w1"}), []), sent_at=8.5)
    gate.renewed(8.5 + 10.0 - leases.margin)
    assert gate.resume(8.6) and not gate.suspended
    assert f.ips["10.0.0.1"].lease is LeaseState.HELD and f.ip_leases.deadline == 16.5
    # another process holds this worker id: not safe, whatever the clock
    leases.absorb(Heartbeat(frozenset({"w1"}), [], duplicate=True), sent_at=9.0)
    assert not gate.safe()
