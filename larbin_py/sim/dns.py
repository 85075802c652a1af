"""The synthetic web's DNS server: a small recursive-resolver impostor on loopback.

:class:`SimDNSServer` answers DNS queries over UDP and TCP on the same port from
an in-memory zone (``records``: name -> addresses, ``cnames``: alias -> target),
the way a recursive resolver would answer a stub resolver:

* ``A`` / ``AAAA`` queries return the IPv4 / IPv6 addresses of the name; a CNAME
  chain is followed *inside* the answer (the CNAME records first, then the final
  name's addresses), as recursive resolvers do.
* unknown names get NXDOMAIN (rcode 3); a known name asked for a type it has no
  data for (e.g. ``AAAA`` of an IPv4-only name) gets NOERROR with no answer.
* a CNAME loop gets SERVFAIL.
* answers larger than 512 bytes are truncated over UDP (TC bit set, question
  only), so the client retries over TCP, where the full answer is sent.

Faults are injected three ways, all changeable while the server runs:

* rates: ``drop_rate`` (the query is silently ignored) and ``servfail_rate``
  (SERVFAIL), drawn from a RNG seeded with ``seed`` (deterministic given the
  query order);
* ``latency``: seconds, or a callable ``f(rng) -> seconds``, waited before each
  answer is sent (a query waiting out its latency counts as *in flight*);
* per-name permanent faults (:meth:`set_fault` / the ``faults`` mapping):
  ``"servfail"``, ``"drop"``, ``"nxdomain"``, ``"refused"`` (rcode 5) or
  ``"garbage"`` (a reply with the right id that does not parse).

Everything is observable: ``queries`` (well-formed queries received),
``malformed`` (messages ignored because they did not parse as one query),
``peak_in_flight``, ``in_flight``, per-name counts (:meth:`count`) and ``log``,
a list of ``(monotonic time, name, qtype, outcome)`` where outcome is one of
``answer``, ``nodata``, ``nxdomain``, ``servfail``, ``refused``, ``drop``,
``garbage``, ``truncated`` (a UDP answer sent with TC set), ``malformed``
(name and qtype None).

Names are case-insensitive and compared without a trailing dot; zone keys are
given in ASCII (punycode for IDNs).  The wire format is written by hand here
(RFC 1035): no DNS library is involved on the server side.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import random
import socket
import struct
import time
from typing import Callable, Iterable, Mapping, Sequence

__all__ = [
    "SimDNSServer",
    "FAULTS",
    "QTYPE_A",
    "QTYPE_AAAA",
    "QTYPE_CNAME",
    "encode_name",
    "parse_query",
]

QTYPE_A = 1
QTYPE_CNAME = 5
QTYPE_AAAA = 28
_CLASS_IN = 1

_RCODE_NOERROR = 0
_RCODE_SERVFAIL = 2
_RCODE_NXDOMAIN = 3
_RCODE_REFUSED = 5

_FLAG_QR = 0x8000
_FLAG_AA = 0x0400
_FLAG_TC = 0x0200
_FLAG_RD = 0x0100
_FLAG_RA = 0x0080
_OPCODE_MASK = 0x7800

#: Largest DNS message sent over UDP (no EDNS: the classic RFC 1035 limit).
UDP_LIMIT = 512

#: Per-name fault kinds accepted by :meth:`SimDNSServer.set_fault`.
FAULTS = frozenset({"servfail", "drop", "nxdomain", "refused", "garbage"})

_SOCKET_BUFFER = 4 << 20  # UDP socket buffers (capped by net.core.[rw]mem_max)
_HEADER = struct.Struct("!HHHHHH")
_RR_FIXED = struct.Struct("!HHIH")  # type, class, ttl, rdlength


def _norm(name: str) -> str:
    return name.strip().rstrip(".").lower()


def encode_name(name: str) -> bytes:
    """Encode a dotted ASCII name as DNS labels (no compression).

    Raises ValueError for an empty label, a label over 63 bytes or a name over
    255 bytes.
    """
    name = name.rstrip(".")
    out = bytearray()
    if name:
        for label in name.split("."):
            raw = label.encode("ascii")
            if not 0 < len(raw) < 64:
                raise ValueError(f"bad DNS label in {name!r}")
            out.append(len(raw))
            out += raw
    out.append(0)
    if len(out) > 255:
        raise ValueError(f"DNS name too long: {name!r}")
    return bytes(out)


def parse_query(data: bytes) -> tuple[int, int, str, int, bytes] | None:
    """Parse a DNS query message.

    Returns ``(id, flags, name, qtype, question_bytes)`` with ``name``
    normalized (lower case, no trailing dot) and ``question_bytes`` the raw
    question section (echoed verbatim in the reply), or None when the message
    is not exactly one well-formed question of class IN in a query (QR = 0,
    standard opcode).  Never raises.
    """
    if len(data) < 12 + 5:
        return None
    qid, flags, qd, _an, _ns, _ar = _HEADER.unpack_from(data)
    if flags & _FLAG_QR or flags & _OPCODE_MASK or qd != 1:
        return None
    pos = 12
    labels = []
    while True:
        if pos >= len(data):
            return None
        length = data[pos]
        pos += 1
        if length == 0:
            break
        if length > 63 or pos + length > len(data):  # pointers are not allowed here
            return None
        labels.append(data[pos:pos + length])
        pos += length
        if pos - 12 > 255:
            return None
    if pos + 4 > len(data):
        return None
    qtype, qclass = struct.unpack_from("!HH", data, pos)
    if qclass != _CLASS_IN:
        return None
    try:
        name = b".".join(labels).decode("ascii").lower()
    except UnicodeDecodeError:
        return None
    return qid, flags, name, qtype, bytes(data[12:pos + 4])


class _Zone:
    """Packed address records per name: name -> (A rdata tuple, AAAA rdata tuple)."""

    __slots__ = ("addrs",)

    def __init__(self) -> None:
        self.addrs: dict[str, tuple[tuple[bytes, ...], tuple[bytes, ...]]] = {}

    def set(self, name: str, ips: Iterable[str] | None) -> None:
        name = _norm(name)
        if ips is None:
            self.addrs.pop(name, None)
            return
        v4, v6 = [], []
        for ip in ips:
            addr = ipaddress.ip_address(ip)
            (v4 if addr.version == 4 else v6).append(addr.packed)
        self.addrs[name] = (tuple(v4), tuple(v6))


class _UDP(asyncio.DatagramProtocol):
    def __init__(self, server: "SimDNSServer") -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        self.server._on_message(data, self._reply_to(addr), udp=True)

    def _reply_to(self, addr):
        def send(payload: bytes) -> None:
            transport = self.transport
            if transport is not None and not transport.is_closing():
                transport.sendto(payload, addr)
        return send

    def error_received(self, exc) -> None:  # e.g. ICMP port unreachable: ignore
        pass


class _TCP(asyncio.Protocol):
    """One TCP client: 2-byte length-prefixed messages, answered in any order."""

    def __init__(self, server: "SimDNSServer") -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server._tcp_conns.add(self)

    def connection_lost(self, exc) -> None:
        self.server._tcp_conns.discard(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 2:
            (length,) = struct.unpack_from("!H", self.buf)
            if len(self.buf) < 2 + length:
                break
            msg = bytes(self.buf[2:2 + length])
            del self.buf[:2 + length]
            self.server._on_message(msg, self._send, udp=False)

    def _send(self, payload: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(struct.pack("!H", len(payload)) + payload)


class SimDNSServer:
    """A DNS server on loopback (UDP and TCP, same port) for tests and benchmarks.

    ``records`` maps names to address strings (IPv4 answer ``A`` queries,
    IPv6 ``AAAA``); ``cnames`` maps aliases to targets; ``faults`` maps names to
    a kind in :data:`FAULTS`.  ``ttl`` is the TTL of every record sent.
    ``latency``, ``servfail_rate``, ``drop_rate`` and ``ttl`` are plain
    attributes that may be changed at any time.  Use :meth:`start` (or ``async
    with``) before reading ``host`` / ``port`` / ``address``.
    """

    def __init__(
        self,
        records: Mapping[str, Sequence[str]],
        *,
        cnames: Mapping[str, str] = {},
        faults: Mapping[str, str] = {},
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float | Callable[[random.Random], float] = 0.0,
        servfail_rate: float = 0.0,
        drop_rate: float = 0.0,
        seed: int = 0,
        ttl: int = 300,
        keep_log: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.latency = latency
        self.servfail_rate = servfail_rate
        self.drop_rate = drop_rate
        self.ttl = ttl
        self.keep_log = keep_log
        self.rng = random.Random(seed)
        self._zone = _Zone()
        for name, ips in records.items():
            self._zone.set(name, ips)
        self._cnames: dict[str, str] = {_norm(a): _norm(t) for a, t in cnames.items()}
        self._faults: dict[str, str] = {}
        for name, kind in faults.items():
            self.set_fault(name, kind)
        self.queries = 0
        self.malformed = 0
        self.in_flight = 0
        self.peak_in_flight = 0
        self.log: list[tuple[float, str | None, int | None, str]] = []
        self._counts: collections.Counter[str] = collections.Counter()
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp_server: asyncio.base_events.Server | None = None
        self._tcp_conns: set[_TCP] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    # ----------------------------------------------------------------- zone
    def set_records(self, name: str, ips: Sequence[str] | None) -> None:
        """Replace the addresses of ``name`` (None removes the name)."""
        self._zone.set(name, ips)

    def set_cname(self, alias: str, target: str | None) -> None:
        """Make ``alias`` a CNAME of ``target`` (None removes the alias)."""
        if target is None:
            self._cnames.pop(_norm(alias), None)
        else:
            self._cnames[_norm(alias)] = _norm(target)

    def set_fault(self, name: str, kind: str | None) -> None:
        """Give ``name`` a permanent fault from :data:`FAULTS`, or clear it (None)."""
        if kind is None:
            self._faults.pop(_norm(name), None)
            return
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; expected one of {sorted(FAULTS)}")
        self._faults[_norm(name)] = kind

    def count(self, name: str) -> int:
        """Number of well-formed queries received for ``name`` (any type)."""
        return self._counts[_norm(name)]

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)``, e.g. for ``Resolver(servers=[server.address])``."""
        return (self.host, self.port)

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> "SimDNSServer":
        """Bind UDP and TCP on ``host``:``port`` (a free port when 0)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        last_error: OSError | None = None
        for _attempt in range(50):
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _UDP(self), local_addr=(self.host, self.port), family=family
            )
            port = transport.get_extra_info("sockname")[1]
            sock = transport.get_extra_info("socket")
            for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                try:  # bursts of thousands of queries must not be dropped
                    sock.setsockopt(socket.SOL_SOCKET, option, _SOCKET_BUFFER)
                except OSError:
                    pass
            try:
                self._tcp_server = await loop.create_server(
                    lambda: _TCP(self), self.host, port, family=family, reuse_address=True
                )
            except OSError as exc:  # TCP port taken: try another UDP port
                transport.close()
                last_error = exc
                if self.port:
                    raise
                continue
            self._udp = transport
            self.port = port
            return self
        raise OSError(f"no port free for UDP and TCP on {self.host}") from last_error

    async def close(self) -> None:
        """Stop answering; pending delayed answers are discarded."""
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self.in_flight = 0
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._tcp_server is not None:
            self._tcp_server.close()
            for conn in list(self._tcp_conns):
                if conn.transport is not None:
                    conn.transport.close()
            await self._tcp_server.wait_closed()
            self._tcp_server = None

    async def __aenter__(self) -> "SimDNSServer":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ------------------------------------------------------------ answering
    def _on_message(self, data: bytes, send: Callable[[bytes], None], *, udp: bool) -> None:
        now = time.monotonic()
        query = parse_query(data)
        if query is None:
            self.malformed += 1
            if self.keep_log:
                self.log.append((now, None, None, "malformed"))
            return
        qid, flags, name, qtype, question = query
        self.queries += 1
        self._counts[name] += 1
        reply, outcome = self._answer(qid, flags, name, qtype, question, udp)
        if self.keep_log:
            self.log.append((now, name, qtype, outcome))
        if reply is None:
            return
        latency = self.latency
        delay = latency(self.rng) if callable(latency) else latency
        self.in_flight += 1
        if self.in_flight > self.peak_in_flight:
            self.peak_in_flight = self.in_flight
        if delay > 0 and self._loop is not None:
            timer: asyncio.TimerHandle | None = None

            def fire() -> None:
                self._timers.discard(timer)
                self._send(send, reply)

            timer = self._loop.call_later(delay, fire)
            self._timers.add(timer)
        else:
            self._send(send, reply)

    def _send(self, send: Callable[[bytes], None], reply: bytes) -> None:
        self.in_flight -= 1
        send(reply)

    def _answer(
        self, qid: int, flags: int, name: str, qtype: int, question: bytes, udp: bool
    ) -> tuple[bytes | None, str]:
        """The reply to one query and its outcome label (reply None: drop)."""
        fault = self._faults.get(name)
        if fault is None:
            if self.drop_rate > 0 and self.rng.random() < self.drop_rate:
                fault = "drop"
            elif self.servfail_rate > 0 and self.rng.random() < self.servfail_rate:
                fault = "servfail"
        if fault == "drop":
            return None, "drop"
        if fault == "servfail":
            return self._message(qid, flags, _RCODE_SERVFAIL, question, []), "servfail"
        if fault == "nxdomain":
            return self._message(qid, flags, _RCODE_NXDOMAIN, question, []), "nxdomain"
        if fault == "refused":
            return self._message(qid, flags, _RCODE_REFUSED, question, []), "refused"
        if fault == "garbage":
            # Claims one answer record, then stops mid-record: unparseable.
            head = _HEADER.pack(qid, _FLAG_QR | _FLAG_RA | (flags & _FLAG_RD), 1, 1, 0, 0)
            return head + question + b"\xc0\x0c\x00\x01\x00", "garbage"

        records: list[bytes] = []
        ttl = self.ttl
        current = name
        seen = {current}
        while current in self._cnames and not (qtype == QTYPE_CNAME and records):
            target = self._cnames[current]
            records.append(_rr(current, QTYPE_CNAME, ttl, encode_name(target)))
            if target in seen:  # a CNAME loop: a resolver gives up
                return self._message(qid, flags, _RCODE_SERVFAIL, question, []), "servfail"
            seen.add(target)
            current = target
        addrs = self._zone.addrs.get(current)
        if addrs is None and current not in self._cnames:
            if not records:
                return self._message(qid, flags, _RCODE_NXDOMAIN, question, []), "nxdomain"
            if qtype != QTYPE_CNAME:
                return self._message(qid, flags, _RCODE_NXDOMAIN, question, records), "nxdomain"
        if addrs is not None:
            if qtype == QTYPE_A:
                records.extend(_rr(current, QTYPE_A, ttl, a) for a in addrs[0])
            elif qtype == QTYPE_AAAA:
                records.extend(_rr(current, QTYPE_AAAA, ttl, a) for a in addrs[1])
        outcome = "answer" if any(_is_data(r, qtype) for r in records) else "nodata"
        reply = self._message(qid, flags, _RCODE_NOERROR, question, records)
        if udp and len(reply) > UDP_LIMIT:
            tc_flags = _FLAG_QR | _FLAG_RA | _FLAG_TC | (flags & _FLAG_RD)
            return _HEADER.pack(qid, tc_flags, 1, 0, 0, 0) + question, "truncated"
        return reply, outcome

    @staticmethod
    def _message(qid: int, flags: int, rcode: int, question: bytes, records: list[bytes]) -> bytes:
        out_flags = _FLAG_QR | _FLAG_RA | (flags & _FLAG_RD) | rcode
        return _HEADER.pack(qid, out_flags, 1, len(records), 0, 0) + question + b"".join(records)


def _rr(name: str, rtype: int, ttl: int, rdata: bytes) -> bytes:
    return encode_name(name) + _RR_FIXED.pack(rtype, _CLASS_IN, ttl, len(rdata)) + rdata


def _is_data(record: bytes, qtype: int) -> bool:
    """True when an encoded RR (uncompressed name) has type ``qtype``."""
    pos = 0
    while record[pos]:
        pos += record[pos] + 1
    return struct.unpack_from("!H", record, pos + 1)[0] == qtype
