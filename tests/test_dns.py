"""The c-ares resolver against the sim's DNS server (loopback only).

Covers batching (peak in flight), typed failures, caching (positive, negative,
TTL clamping and expiry on an injected clock, LRU bound), coalescing, CNAME
chains, literal addresses, TCP fallback for truncated answers, hostile replies
and shutdown.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time

import pytest

from larbin_py.net.dns import (
    BAD_ANSWER, ERRORS, NXDOMAIN, REFUSED, SERVFAIL, TIMEOUT, DNSAnswer, Resolver, normalize_name,
)
from larbin_py.sim.dns import SimDNSServer, parse_query


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ip_for(i: int) -> str:
    return f"127.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"


ZONE = {
    "www.example.test": ["127.0.0.2"],
    "multi.test": ["127.0.0.3", "127.0.0.4"],
    "big.test": [f"10.0.{i // 200}.{i % 200}" for i in range(100)],
    "v6only.test": ["::1"],
    "xn--bcher-kva.test": ["127.0.0.7"],
}
CNAMES = {"alias.test": "mid.test", "mid.test": "www.example.test", "dangling.test": "nowhere.test",
          "loop1.test": "loop2.test", "loop2.test": "loop1.test"}


# ------------------------------------------------------------------ batching


@pytest.mark.async_timeout(60)
async def test_thousands_of_names_with_latency_and_faults():
    rng = random.Random(42)
    good = {f"h{i}.crawl.test": [ip_for(i + 1)] + ([ip_for(i + 70000)] if i % 7 == 0 else [])
            for i in range(2700)}
    aliases = {f"alias{i}.crawl.test": f"h{i}.crawl.test" for i in range(150)}
    unknown = [f"nx{i}.crawl.test" for i in range(150)]
    names = list(good) + list(aliases) + unknown
    rng.shuffle(names)
    server = SimDNSServer(good, cnames=aliases, latency=lambda r: r.uniform(0.005, 0.02),
                          servfail_rate=0.03, drop_rate=0.01, seed=7)
    await server.start()
    # timeout 1 s, not less: the server runs on the test's loop, and a loop stalled
    # past the timeout by a loaded machine makes c-ares send again queries whose
    # answers wait unread (the server then holds both: more than 50 at once)
    resolver = Resolver([server.address], max_in_flight=50, timeout=1.0, tries=2)
    try:
        answers = await asyncio.gather(*(resolver.resolve(n) for n in names))
    finally:
        resolver.close()
        await server.close()

    assert server.peak_in_flight <= 50
    assert server.peak_in_flight >= 45          # the server really saw ~50 at once
    assert resolver.stats.peak_in_flight == 50  # and the resolver filled its window

    last_outcome: dict[str, str] = {}
    for _, name, _, outcome in server.log:
        last_outcome[name] = outcome
    errors = {e: 0 for e in ERRORS}
    for name, answer in zip(names, answers):
        assert isinstance(answer, DNSAnswer) and answer.name == name and not answer.from_cache
        target = aliases.get(name, name)
        if answer.ok:
            assert target in good and answer.ips == tuple(good[target])
            continue
        errors[answer.error] += 1
        assert answer.ips == ()
        if answer.error == NXDOMAIN:
            assert name in unknown and last_outcome[name] == "nxdomain"
        else:  # injected: the last try of this very name was a servfail / a drop
            expected = {SERVFAIL: "servfail", TIMEOUT: "drop"}[answer.error]
            assert last_outcome[name] == expected
            assert server.count(name) == 2  # c-ares tried twice
    assert errors[NXDOMAIN] >= 140   # a few unknown names got an injected fault instead
    assert errors[BAD_ANSWER] == errors[REFUSED] == 0
    stats = resolver.stats
    assert stats.queries_sent == len(names)
    assert stats.answers + sum(stats.failures.values()) == len(names)
    assert stats.failures == errors
    assert stats.in_flight == 0 and stats.queued == 0
    # the injected faults did happen, and c-ares retried them
    assert sum(1 for e in server.log if e[3] in ("servfail", "drop")) > 50


@pytest.mark.async_timeout(30)
async def test_window_is_filled_exactly_and_queue_is_fifo():
    zone = {f"n{i}.test": [ip_for(i + 1)] for i in range(400)}
    async with SimDNSServer(zone, latency=0.02) as server:
        resolver = Resolver([server.address], max_in_flight=25, timeout=2.0)
        names = list(zone)
        tasks = [asyncio.ensure_future(resolver.resolve(n)) for n in names]
        await asyncio.sleep(0)  # every resolve() ran up to its await: all queued
        assert resolver.stats.in_flight == 25 and resolver.stats.queued == 375
        answers = await asyncio.gather(*tasks)
        resolver.close()
    assert [a.ips[0] for a in answers] == [zone[n][0] for n in names]
    assert server.peak_in_flight == 25
    order = [e[1] for e in server.log]
    assert order[:25] == names[:25] or sorted(order[:25]) == sorted(names[:25])
    # FIFO: a name is never sent more than one window ahead of an earlier one
    position = {n: i for i, n in enumerate(order)}
    assert all(position[names[i]] < position[names[i + 25]] for i in range(len(names) - 25))


# ------------------------------------------------------------------ caching


async def test_cache_hits_do_not_reach_the_server():
    zone = {f"c{i}.test": [ip_for(i + 1)] for i in range(50)}
    async with SimDNSServer(zone) as server:
        resolver = Resolver([server.address])
        first = await asyncio.gather(*(resolver.resolve(n) for n in zone))
        sent = server.queries
        second = await asyncio.gather(*(resolver.resolve(n.upper() + ".") for n in zone))
        resolver.close()
    assert sent == 50 and server.queries == 50
    assert all(not a.from_cache for a in first) and all(b.from_cache for b in second)
    assert [a.ips for a in first] == [b.ips for b in second]
    assert resolver.stats.cache_hits == 50 and resolver.stats.queries_sent == 50


async def test_ttl_expiry_on_injected_clock_reaches_server_again():
    clock = FakeClock()
    async with SimDNSServer(ZONE, ttl=120) as server:
        resolver = Resolver([server.address], clock=clock, min_ttl=60, valid_time=3600)
        first = await resolver.resolve("www.example.test")
        clock.now += 119
        cached = await resolver.resolve("www.example.test")
        server.set_records("www.example.test", ["127.0.0.99"])
        clock.now += 2
        fresh = await resolver.resolve("www.example.test")
        fresh = resolver.cached("WWW.example.test.")
        resolver.close()
    assert first.ttl == 120 and not first.from_cache
    assert cached.from_cache and cached.ips == ("127.0.0.2",) and cached.ttl == pytest.approx(1)
    assert resolver.cached("nope.test") is None
    # c-ares' own cache is off: the expired entry is really asked again
    assert fresh.from_cache and fresh.ips == ("127.0.0.99",) and fresh.ttl == 120
    assert server.count("www.example.test") == 2


@pytest.mark.parametrize("server_ttl,expected", [(5, 60.0), (0, 60.0), (86400 * 30, 1000.0), (300, 300.0)])
async def test_ttl_is_clamped(server_ttl, expected):
    async with SimDNSServer(ZONE, ttl=server_ttl) as server:
        resolver = Resolver([server.address], min_ttl=60, valid_time=1000)
        answer = await resolver.resolve("multi.test")
        resolver.close()
    assert answer.ok and answer.ttl == expected


async def test_negative_caching_and_expiry():
    clock = FakeClock()
    async with SimDNSServer(ZONE, faults={"www.example.test": "servfail"}) as server:
        resolver = Resolver([server.address], clock=clock, negative_ttl=30, tries=1)
        nx1 = await resolver.resolve("unknown.test")
        nx2 = await resolver.resolve("unknown.test")
        sf1 = await resolver.resolve("www.example.test")
        server.set_fault("www.example.test", None)
        sf2 = await resolver.resolve("www.example.test")
        clock.now += 31
        healed = await resolver.resolve("www.example.test")
        nx3 = await resolver.resolve("unknown.test")
        resolver.close()
    assert (nx1.error, nx1.ttl, nx1.from_cache) == (NXDOMAIN, 30, False)
    assert nx2.error == NXDOMAIN and nx2.from_cache
    assert sf1.error == SERVFAIL and sf2.error == SERVFAIL and sf2.from_cache
    assert healed.ok and healed.ips == ("127.0.0.2",)
    assert nx3.error == NXDOMAIN and not nx3.from_cache
    assert server.count("unknown.test") == 2 and server.count("www.example.test") == 2


async def test_cache_is_bounded_lru():
    zone = {f"l{i}.test": [ip_for(i + 1)] for i in range(30)}
    async with SimDNSServer(zone) as server:
        resolver = Resolver([server.address], max_cache=10)
        for name in zone:
            await resolver.resolve(name)
        assert resolver.cache_size == 10
        await resolver.resolve("l20.test")          # refresh: now most recent
        for name in ["l30x.test", "l31x.test"]:     # two new (nxdomain) entries
            await resolver.resolve(name)
        recent = await resolver.resolve("l20.test")
        old = await resolver.resolve("l0.test")
        evicted = await resolver.resolve("l21.test")  # oldest of the survivors
        resolver.close()
    assert resolver.cache_size == 10
    assert recent.from_cache and not old.from_cache and not evicted.from_cache
    assert server.count("l0.test") == 2 and server.count("l20.test") == 1


# ------------------------------------------------------------------ answers


async def test_cname_chains_nxdomain_loops():
    async with SimDNSServer(ZONE, cnames=CNAMES) as server:
        resolver = Resolver([server.address], tries=1)
        alias, dangling, loop, nx, v6 = await asyncio.gather(
            resolver.resolve("alias.test"), resolver.resolve("dangling.test"),
            resolver.resolve("loop1.test"), resolver.resolve("nope.test"),
            resolver.resolve("v6only.test"))
        resolver.close()
    assert alias.ok and alias.ips == ("127.0.0.2",) and alias.name == "alias.test"
    assert dangling.error == NXDOMAIN
    assert loop.error == SERVFAIL
    assert nx.error == NXDOMAIN
    assert v6.error == NXDOMAIN  # only AAAA: no usable IPv4 address


async def test_truncated_answer_retried_over_tcp():
    async with SimDNSServer(ZONE) as server:
        resolver = Resolver([server.address])
        answer = await resolver.resolve("big.test")
        resolver.close()
    assert answer.ok and answer.ips == tuple(ZONE["big.test"])
    assert [e[3] for e in server.log] == ["truncated", "answer"]


@pytest.mark.async_timeout(20)
async def test_timeout_takes_about_timeout_times_tries_and_is_not_cached():
    async with SimDNSServer(ZONE, drop_rate=1.0) as server:
        resolver = Resolver([server.address], timeout=0.4, tries=2)
        start = time.monotonic()
        first = await resolver.resolve("www.example.test")
        elapsed = time.monotonic() - start
        second = await resolver.resolve("www.example.test")
        resolver.close()
    assert first.error == TIMEOUT and first.ttl == 0 and not first.from_cache
    assert 0.4 <= elapsed <= 0.4 * 2 + 0.2
    assert second.error == TIMEOUT and not second.from_cache
    assert server.count("www.example.test") == 4  # 2 tries, twice


async def test_unreachable_server_is_a_timeout():
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now: ICMP port unreachable
    resolver = Resolver([("127.0.0.1", port)], timeout=0.3, tries=2)
    answer = await resolver.resolve("www.example.test")
    resolver.close()
    assert answer.error == TIMEOUT


async def test_typed_server_errors():
    faults = {"g.test": "garbage", "r.test": "refused", "s.test": "servfail", "n.test": "nxdomain"}
    async with SimDNSServer(ZONE, faults=faults) as server:
        resolver = Resolver([server.address], tries=1)
        got = {n: (await resolver.resolve(n)).error for n in faults}
        resolver.close()
    assert got == {"g.test": BAD_ANSWER, "r.test": REFUSED, "s.test": SERVFAIL, "n.test": NXDOMAIN}


class HostileServer(asyncio.DatagramProtocol):
    """Answers every query with a reply built by ``craft(query_bytes)``."""

    def __init__(self, craft) -> None:
        self.craft = craft
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data, addr) -> None:
        self.transport.sendto(self.craft(data), addr)


def _reply(query: bytes, records: bytes, count: int) -> bytes:
    qid, flags, name, qtype, question = parse_query(query)
    return struct.pack("!HHHHHH", qid, 0x8180, 1, count, 0, 0) + question + records


def _a_rr(owner: bytes, rdata: bytes) -> bytes:
    return owner + struct.pack("!HHIH", 1, 1, 60, len(rdata)) + rdata


@pytest.mark.parametrize("craft", [
    # an A record for some other name, nothing for the asked one
    lambda q: _reply(q, _a_rr(b"\x05other\x04test\x00", bytes([6, 6, 6, 6])), 1),
    # an A record with a 3-byte address
    lambda q: _reply(q, _a_rr(b"\xc0\x0c", b"\x01\x02\x03"), 1),
    # claims 5 answers, carries one
    lambda q: _reply(q, _a_rr(b"\xc0\x0c", bytes([1, 2, 3, 4])), 5),
    # a compression pointer loop as the owner name
    lambda q: _reply(q, b"\xc0\x1e\xc0\x1c" + struct.pack("!HHIH", 1, 1, 60, 4) + b"\x01\x02\x03\x04", 1),
    # random bytes after a valid header and question
    lambda q: _reply(q, bytes(random.Random(1).getrandbits(8) for _ in range(300)), 3),
], ids=["other-owner", "short-rdata", "short-count", "pointer-loop", "noise"])
async def test_hostile_answers_are_bad_answer(craft):
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: HostileServer(craft),
                                                       local_addr=("127.0.0.1", 0))
    port = transport.get_extra_info("sockname")[1]
    resolver = Resolver([("127.0.0.1", port)], timeout=0.3, tries=1)
    try:
        answer = await resolver.resolve("victim.test")
    finally:
        resolver.close()
        transport.close()
    assert answer.error == BAD_ANSWER and answer.ips == ()


# ------------------------------------------------------------------ names


async def test_literal_addresses_bypass_dns():
    async with SimDNSServer(ZONE) as server:
        resolver = Resolver([server.address], valid_time=500)
        answers = [await resolver.resolve(n) for n in
                   ["127.0.0.1", "[::1]", "::1", "[2001:DB8::1]", " 10.1.2.3 "]]
        resolver.close()
    assert [a.ips for a in answers] == [("127.0.0.1",), ("::1",), ("::1",), ("2001:db8::1",), ("10.1.2.3",)]
    assert all(a.ok and a.ttl == 500 for a in answers)
    assert server.queries == 0 and resolver.stats.literals == 5


async def test_names_normalized_idna_and_invalid_names():
    async with SimDNSServer(ZONE) as server:
        resolver = Resolver([server.address])
        idn = await resolver.resolve("Bücher.test")
        same = await resolver.resolve("XN--BCHER-KVA.TEST.")
        bad = [await resolver.resolve(n) for n in ["", " ", "a..b", "x" * 64 + ".test",
                                                   ("a" * 60 + ".") * 5, "\udcff.test"]]
        hostile = [await resolver.resolve(n) for n in ["bad\x00name.test", "a b.test", "a\\.test",
                                                        "x/y.test", "www.example.test\n"]]
        resolver.close()
    assert idn.ok and idn.ips == ("127.0.0.7",) and idn.name == "xn--bcher-kva.test"
    assert same.from_cache and same.ips == idn.ips
    assert all(b.error == NXDOMAIN for b in bad)
    assert [h.error for h in hostile[:4]] == [NXDOMAIN] * 4 and hostile[4].ok
    assert server.count("xn--bcher-kva.test") == 1
    assert server.queries == 2  # invalid names never reach the server


def test_normalize_name():
    assert normalize_name(" WWW.Example.COM. ") == "www.example.com"
    assert normalize_name("ドメイン.テスト") == "xn--eckwd4c7c.xn--zckzah"
    assert normalize_name("a..b") is None and normalize_name("") is None
    assert normalize_name("a" * 63 + ".b") == "a" * 63 + ".b"


async def test_concurrent_resolves_of_one_name_share_one_query():
    async with SimDNSServer(ZONE, latency=0.02) as server:
        resolver = Resolver([server.address])
        answers = await asyncio.gather(*(resolver.resolve(n) for n in
                                         ["multi.test", "MULTI.test", "multi.test."] * 40))
        resolver.close()
    assert server.count("multi.test") == 1
    assert {a.ips for a in answers} == {("127.0.0.3", "127.0.0.4")}
    assert resolver.stats.coalesced == 119 and resolver.stats.queries_sent == 1


async def test_cancelled_waiter_does_not_disturb_the_others():
    async with SimDNSServer(ZONE, latency=0.02) as server:
        resolver = Resolver([server.address])
        doomed = asyncio.ensure_future(resolver.resolve("www.example.test"))
        kept = asyncio.ensure_future(resolver.resolve("www.example.test"))
        await asyncio.sleep(0)
        doomed.cancel()
        answer = await kept
        with pytest.raises(asyncio.CancelledError):
            await doomed
        resolver.close()
    assert answer.ok and server.count("www.example.test") == 1


# ------------------------------------------------------------------ lifecycle


async def test_close_completes_pending_and_queued_with_refused():
    async with SimDNSServer(ZONE, faults={"www.example.test": "drop", "multi.test": "drop"}) as server:
        resolver = Resolver([server.address], max_in_flight=1, timeout=5)
        pending = asyncio.ensure_future(resolver.resolve("www.example.test"))
        queued = asyncio.ensure_future(resolver.resolve("multi.test"))
        await asyncio.sleep(0)
        assert resolver.stats.in_flight == 1 and resolver.stats.queued == 1
        start = time.monotonic()
        resolver.close()
        resolver.close()  # idempotent
        a, b = await asyncio.wait_for(asyncio.gather(pending, queued), 2)
        after = await resolver.resolve("alias.test")
        literal = await resolver.resolve("127.0.0.8")
    assert time.monotonic() - start < 1
    assert a.error == REFUSED and b.error == REFUSED and after.error == REFUSED
    assert literal.ips == ("127.0.0.8",)
    assert resolver.stats.in_flight == 0 and resolver.stats.queued == 0


async def test_no_event_thread_and_sockets_on_the_loop():
    async with SimDNSServer(ZONE) as server:
        resolver = Resolver([server.address])
        answer = await resolver.resolve("www.example.test")
        names = {t.name for t in threading.enumerate()}
        threads = [t for t in threading.enumerate() if t is not threading.main_thread()]
        resolver.close()
    assert answer.ok
    # pycares' only helper thread destroys closed channels; no c-ares event thread
    assert all("shutdown" in (t._target.__name__ if getattr(t, "_target", None) else t.name)
               for t in threads), names
    assert not resolver._readers and not resolver._writers


def test_constructor_validation():
    for servers, kwargs in [([], {}), ([("127.0.0.1", 53)], {"max_in_flight": 0}),
                            ([("dns.example", 53)], {}), ([("127.0.0.1", 70000)], {})]:
        with pytest.raises(ValueError):
            Resolver(servers, **kwargs)


async def test_ipv6_server_and_several_servers():
    async with SimDNSServer(ZONE, host="::1") as v6, SimDNSServer(ZONE) as v4:
        resolver = Resolver([v6.address, v4.address])
        answer = await resolver.resolve("multi.test")
        resolver.close()
    assert answer.ok and answer.ips == ("127.0.0.3", "127.0.0.4")
    assert v6.queries + v4.queries == 1
