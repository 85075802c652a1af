"""The IP-lease gate on its own (larbin_py.frontier.ip_leases): an IP table, a recording
scheduler, a fake clock; the frontier's use of it is tests/test_frontier_dist.py's."""

from __future__ import annotations

import math

import pytest

from larbin_py.frontier.ip_leases import IP_REASK_AFTER, LeasePolicy, OpenGate
from larbin_py.frontier.sites import IPSite, LeaseState, NamedSite


class Table:
    """The frontier's side: its IP table and the schedule calls the gate makes."""

    def __init__(self, *addrs: str) -> None:
        self.ips = {a: IPSite(a) for a in addrs}
        self.scheduled: list[tuple[str, float]] = []

    def schedule(self, ip: IPSite, at: float) -> None:
        self.scheduled.append((ip.ip, at))

    def ready(self, addr: str) -> IPSite:
        ip = self.ips[addr]
        ip.ready.append(NamedSite("http://a.test:80", "http", "a.test", 80))
        return ip


def policy(table: Table, **kw) -> tuple[LeasePolicy, list[int]]:
    woken: list[int] = []
    p = LeasePolicy(wait_duration=kw.pop("wait_duration", 0.5), on_wanted=lambda: woken.append(1), **kw)
    p.attach(table.ips, table.schedule)
    return p, woken


def test_the_open_gate_is_never_asked_and_always_open():
    gate = OpenGate()
    assert gate.leased is False and gate.deadline == math.inf
    assert gate.allows(None) and gate.allows(IPSite("10.0.0.1"))
    with pytest.raises(RuntimeError):
        gate.want(IPSite("10.0.0.1"))


def test_a_wanted_ip_is_asked_for_once_until_answered_then_again_when_denied():
    t = Table("10.0.0.1")
    p, woken = policy(t)
    ip = t.ready("10.0.0.1")
    p.want(ip)
    assert ip.lease is LeaseState.WANTED and woken == [1] and p.next_ask() == 0.0
    assert p.wanted(0.0) == ["10.0.0.1"]
    assert p.wanted(0.1) == [] and p.next_ask() is None  # asked: the answer is awaited
    p.denied("10.0.0.1", 2.0)
    assert p.next_ask() == 2.0 and p.wanted(1.9) == [] and p.wanted(2.0) == ["10.0.0.1"]


def test_an_ip_no_longer_ready_stops_wanting():
    t = Table("10.0.0.1")
    p, _ = policy(t)
    ip = t.ready("10.0.0.1")
    p.want(ip)
    ip.ready.clear()
    assert p.wanted(0.0) == [] and ip.lease is LeaseState.NONE and p.next_ask() is None


def test_a_grant_holds_the_ip_from_not_before_with_the_previous_holders_pace():
    t = Table("10.0.0.1")
    p, _ = policy(t)
    ip = t.ready("10.0.0.1")
    p.want(ip)
    p.wanted(0.0)
    p.granted("10.0.0.1", 3.0, {"penalty": 4.0, "retry_until": 9.0, "srtt": 0.2, "floor": 0.1}, 1.0)
    assert ip.lease is LeaseState.HELD and ip.lease_since == 1.0 and ip.next_allowed == 3.0
    assert (ip.pace.penalty, ip.pace.retry_until, ip.pace.srtt, ip.pace.floor) == (4.0, 9.0, 0.2, 0.1)
    assert t.scheduled == [("10.0.0.1", 1.0)] and p.held() == ["10.0.0.1"]
    assert p.allows(ip) and not p.allows(None)
    p.granted("10.0.0.9", 0.0, None, 1.0)  # pruned meanwhile: nothing to hold
    assert p.held() == ["10.0.0.1"]


def test_suspend_and_resume_and_a_lost_lease():
    t = Table("10.0.0.1")
    p, _ = policy(t)
    ip = t.ready("10.0.0.1")
    p.want(ip)
    p.granted("10.0.0.1", 0.0, None, 0.0)
    p.suspend()
    assert ip.lease is LeaseState.EXPIRING and not p.allows(ip)
    p.resume(1.0)
    assert ip.lease is LeaseState.HELD and t.scheduled[-1] == ("10.0.0.1", 1.0)
    p.lost("10.0.0.1", 2.0)
    assert ip.lease is LeaseState.NONE and p.held() == [] and t.scheduled[-1] == ("10.0.0.1", 2.0)


def test_release_when_idle_long_enough_or_held_long_enough_for_a_waiting_worker():
    t = Table("10.0.0.1", "10.0.0.2")
    p, _ = policy(t, wait_duration=0.5, hold=2.0)  # idle after max(2 x 0.5, 0.2) = 1 s
    idle, busy = t.ips["10.0.0.1"], t.ready("10.0.0.2")
    for ip in (idle, busy):
        p.want(ip)
        p.granted(ip.ip, 0.0, None, 0.0)
    idle.last_start = 0.5
    assert p.to_release(1.4) == []  # idle since 0.5: not yet a second
    (addr, last, pace), = p.to_release(1.5)
    assert addr == "10.0.0.1" and last == 0.5 and set(pace) == {"penalty", "retry_until", "srtt", "floor"}
    assert idle.lease is LeaseState.NONE
    p.contended("10.0.0.2")  # another worker waits for it: released once held hold seconds
    assert p.to_release(1.9) == []
    busy.busy = 1
    assert p.to_release(2.5) == []  # a request to it still runs
    busy.busy = 0
    assert [r[0] for r in p.to_release(2.5)] == ["10.0.0.2"]
    # still ready: wanted again, after the waiting worker had its turn
    assert busy.lease is LeaseState.WANTED and busy.lease_retry == 2.5 + IP_REASK_AFTER


def test_every_lease_with_no_request_running_goes_at_a_stop():
    t = Table("10.0.0.1")
    p, _ = policy(t)
    ip = t.ready("10.0.0.1")
    p.want(ip)
    p.granted("10.0.0.1", 0.0, None, 0.0)
    assert p.to_release(0.0) == []  # ready and not contended
    assert [r[0] for r in p.to_release(0.0, every=True)] == ["10.0.0.1"]
    assert ip.lease is LeaseState.NONE and p.next_ask() is None  # not wanted again: the worker stops


def test_a_policy_serves_one_frontier():
    p = LeasePolicy(wait_duration=1.0)
    ips: dict[str, IPSite] = {}
    p.attach(ips, lambda ip, at: None)
    p.attach(ips, lambda ip, at: None)  # the same table again: fine
    with pytest.raises(ValueError, match="one frontier"):
        p.attach({}, lambda ip, at: None)
