"""robots.txt fetching (larbin_py.robots_fetch) with a fake fetcher: canned answers, no sockets."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace

import pytest

from larbin_py.net.http import FetchResult
from larbin_py.robots import MAX_REDIRECTS
from larbin_py.robots_fetch import RobotsFetch


class FakeFetcher:
    """Answers each URL from a table; records every request (url, ip, port)."""

    def __init__(self, answers: dict[str, FetchResult]):
        self.answers = answers
        self.requests: list[tuple[str, str, int]] = []

    async def fetch(self, url, ip, port, **kw):
        self.requests.append((url, ip, port))
        return self.answers[url]


class FakeFrontier:
    """Records what the robots fetch tells it; spaces follow-ups by 0.5 s.

    Its parts as the frontier's: ``follow_ups`` (delay, allowed, started)
    and ``dns.addresses`` (allowed), recording into the same ``calls``.
    """

    def __init__(self, private_refused=frozenset(), allowed=True):
        self.calls: list[tuple] = []
        self.private_refused = private_refused
        self.allowed = allowed
        self.follow_ups = SimpleNamespace(delay=lambda req, now: 0.5, allowed=lambda req, now: self.allowed,
                                          started=lambda req, now: self.calls.append(("follow_up_started",)))
        addresses = SimpleNamespace(
            allowed=lambda host, ips: tuple(ip for ip in ips if ip not in self.private_refused))
        self.dns = SimpleNamespace(addresses=addresses)

    def robots_known(self, req, rules, ttl, now):
        self.calls.append(("known", rules))

    def robots_unavailable(self, req, now, reason=None, *, free=False):
        self.calls.append(("unavailable", "free") if free else
                          ("unavailable",) if reason is None else ("unavailable", reason))


class FakeLog:
    def __init__(self):
        self.records = []

    def append(self, url, when, body):
        self.records.append((url, body))


ROBOTS = "http://a.test/robots.txt"


def request():
    return SimpleNamespace(url=ROBOTS, ip="10.0.0.1", port=80, site=SimpleNamespace(key="http://a.test:80", ips=("10.0.0.1",)))


def answer(url, status=None, *, body=b"", location=None, error=None, **fields):
    return FetchResult(url=url, ip="", status=status, body=body, location=location, error=error, **fields)


def run(answers, *, dns=None, private_refused=frozenset(), allowed=True):
    fetcher, frontier, log = FakeFetcher(answers), FakeFrontier(private_refused, allowed), FakeLog()
    sleeps, answered, lookups, rejected = [], [], [], Counter()

    async def sleep(delay):
        sleeps.append(delay)

    async def lookup(host):
        lookups.append(host)
        ips = (dns or {}).get(host, ())
        return SimpleNamespace(error=None if ips else "noDNS", ips=list(ips), ttl=60.0)

    robots = RobotsFetch(frontier, fetcher, lookup, now=lambda: 100.0, log=log,
                         on_answer=lambda req, res, hop: answered.append(hop), rejected=rejected,
                         sleep=sleep, wall=lambda: 1e9)
    asyncio.run(robots.run(request()))
    return SimpleNamespace(fetcher=fetcher, frontier=frontier, log=log, sleeps=sleeps,
                           answered=answered, lookups=lookups, rejected=rejected)


def known_rules(r):
    [(what, rules)] = [c for c in r.frontier.calls if c[0] == "known"]
    return rules


def test_200_is_parsed_logged_and_applied():
    r = run({ROBOTS: answer(ROBOTS, 200, body=b"User-agent: *\nDisallow: /private\n")})
    rules = known_rules(r)
    assert not rules.allowed("larbin", "/private/x") and rules.allowed("larbin", "/public")
    assert r.log.records == [(ROBOTS, b"User-agent: *\nDisallow: /private\n")]
    assert r.answered == [0] and r.sleeps == []


def test_404_allows_all_and_is_logged_as_absent():
    r = run({ROBOTS: answer(ROBOTS, 404)})
    assert known_rules(r).allowed("larbin", "/anything")
    assert r.log.records == [(ROBOTS, None)]


def test_5xx_429_and_no_answer_leave_robots_unavailable():
    for res in (answer(ROBOTS, 503), answer(ROBOTS, 429), answer(ROBOTS, error="timeout")):
        r = run({ROBOTS: res})
        assert r.frontier.calls == [("unavailable",)]
        assert r.log.records == []


def test_a_redirect_chain_past_the_limit_allows_all_after_max_redirects_hops():
    urls = [ROBOTS] + [f"http://a.test/r{i}" for i in range(MAX_REDIRECTS + 3)]
    answers = {u: answer(u, 301, location=urls[i + 1]) for i, u in enumerate(urls[:-1])}
    r = run(answers)
    # the first request and MAX_REDIRECTS follow-ups; the 3xx after them ends it
    assert [u for u, _, _ in r.fetcher.requests] == urls[:MAX_REDIRECTS + 1]
    assert r.answered == list(range(MAX_REDIRECTS + 1))
    assert r.sleeps == [0.5] * MAX_REDIRECTS  # each follow-up politely spaced
    assert known_rules(r).allowed("larbin", "/x")
    assert r.log.records == [(ROBOTS, None)]


def test_a_same_host_redirect_keeps_the_address_and_follows():
    target = "http://a.test/real-robots.txt"
    r = run({ROBOTS: answer(ROBOTS, 302, location="/real-robots.txt"),
             target: answer(target, 200, body=b"User-agent: *\nDisallow: /\n")})
    assert r.fetcher.requests == [(ROBOTS, "10.0.0.1", 80), (target, "10.0.0.1", 80)]
    assert r.lookups == []
    assert not known_rules(r).allowed("larbin", "/x")


def test_a_hop_the_ips_lease_no_longer_allows_is_not_made_and_leaves_robots_unavailable():
    """Distributed mode: the lease lapsed while the hop waited its turn: no request."""
    target = "http://a.test/real-robots.txt"
    r = run({ROBOTS: answer(ROBOTS, 302, location="/real-robots.txt"),
             target: answer(target, 200, body=b"User-agent: *\nDisallow: /\n")}, allowed=False)
    assert r.fetcher.requests == [(ROBOTS, "10.0.0.1", 80)]
    assert r.frontier.calls == [("unavailable", "free")] and r.log.records == []  # no failure of the site's


def test_a_request_that_never_reached_the_server_is_no_failure_of_the_site():
    """A kept-alive connection the server closed as it was reused (a reset before any byte on
    a reused connection), or a connection opened when the IP was no longer ours: asked again
    free.  A reset after bytes came, or on a new connection, is the site's failure."""
    for res in (answer(ROBOTS, error="reset", conn_reused=True), answer(ROBOTS, error="notSent")):
        assert run({ROBOTS: res}).frontier.calls == [("unavailable", "free")], res
    for res in (answer(ROBOTS, error="reset", conn_reused=True, bytes_read=12), answer(ROBOTS, error="reset")):
        assert run({ROBOTS: res}).frontier.calls == [("unavailable",)], res


