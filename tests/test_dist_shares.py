"""Load-aware partitions, sans-I/O: a worker's measured capacity, the shares that
follow it (converging, bounded moves, no flapping) and the weighted map."""

from __future__ import annotations

import random

from larbin_py.distributed.member_view import MemberView
from larbin_py.distributed.partition import assign, moved, weighted_bounds
from larbin_py.distributed.shares import LoadMeter, current, rebalance

P = 256


def test_capacity_is_the_rate_of_a_window_the_worker_never_ran_short_of_work():
    m = LoadMeter(window=2.0)
    assert m.sample(0.0, 0, 500).capacity is None  # one sample: no rate yet
    for i in range(1, 5):  # 100 URLs a second, always busy
        load = m.sample(i * 0.5, i * 50, 400)
    assert load.rate == 100.0 and load.capacity == 100.0 and load.backlog == 400
    # short of work: it does 10 a second, which says nothing of what it could do
    for i in range(5, 13):
        load = m.sample(i * 0.5, 200 + (i - 4) * 5, 2)
    assert load.rate == 10.0 and load.capacity == 100.0
    # busy again, slower (CPU taken from it): the capacity follows down
    done = load and 240
    for i in range(13, 21):
        done += 15
        load = m.sample(i * 0.5, done, 300)
    assert load.capacity == 30.0


def test_a_worker_never_busy_has_no_capacity():
    m = LoadMeter(window=2.0)
    for i in range(10):
        load = m.sample(i * 0.5, i * 3, 1)
    assert load.capacity is None and load.rate == 6.0


def test_no_record_is_equal_shares_and_a_joiner_starts_equal():
    assert current(P, ["b", "a"], None) == {"a": 128, "b": 128}
    shares = {"a": 200, "b": 56}
    now = current(P, ["a", "b", "c"], shares)  # c joins: an equal part, the others scaled
    assert sum(now.values()) == P and now["a"] > now["b"] and abs(now["c"] - P / 3) < 25
    assert current(P, ["a"], shares) == {"a": P}


def settle(caps: dict, shares=None, moving=False, rounds=20):
    """Heartbeats of the share writer (which remembers whether it was moving)."""
    for _ in range(rounds):
        before = current(P, caps, shares)
        shares = rebalance(P, caps, shares, caps, moving=moving)
        moving = shares != before
    return shares, moving


def test_shares_converge_to_the_capacities_in_bounded_moves():
    caps = {"fast": 100.0, "slow": 25.0}  # one worker on a quarter of the other's CPU
    shares, steps, max_move, moving = None, 0, max(1, P // 16), False
    while True:
        before = current(P, caps, shares)
        shares = rebalance(P, caps, shares, caps, moving=moving)
        moving = shares != before
        assert sum(shares.values()) == P and min(shares.values()) >= 1
        assert sum(abs(shares[w] - before[w]) for w in caps) <= 2 * max_move  # bounded moves
        steps += 1
        if shares == before:
            break
        assert steps < 20
    assert abs(shares["fast"] - P * 0.8) <= 1  # a move once started goes to the target
    assert 4 <= steps <= 8  # 76 partitions to move, 16 a heartbeat


def test_measurement_noise_does_not_make_the_shares_flap():
    rng = random.Random(36)
    caps = {"a": 80.0, "b": 40.0, "c": 40.0}
    shares, moving = settle(caps)
    assert not moving and shares == {"a": 128, "b": 64, "c": 64}
    changes = 0
    for _ in range(500):  # +-8% noise on every measurement, every heartbeat
        noisy = {w: c * rng.uniform(0.92, 1.08) for w, c in caps.items()}
        new = rebalance(P, caps, shares, noisy, moving=moving)
        moving = new != shares
        changes += moving
        shares = new
    assert changes == 0 and shares == {"a": 128, "b": 64, "c": 64}


def test_an_unmeasured_worker_keeps_its_share():
    shares = {"a": 100, "b": 100, "c": 56}
    out = rebalance(P, ["a", "b", "c"], shares, {"a": 50.0, "b": 50.0, "c": None})
    assert out == shares  # a and b measured equal; c unknown keeps its part
    assert rebalance(P, ["a", "b"], None, {"a": None, "b": None}) == {"a": 128, "b": 128}


def test_the_weighted_map_follows_the_shares_and_is_the_same_everywhere():
    shares = {"fast": 205, "slow": 51}
    a = assign(P, ["slow", "fast"], weights=shares)
    assert a == assign(P, ["fast", "slow"], weights=dict(shares))  # the same inputs, the same map
    counts = {w: sum(1 for x in a.values() if x == w) for w in shares}
    bounds = weighted_bounds(P, shares)
    assert counts["slow"] <= bounds["slow"] < 64 and counts["fast"] == P - counts["slow"]
    # a small step of the shares moves few partitions (not the whole map)
    b = assign(P, ["slow", "fast"], weights={"fast": 189, "slow": 67})
    assert moved(a, b) <= 20
    # equal shares are the equal map
    assert assign(P, ["fast", "slow"], weights={"fast": 128, "slow": 128}) == assign(P, ["fast", "slow"])


def test_the_member_view_gives_this_worker_its_weighted_part():
    v = MemberView("slow", P, settle=2.0)
    v.reset(["fast", "slow"], 0.0)
    equal = len(v.mine())
    assert v.set_shares({"fast": 205, "slow": 51}) and not v.set_shares({"fast": 205, "slow": 51})
    assert len(v.mine()) < equal and len(v.mine()) <= weighted_bounds(P, {"fast": 205, "slow": 51})["slow"]
    assert v.set_shares(None) and len(v.mine()) == equal
