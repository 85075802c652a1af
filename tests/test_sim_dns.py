"""The sim's DNS server: wire format, CNAME chains, truncation, faults, accounting.

Replies are decoded by the small independent decoder below (with compression
pointer support), so the server's encoder is checked against RFC 1035 rather
than against itself.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct

import pytest

from larbin_py.sim.dns import QTYPE_A, QTYPE_AAAA, QTYPE_CNAME, SimDNSServer, parse_query

# ---------------------------------------------------------------- helpers


def make_query(name: str, qtype: int = QTYPE_A, qid: int = 0x1234, flags: int = 0x0100) -> bytes:
    out = struct.pack("!HHHHHH", qid, flags, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\x00" + struct.pack("!HH", qtype, 1)


def read_name(msg: bytes, pos: int) -> tuple[str, int]:
    labels, end, hops = [], None, 0
    while True:
        length = msg[pos]
        if length & 0xC0 == 0xC0:
            if end is None:
                end = pos + 2
            pos = ((length & 0x3F) << 8) | msg[pos + 1]
            hops += 1
            assert hops < 20
            continue
        pos += 1
        if length == 0:
            break
        labels.append(msg[pos:pos + length].decode())
        pos += length
    return ".".join(labels), (end if end is not None else pos)


def decode(msg: bytes) -> dict:
    qid, flags, qd, an, ns, ar = struct.unpack_from("!HHHHHH", msg)
    pos = 12
    questions = []
    for _ in range(qd):
        name, pos = read_name(msg, pos)
        qtype, qclass = struct.unpack_from("!HH", msg, pos)
        pos += 4
        questions.append((name, qtype, qclass))
    answers = []
    for _ in range(an):
        name, pos = read_name(msg, pos)
        rtype, rclass, ttl, rdlen = struct.unpack_from("!HHIH", msg, pos)
        pos += 10
        rdata = msg[pos:pos + rdlen]
        assert len(rdata) == rdlen
        if rtype == QTYPE_A:
            value = socket.inet_ntop(socket.AF_INET, rdata)
        elif rtype == QTYPE_AAAA:
            value = socket.inet_ntop(socket.AF_INET6, rdata)
        elif rtype == QTYPE_CNAME:
            value, _ = read_name(msg, pos)
        else:
            value = rdata
        pos += rdlen
        answers.append((name, rtype, rclass, ttl, value))
    assert pos == len(msg), "trailing bytes"
    return {
        "id": qid, "qr": bool(flags & 0x8000), "tc": bool(flags & 0x0200),
        "rd": bool(flags & 0x0100), "ra": bool(flags & 0x0080), "rcode": flags & 0xF,
        "opcode": (flags >> 11) & 0xF, "questions": questions, "answers": answers,
        "ns": ns, "ar": ar,
    }


class UDPClient(asyncio.DatagramProtocol):
    """Sends datagrams to one server; replies are matched by DNS id."""

    def __init__(self) -> None:
        self.replies: asyncio.Queue[bytes] = asyncio.Queue()
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data, addr) -> None:
        self.replies.put_nowait(data)

    @classmethod
    async def open(cls, server: SimDNSServer) -> "UDPClient":
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_datagram_endpoint(cls, remote_addr=server.address)
        return proto

    def send(self, payload: bytes) -> None:
        self.transport.sendto(payload)

    async def ask(self, payload: bytes) -> dict:
        self.send(payload)
        return decode(await asyncio.wait_for(self.replies.get(), 5))

    def close(self) -> None:
        self.transport.close()


async def tcp_ask(server: SimDNSServer, payload: bytes) -> dict:
    reader, writer = await asyncio.open_connection(*server.address)
    try:
        writer.write(struct.pack("!H", len(payload)) + payload)
        (length,) = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), 5))
        return decode(await asyncio.wait_for(reader.readexactly(length), 5))
    finally:
        writer.close()


ZONE = {
    "www.example.test": ["127.0.0.2"],
    "Multi.Example.Test.": ["127.0.0.3", "127.0.0.4"],
    "dual.test": ["127.0.0.5", "::1"],
    "big.test": [f"10.0.{i // 200}.{i % 200}" for i in range(100)],
}
CNAMES = {"alias.test": "mid.test", "mid.test": "www.example.test", "dangling.test": "nowhere.test",
          "loop1.test": "loop2.test", "loop2.test": "loop1.test"}


@pytest.fixture
def zone():
    return dict(ZONE)


# ---------------------------------------------------------------- tests


async def test_a_answer_header_and_question_echo():
    async with SimDNSServer(ZONE, ttl=77) as server:
        client = await UDPClient.open(server)
        reply = await client.ask(make_query("WWW.Example.TEST", qid=4242))
        client.close()
    assert reply["id"] == 4242 and reply["qr"] and reply["ra"] and reply["rd"]
    assert not reply["tc"] and reply["rcode"] == 0 and reply["opcode"] == 0
    assert reply["questions"] == [("WWW.Example.TEST", QTYPE_A, 1)]  # echoed verbatim
    assert reply["answers"] == [("www.example.test", QTYPE_A, 1, 77, "127.0.0.2")]
    assert server.queries == 1 and server.count("www.example.test.") == 1
    assert server.log[0][1:] == ("www.example.test", QTYPE_A, "answer")


async def test_keys_case_and_trailing_dot_insensitive_and_multiple_records():
    async with SimDNSServer(ZONE) as server:
        client = await UDPClient.open(server)
        reply = await client.ask(make_query("multi.example.test."))
        client.close()
    assert [a[4] for a in reply["answers"]] == ["127.0.0.3", "127.0.0.4"]


async def test_cname_chain_followed_inside_answer():
    async with SimDNSServer(ZONE, cnames=CNAMES, ttl=30) as server:
        client = await UDPClient.open(server)
        reply = await client.ask(make_query("alias.test"))
        dangling = await client.ask(make_query("dangling.test"))
        loop = await client.ask(make_query("loop1.test"))
        cname_only = await client.ask(make_query("alias.test", QTYPE_CNAME))
        client.close()
    assert reply["rcode"] == 0
    assert reply["answers"] == [
        ("alias.test", QTYPE_CNAME, 1, 30, "mid.test"),
        ("mid.test", QTYPE_CNAME, 1, 30, "www.example.test"),
        ("www.example.test", QTYPE_A, 1, 30, "127.0.0.2"),
    ]
    assert dangling["rcode"] == 3
    assert dangling["answers"] == [("dangling.test", QTYPE_CNAME, 1, 30, "nowhere.test")]
    assert loop["rcode"] == 2 and loop["answers"] == []
    assert cname_only["rcode"] == 0
    assert cname_only["answers"] == [("alias.test", QTYPE_CNAME, 1, 30, "mid.test")]


async def test_nxdomain_and_nodata_and_aaaa():
    async with SimDNSServer(ZONE) as server:
        client = await UDPClient.open(server)
        nx = await client.ask(make_query("unknown.test"))
        nodata = await client.ask(make_query("www.example.test", QTYPE_AAAA))
        aaaa = await client.ask(make_query("dual.test", QTYPE_AAAA))
        a = await client.ask(make_query("dual.test", QTYPE_A))
        client.close()
    assert nx["rcode"] == 3 and nx["answers"] == []
    assert nodata["rcode"] == 0 and nodata["answers"] == []
    assert [x[4] for x in aaaa["answers"]] == ["::1"]
    assert [x[4] for x in a["answers"]] == ["127.0.0.5"]
    assert [entry[3] for entry in server.log] == ["nxdomain", "nodata", "answer", "answer"]


async def test_large_answer_truncated_over_udp_complete_over_tcp():
    async with SimDNSServer(ZONE) as server:
        client = await UDPClient.open(server)
        client.send(make_query("big.test", qid=7))
        raw = await asyncio.wait_for(client.replies.get(), 5)
        client.close()
        full = await tcp_ask(server, make_query("big.test", qid=8))
    udp = decode(raw)
    assert len(raw) <= 512 and udp["tc"] and udp["answers"] == [] and udp["id"] == 7
    assert udp["questions"] == [("big.test", QTYPE_A, 1)]
    assert full["id"] == 8 and not full["tc"] and len(full["answers"]) == 100
    assert {a[4] for a in full["answers"]} == set(ZONE["big.test"])
    assert [e[3] for e in server.log] == ["truncated", "answer"]


async def test_tcp_pipelined_queries_all_answered():
    async with SimDNSServer(ZONE, latency=lambda rng: rng.uniform(0.001, 0.01)) as server:
        reader, writer = await asyncio.open_connection(*server.address)
        for i, name in enumerate(["www.example.test", "unknown.test", "multi.example.test"]):
            q = make_query(name, qid=100 + i)
            writer.write(struct.pack("!H", len(q)) + q)
        got = {}
        for _ in range(3):
            (length,) = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), 5))
            msg = decode(await asyncio.wait_for(reader.readexactly(length), 5))
            got[msg["id"]] = msg
        writer.close()
    assert got[100]["answers"][0][4] == "127.0.0.2"
    assert got[101]["rcode"] == 3
    assert len(got[102]["answers"]) == 2


@pytest.mark.parametrize("kind,rcode", [("servfail", 2), ("nxdomain", 3), ("refused", 5)])
async def test_per_name_faults_and_clearing(kind, rcode):
    async with SimDNSServer(ZONE, faults={"www.example.test": kind}) as server:
        client = await UDPClient.open(server)
        faulty = await client.ask(make_query("www.example.test"))
        other = await client.ask(make_query("multi.example.test"))
        server.set_fault("WWW.example.test", None)
        healed = await client.ask(make_query("www.example.test"))
        client.close()
    assert faulty["rcode"] == rcode and faulty["answers"] == []
    assert other["rcode"] == 0 and len(other["answers"]) == 2
    assert healed["rcode"] == 0 and healed["answers"][0][4] == "127.0.0.2"
    assert server.log[0][3] == kind


async def test_drop_fault_sends_nothing():
    async with SimDNSServer(ZONE) as server:
        server.set_fault("www.example.test", "drop")
        client = await UDPClient.open(server)
        client.send(make_query("www.example.test", qid=1))
        # The next reply on this socket is the second query's: the first got none.
        second = await client.ask(make_query("multi.example.test", qid=2))
        client.close()
    assert second["id"] == 2 and client.replies.empty()
    assert server.queries == 2 and [e[3] for e in server.log] == ["drop", "answer"]


async def test_garbage_fault_reply_does_not_parse():
    async with SimDNSServer(ZONE, faults={"www.example.test": "garbage"}) as server:
        client = await UDPClient.open(server)
        client.send(make_query("www.example.test", qid=9))
        raw = await asyncio.wait_for(client.replies.get(), 5)
        client.close()
    assert struct.unpack_from("!H", raw)[0] == 9
    with pytest.raises((struct.error, IndexError, AssertionError)):
        decode(raw)


async def test_unknown_fault_kind_rejected():
    server = SimDNSServer(ZONE)
    with pytest.raises(ValueError):
        server.set_fault("www.example.test", "explode")


async def test_rates_are_seeded_and_mutable():
    names = [f"n{i}.test" for i in range(200)]
    zone = {n: ["127.0.0.9"] for n in names}

    async def run(seed):
        """Outcome sequence of the 200 queries; a faulted sentinel marks the end."""
        async with SimDNSServer(zone, servfail_rate=0.3, drop_rate=0.2, seed=seed,
                                faults={"end.test": "nxdomain"}) as server:
            client = await UDPClient.open(server)
            for n in names:
                client.send(make_query(n))
            client.send(make_query("end.test", qid=0xEEEE))
            while True:  # UDP on loopback keeps order: the sentinel comes last
                reply = decode(await asyncio.wait_for(client.replies.get(), 5))
                if reply["id"] == 0xEEEE:
                    break
            client.close()
            return [e[3] for e in server.log[:-1]]

    first, second, other = await run(1), await run(1), await run(2)
    assert len(first) == len(names)
    assert first == second and first != other
    assert 0.1 < first.count("drop") / len(names) < 0.3
    assert 0.15 < first.count("servfail") / len(names) < 0.4
    assert set(first) == {"drop", "servfail", "answer"}

    async with SimDNSServer(zone, drop_rate=1.0, faults={"end.test": "nxdomain"}) as server:
        client = await UDPClient.open(server)
        client.send(make_query("n1.test", qid=1))
        marker = await client.ask(make_query("end.test", qid=3))  # n1 handled by now
        server.drop_rate = 0.0
        server.servfail_rate = 1.0
        reply = await client.ask(make_query("n2.test", qid=2))
        client.close()
    assert marker["id"] == 3 and reply["id"] == 2 and reply["rcode"] == 2
    assert [e[3] for e in server.log] == ["drop", "nxdomain", "servfail"]


async def test_latency_and_peak_in_flight():
    async with SimDNSServer(ZONE, latency=0.05) as server:
        client = await UDPClient.open(server)
        for i in range(10):
            client.send(make_query("www.example.test", qid=i))
        ids = set()
        for _ in range(10):
            ids.add(decode(await asyncio.wait_for(client.replies.get(), 5))["id"])
        client.close()
    assert ids == set(range(10))
    assert server.peak_in_flight == 10 and server.in_flight == 0
    span = server.log[-1][0] - server.log[0][0]
    assert span < 0.05  # all ten were received before the first answer left


async def test_callable_latency_uses_seeded_rng():
    seen = []

    def latency(rng: random.Random) -> float:
        value = rng.uniform(0.0, 0.002)
        seen.append(value)
        return value

    async with SimDNSServer(ZONE, latency=latency, seed=5) as server:
        client = await UDPClient.open(server)
        for i in range(3):
            await client.ask(make_query("www.example.test", qid=i))
        client.close()
    rng = random.Random(5)
    assert seen == [rng.uniform(0.0, 0.002) for _ in range(3)]
    assert server.peak_in_flight == 1


async def test_malformed_messages_ignored_and_counted():
    bad = [  # (uvloop does not deliver empty datagrams, so none is sent)
        b"\x00",
        b"\x12\x34" + b"\x00" * 8,                                   # header only
        make_query("www.example.test")[:-3],                         # cut question
        struct.pack("!HHHHHH", 1, 0x8000, 1, 0, 0, 0) + make_query("a.b")[12:],  # a reply
        struct.pack("!HHHHHH", 1, 0, 2, 0, 0, 0) + make_query("a.b")[12:],       # qdcount 2
        struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",  # pointer
        struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + b"\x50" + b"a" * 80 + b"\x00\x00\x01\x00\x01",
        struct.pack("!HHHHHH", 1, 0, 1, 0, 0, 0) + b"\x02\xff\xfe\x00\x00\x01\x00\x01",
        make_query("www.example.test")[:-2] + b"\x00\x03",           # class CHAOS
        bytes(random.Random(3).getrandbits(8) for _ in range(700)),
    ]
    async with SimDNSServer(ZONE) as server:
        client = await UDPClient.open(server)
        for payload in bad:
            client.send(payload)
        reply = await client.ask(make_query("www.example.test", qid=77))
        # garbage over TCP, then a good query on the same connection
        reader, writer = await asyncio.open_connection(*server.address)
        good = make_query("www.example.test", qid=78)
        writer.write(b"\x00\x05hello" + struct.pack("!H", len(good)) + good)
        (length,) = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), 5))
        tcp_reply = decode(await asyncio.wait_for(reader.readexactly(length), 5))
        writer.close()
        client.close()
    assert reply["id"] == 77 and reply["answers"][0][4] == "127.0.0.2"
    assert client.replies.empty()
    assert tcp_reply["id"] == 78
    assert server.malformed == len(bad) + 1  # the TCP "hello" too
    assert server.queries == 2
    assert sum(1 for e in server.log if e[3] == "malformed") == len(bad) + 1


async def test_runtime_zone_changes():
    async with SimDNSServer(ZONE) as server:
        client = await UDPClient.open(server)
        server.set_records("new.test", ["127.0.0.42"])
        server.set_cname("other.test", "new.test")
        got = await client.ask(make_query("other.test"))
        server.set_records("new.test", None)
        gone = await client.ask(make_query("new.test"))
        server.ttl = 5
        server.set_records("new.test", ["127.0.0.43"])
        again = await client.ask(make_query("new.test"))
        client.close()
    assert got["answers"][-1][4] == "127.0.0.42"
    assert gone["rcode"] == 3
    assert again["answers"] == [("new.test", QTYPE_A, 1, 5, "127.0.0.43")]


def test_parse_query_roundtrip_and_rejects():
    q = make_query("Foo.Bar", QTYPE_AAAA, qid=5)
    qid, flags, name, qtype, question = parse_query(q)
    assert (qid, name, qtype) == (5, "foo.bar", QTYPE_AAAA) and flags == 0x0100
    assert question == q[12:]
    assert parse_query(q[:15]) is None
    assert parse_query(struct.pack("!HHHHHH", 5, 0x2800, 1, 0, 0, 0) + q[12:]) is None  # opcode 5


async def test_fixed_port_and_close_releases_it():
    first = SimDNSServer(ZONE)
    await first.start()
    port = first.port
    await first.close()
    second = SimDNSServer(ZONE, port=port)
    await second.start()
    try:
        client = await UDPClient.open(second)
        reply = await client.ask(make_query("www.example.test"))
        client.close()
        assert second.port == port and reply["answers"][0][4] == "127.0.0.2"
    finally:
        await second.close()
