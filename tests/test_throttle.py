import pytest

from larbin_py.throttle import RttController, ServerPace


def feed(c: RttController, rtts, start=0.0, step=0.1):
    t = start
    for r in rtts:
        c.observe(r, t)
        t += step
    return t


def test_increases_while_fast():
    c = RttController(rtt_min=0.05, rtt_max=1.0, max_requests=50, start=5)
    feed(c, [0.01] * 30)
    assert c.limit == 5 + 29  # the first sample only seeds the estimator
    assert c.increases == 29


def test_decreases_while_slow_and_respects_floor():
    c = RttController(rtt_min=0.01, rtt_max=0.5, min_requests=3, max_requests=50, start=40, decrease=2)
    feed(c, [1.0] * 40, step=1.1)  # one answer per round trip
    assert c.limit == 3
    assert c.decreases == (40 - 3 + 1) // 2


def test_bounds_are_kept():
    c = RttController(max_requests=10, start=9, rtt_min=1.0)
    feed(c, [0.001] * 100)
    assert c.limit == 10
    with pytest.raises(ValueError):
        RttController(min_requests=0)
    with pytest.raises(ValueError):
        RttController(alpha=0)


def test_window_min_max_follow_the_estimate_and_reset_each_interval():
    c = RttController(alpha=0.5, interval=2.0, rtt_min=0.0, rtt_max=100.0, start=10, max_requests=100)
    c.observe(1.0, 0.0)  # S = 1
    c.observe(3.0, 0.1)  # above max (1): decrease; S = 2, max = 2; rest until 0.1 + 1
    assert c.limit == 8 and c.srtt == 2.0 and c.window_max == 2.0 and c.window_min == 1.0
    c.observe(1.5, 1.2)  # between min and max: no change; S = 1.75
    assert c.limit == 8
    # a new interval: min = max = S (1.75); R = 1.7 is below it: increase
    c.observe(1.7, 2.5)
    assert c.limit == 9
    assert c.window_min == pytest.approx(1.725)
    assert c.window_max == pytest.approx(1.75)


def test_steps_at_most_once_per_round_trip():
    """A burst of answers inside one round trip moves the cap once, not per answer."""
    c = RttController(alpha=0.1, rtt_min=0.5, rtt_max=5.0, max_requests=100, start=10)
    c.observe(0.2, 0.0)  # seeds S = 0.2
    feed(c, [0.1] * 20, start=0.01, step=0.005)  # 20 fast answers within 0.1 s < S
    assert c.limit == 11 and c.increases == 1
    assert c.srtt < 0.2 and c.samples == 21  # the estimator followed every one
    c.observe(0.1, 0.3)  # a round trip (S was 0.2 at the step) later: the next step
    assert c.limit == 12
    # the same for decreases
    c.observe(9.0, 1.0)
    c.observe(9.0, 1.01)
    assert c.limit == 10 and c.decreases == 1


def test_converges_on_a_load_model():
    """A server whose RTT grows with the requests in flight: the cap settles."""
    capacity = 20
    c = RttController(alpha=0.2, interval=2.0, rtt_min=0.02, rtt_max=0.2, increase=1, decrease=2,
                      min_requests=1, max_requests=200, start=1)
    t = 0.0
    history = []
    for _ in range(3000):
        inflight = c.limit
        rtt = 0.01 + 0.01 * max(0, inflight - capacity) + 0.005 * inflight / capacity
        c.observe(rtt, t)
        t += 0.05
        history.append(c.limit)
    tail = history[-500:]
    assert max(tail) < 2 * capacity + 10
    assert min(tail) > capacity / 4
    assert max(tail) < 200


def test_server_pace_penalty_and_retry_after():
    p = ServerPace()
    assert p.delay(1.0) == 1.0
    p.overloaded(now=10.0, retry_after=30.0)
    assert p.delay(1.0) == 2.0
    assert p.earliest(10.0, 1.0) == 40.0
    p.overloaded(now=11.0, retry_after=None)
    assert p.penalty == 4.0
    for _ in range(50):
        p.success()
    assert p.penalty == 1.0
    for _ in range(20):
        p.overloaded(now=0.0, retry_after=None)
    assert p.penalty == p.max_penalty


def test_server_pace_rtt_stretches_delay_when_slow():
    p = ServerPace(alpha=1.0, rtt_factor=5.0)
    p.observe(0.01)
    assert p.delay(0.5) == 0.5  # fast server: waitDuration rules
    p.observe(0.4)
    assert p.delay(0.5) == pytest.approx(2.0)  # slow server: asked less often
    p.observe(0.02)
    assert p.delay(0.5) == 0.5  # recovered