def test_a_cross_host_redirect_resolves_through_the_lookup_method():
    target = "http://b.test:8080/robots.txt"
    r = run({ROBOTS: answer(ROBOTS, 301, location=target),
             target: answer(target, 200, body=b"User-agent: *\nDisallow: /b\n")},
            dns={"b.test": ["10.0.0.2"]})
    assert r.lookups == ["b.test"]
    assert r.fetcher.requests[1] == (target, "10.0.0.2", 8080)
    assert not known_rules(r).allowed("larbin", "/b")


def test_a_cross_host_redirect_that_does_not_resolve_leaves_robots_unavailable():
    r = run({ROBOTS: answer(ROBOTS, 301, location="http://gone.test/robots.txt")})
    assert r.lookups == ["gone.test"]
    assert r.frontier.calls[-1] == ("unavailable",)
    assert len(r.fetcher.requests) == 1


def test_a_cross_host_redirect_to_a_private_address_is_refused_and_counted():
    r = run({ROBOTS: answer(ROBOTS, 301, location="http://inner.test/robots.txt")},
            dns={"inner.test": ["192.168.1.1"]}, private_refused={"192.168.1.1"})
    assert r.rejected["privateAddress"] == 1
    assert r.frontier.calls[-1] == ("unavailable",)
    assert len(r.fetcher.requests) == 1


def test_a_redirect_to_nowhere_allows_all():
    r = run({ROBOTS: answer(ROBOTS, 302, location="mailto:x@a.test")})
    assert known_rules(r).allowed("larbin", "/x")
    assert len(r.fetcher.requests) == 1


@pytest.mark.parametrize("error", ["tlsError", "proxyError"])
def test_a_tls_or_proxy_failure_is_passed_on_as_the_reason_never_as_a_plain_failure(error):
    """Passed on, the frontier forgets the site's URLs under it, not as forbiddenRobots."""
    r = run({ROBOTS: answer(ROBOTS, error=error)})
    assert r.frontier.calls == [("unavailable", error)]
    r = run({ROBOTS: answer(ROBOTS, error="noConnection")})
    assert r.frontier.calls == [("unavailable",)]


def test_a_digest_challenge_is_answered_once_by_a_polite_second_request():
    class Twice:
        def __init__(self):
            self.calls = []

        async def fetch(self, url, ip, port, **kw):
            self.calls.append(url)
            if len(self.calls) == 1:
                return answer(url, 401, error="authRetry")
            return answer(url, 200, body=b"User-agent: *\nDisallow: /x\n")

    frontier, fetcher, sleeps = FakeFrontier(), Twice(), []

    async def sleep(delay):
        sleeps.append(delay)

    robots = RobotsFetch(frontier, fetcher, None, now=lambda: 1.0, sleep=sleep)
    asyncio.run(robots.run(request()))
    assert fetcher.calls == [ROBOTS, ROBOTS] and sleeps == [0.5]  # spaced like a redirect's hop
    assert not known_rules(SimpleNamespace(frontier=frontier)).allowed("larbin", "/x")


def test_a_401_without_credentials_allows_all_as_a_4xx():
    r = run({ROBOTS: answer(ROBOTS, 401, error="authRequired")})
    assert known_rules(r).allowed("larbin", "/anything")
