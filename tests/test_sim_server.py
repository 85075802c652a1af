"""The sim's HTTP server (and DNS wiring) on loopback."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import struct
import time

import pytest

from larbin_py.sim import Fault, Sim, SimConfig
from larbin_py.sim.client import Client
from larbin_py.sim.urls import split_url


def _host_with(sim, pred):
    for h in sim.web.hosts.values():
        if pred(h):
            return h
    raise AssertionError("no such host in the web")


@pytest.mark.async_timeout(30)
async def test_serves_every_host_by_host_header_on_its_ip():
    async with Sim(SimConfig(hosts=24, seed=1, hosts_per_ip=3)) as sim:
        assert sim.port > 0 and len(sim.ips) >= 8
        clients = {ip: await Client.connect(ip, sim.port) for ip in sim.ips}
        for h in sim.web.hosts.values():
            r = await clients[h.ip].get(f"{h.name}:{sim.port}", "/",
                                        headers=(("Accept-Encoding", "identity"),))
            assert r.status == 200
            assert r.body == sim.body(h.root(sim.port))
        # Host header case and a missing port do not matter; unknown hosts get 404
        h0 = sim.web.hosts["h0.sim.test"]
        r = await clients[h0.ip].get("H0.SIM.TEST", "/")
        assert r.status == 200 and r.body == sim.body(h0.root(sim.port))
        assert (await clients[h0.ip].get("nowhere.sim.test", "/")).status == 404
        assert (await clients[h0.ip].get("h0.sim.test", "/no/such/page.html")).status == 404
        for c in clients.values():
            await c.close()
        # never listening on an address outside the web's IPs
        with pytest.raises(OSError):
            await Client.connect("127.0.0.1", sim.port)
        # one connection per IP, each logged with its server IP
        assert set(sim.log.starts_by_ip()) == set(sim.ips)


@pytest.mark.async_timeout(30)
async def test_keep_alive_close_head_and_request_log(tmp_path):
    async with Sim(SimConfig(hosts=4, seed=2, gzip_ratio=0, chunked_ratio=0)) as sim:
        h = sim.web.hosts["h1.sim.test"]
        c = await Client.connect(h.ip, sim.port)
        pages = [pq for pq, r in h.resources.items() if r.status == 200]
        for pq in pages:
            r = await c.get(h.name, pq)
            assert r.status == 200 and r.body == h.resources[pq].body
        r = await c.get(h.name, "/", method="HEAD")
        assert r.status == 200 and int(r.headers["content-length"]) == len(h.resources["/"].body)
        r = await c.get(h.name, "/", headers=(("Connection", "close"),))
        assert r.headers.get("connection") == "close"
        assert await c.reader.read() == b""  # the server closed
        await c.close()
        await sim.log.wait_for(lambda log: all(x.closed is not None
                                               for x in log.connections.values()), 5)
        reqs = sim.log.requests
        assert len(reqs) == len(pages) + 2
        assert len({r.conn for r in reqs}) == 1 and len(sim.log.connections) == 1
        conn = sim.log.connections[reqs[0].conn]
        assert conn.server_ip == h.ip and conn.requests == len(reqs)
        assert all(r.client_port == conn.client_port == c.local_port for r in reqs)
        assert all(r.server_ip == h.ip and r.host == h.name and r.status == 200 for r in reqs)
        assert [r.target for r in reqs[: len(pages)]] == pages
        assert reqs[-2].method == "HEAD"
        assert conn.opened <= reqs[0].t <= reqs[-1].t <= conn.closed
        assert sim.log.max_open_per_ip() == {h.ip: 1}
        assert sim.log.urls()[0] == f"http://{h.name}:{sim.port}{pages[0]}"
        path = tmp_path / "log.jsonl"
        sim.log.dump_jsonl(str(path))
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert [r["type"] for r in rows] == ["connection"] + ["request"] * len(reqs)
        assert rows[1]["client_port"] == c.local_port and rows[1]["server_ip"] == h.ip


@pytest.mark.async_timeout(30)
async def test_connection_spans_show_overlap_per_ip():
    async with Sim(SimConfig(hosts=4, seed=2, hosts_per_ip=4)) as sim:
        h = sim.web.hosts["h0.sim.test"]
        a = await Client.connect(h.ip, sim.port)
        b = await Client.connect(h.ip, sim.port)
        await a.get(h.name, "/")
        await b.get(h.name, "/")
        await a.close()
        await sim.log.wait_for(lambda log: any(x.closed for x in log.connections.values()), 5)
        c = await Client.connect(h.ip, sim.port)
        await c.get(h.name, "/")
        assert sim.log.max_open_per_ip() == {h.ip: 2}
        spans = sim.log.spans_by_ip()[h.ip]
        assert len(spans) == 3 and all(o <= e for o, e in spans)
        assert len({r.client_port for r in sim.log.requests}) == 3
        await b.close()
        await c.close()


@pytest.mark.async_timeout(30)
async def test_gzip_and_chunked_bodies_decode_to_the_page():
    async with Sim(SimConfig(hosts=30, seed=3, gzip_ratio=0.5, chunked_ratio=0.5)) as sim:
        gz = _host_with(sim, lambda h: h.gzip and not h.chunked and not h.trap)
        ch = _host_with(sim, lambda h: h.chunked and not h.gzip and not h.trap)
        both = _host_with(sim, lambda h: h.chunked and h.gzip and not h.trap)
        plain = _host_with(sim, lambda h: not h.chunked and not h.gzip and not h.trap)
        accept = (("Accept-Encoding", "gzip, deflate"),)
        for host in (gz, ch, both, plain):
            c = await Client.connect(host.ip, sim.port)
            want = host.resources["/"].body
            r = await c.get(host.name, "/", headers=accept)
            if host.gzip:
                assert r.headers["content-encoding"] == "gzip"
                assert gzip.decompress(r.body) == want
            else:
                assert "content-encoding" not in r.headers and r.body == want
            if host.chunked:
                assert r.headers["transfer-encoding"] == "chunked" and "content-length" not in r.headers
                assert r.raw_body.endswith(b"0\r\n\r\n") and r.raw_body.count(b"\r\n") > 2
            r = await c.get(host.name, "/")  # no Accept-Encoding: identity
            assert "content-encoding" not in r.headers and r.body == want
            await c.close()


@pytest.mark.async_timeout(30)
async def test_robots_txt_served_as_profiled():
    async with Sim(SimConfig(hosts=200, seed=2)) as sim:
        seen = set()
        for h in sim.web.hosts.values():
            p = h.robots
            if p.kind in seen or h.trap:
                continue
            seen.add(p.kind)
            c = await Client.connect(h.ip, sim.port)
            if p.kind == "timeout":
                c.send(h.name, "/robots.txt")
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(c.read(), 0.3)
                await c.close()
                continue
            r = await c.get(h.name, "/robots.txt")
            if p.kind == "absent":
                assert r.status == 404
            elif p.kind == "error":
                assert r.status in (500, 503)
            elif p.kind == "forbidden":
                assert r.status in (401, 403)
            elif p.kind == "redirect":
                assert r.status == 301 and r.headers["location"] == "/robots-rules.txt"
                r2 = await c.get(h.name, r.headers["location"])
                assert r2.status == 200 and r2.body == p.rules_body
                assert r2.headers["content-type"] == "text/plain"
            else:
                assert r.status == 200 and r.body == p.body
                assert r.headers["content-type"] == "text/plain"
                if p.kind == "oversized":
                    assert len(r.body) > 500 * 1024
            await c.close()
        assert seen >= {"absent", "rules", "patterns", "allow", "delay", "agent", "error",
                        "timeout", "redirect", "oversized", "forbidden"}


@pytest.mark.async_timeout(30)
async def test_redirects_and_trap_pages_are_served():
    async with Sim(SimConfig(hosts=40, seed=5)) as sim:
        trap = sim.web.hosts["trap.sim.test"]
        c = await Client.connect(trap.ip, sim.port)
        r = await c.get(trap.name, "/cal/2031/02/")
        assert r.status == 200 and b"2031-02" in r.body and b"../03/" in r.body
        await c.close()
        redirects = [(h, pq, res) for h in sim.web.hosts.values()
                     for pq, res in h.resources.items() if res.kind == "redirect"]
        assert redirects
        for h, pq, res in redirects[:10]:
            c = await Client.connect(h.ip, sim.port)
            r = await c.get(h.name, pq)
            assert r.status == res.status and r.headers["location"] == res.location
            await c.close()


# -- faults at the server --------------------------------------------------------

def _fault_sim(*faults: Fault, **kw) -> Sim:
    return Sim(SimConfig(hosts=4, seed=9, gzip_ratio=0, chunked_ratio=0, faults=list(faults), **kw))


@pytest.mark.async_timeout(30)
async def test_status_faults_and_retry_after():
    async with _fault_sim(Fault("503", 1.0, hosts={"h0.sim.test"}, retry_after=7),
                          Fault("429", 1.0, hosts={"h1.sim.test"}, retry_after=2),
                          Fault("410", 1.0, hosts={"h2.sim.test"}, transient=False)) as sim:
        for name, status in (("h0.sim.test", 503), ("h1.sim.test", 429), ("h2.sim.test", 410)):
            h = sim.web.hosts[name]
            c = await Client.connect(h.ip, sim.port)
            r = await c.get(name, "/")
            assert r.status == status
            if status != 410:
                assert r.headers["retry-after"] == ("7" if status == 503 else "2")
            await c.close()
        # robots.txt is untouched unless the fault says so
        h = sim.web.hosts["h0.sim.test"]
        c = await Client.connect(h.ip, sim.port)
        r = await c.get(h.name, "/robots.txt")
        assert r.status != 503 or h.robots.kind == "error"
        await c.close()
        assert [r.fault for r in sim.log.requests[:3]] == ["503", "429", "410"]


@pytest.mark.async_timeout(30)
async def test_reset_close_stall_faults():
    async with _fault_sim(Fault("reset", 1.0, hosts={"h0.sim.test"}),
                          Fault("close", 1.0, hosts={"h1.sim.test"}),
                          Fault("stall", 1.0, hosts={"h2.sim.test"})) as sim:
        h0, h1, h2 = (sim.web.hosts[f"h{i}.sim.test"] for i in range(3))
        c = await Client.connect(h0.ip, sim.port)
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
            await c.get(h0.name, "/")
        await c.close()
        c = await Client.connect(h1.ip, sim.port)
        c.send(h1.name, "/")
        head = await c.reader.readuntil(b"\r\n\r\n")
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        with pytest.raises(asyncio.IncompleteReadError) as err:
            await c.reader.readexactly(length)
        assert len(err.value.partial) == length // 2
        await c.close()
        c = await Client.connect(h2.ip, sim.port)
        c.send(h2.name, "/")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(c.read(), 0.3)
        assert sim.server.in_flight["h2.sim.test"] == 1
        await c.close()
        await sim.log.wait_for(lambda log: sum(x.closed is not None
                                               for x in log.connections.values()) == 3, 5)
        assert sim.server.in_flight["h2.sim.test"] == 0
        assert [(r.host, r.status, r.fault) for r in sim.log.requests] == [
            ("h0.sim.test", 0, "reset"), ("h1.sim.test", 200, "close"), ("h2.sim.test", 0, "stall")]


@pytest.mark.async_timeout(30)
async def test_latency_drip_and_huge_faults():
    async with _fault_sim(Fault("latency", 1.0, hosts={"h0.sim.test"}, delay=0.2),
                          Fault("drip", 1.0, hosts={"h1.sim.test"}, delay=0.01, drip_bytes=500),
                          Fault("huge", 1.0, hosts={"h2.sim.test"}, size=3_000_000)) as sim:
        h0, h1, h2 = (sim.web.hosts[f"h{i}.sim.test"] for i in range(3))
        c = await Client.connect(h0.ip, sim.port)
        t0 = time.monotonic()
        r = await c.get(h0.name, "/")
        assert r.status == 200 and r.body == h0.resources["/"].body
        assert time.monotonic() - t0 >= 0.19
        await c.close()
        c = await Client.connect(h1.ip, sim.port)
        t0 = time.monotonic()
        c.send(h1.name, "/")
        first = await c.reader.read(100_000)
        assert len(first) <= 500
        rest = first
        want = h1.resources["/"].body
        while not rest.endswith(want):
            rest += await c.reader.read(100_000)
        n_pieces = -(-len(rest) // 500)
        assert time.monotonic() - t0 >= 0.01 * (n_pieces - 1) * 0.9
        r = await c.get(h1.name, "/p1.html" if "/p1.html" in h1.resources else "/")
        assert r.status == 200  # the connection stays usable after a drip
        await c.close()
        c = await Client.connect(h2.ip, sim.port)
        r = await c.get(h2.name, "/")
        assert r.status == 200 and len(r.body) == 3_000_000
        await c.close()


@pytest.mark.async_timeout(30)
async def test_load_model_slows_answers_and_records_peak_in_flight():
    cfg = dict(load={"h0.sim.test": (0.02, 0.05)}, hosts_per_ip=1)
    async with _fault_sim(**cfg) as sim:
        h = sim.web.hosts["h0.sim.test"]
        clients = [await Client.connect(h.ip, sim.port) for _ in range(5)]

        async def timed(c):
            t0 = time.monotonic()
            await c.get(h.name, "/")
            return time.monotonic() - t0

        times = sorted(await asyncio.gather(*(timed(c) for c in clients)))
        assert sim.peak_in_flight["h0.sim.test"] == 5
        assert times[-1] >= 0.02 + 0.05 * 5 - 0.01
        t_alone = await timed(clients[0])
        assert 0.02 + 0.05 - 0.01 <= t_alone < times[-1]
        for c in clients:
            await c.close()
        other = sim.web.hosts["h1.sim.test"]
        c = await Client.connect(other.ip, sim.port)
        t0 = time.monotonic()
        await c.get(other.name, "/")
        assert time.monotonic() - t0 < 0.07 and sim.server.peak_in_flight[other.name] == 1
        await c.close()


@pytest.mark.async_timeout(30)
async def test_load_model_with_a_capacity_shares_the_server_time():
    cfg = dict(load={"h0.sim.test": (0.1, 0.0, 2)}, hosts_per_ip=1)
    async with _fault_sim(**cfg) as sim:
        h = sim.web.hosts["h0.sim.test"]

        async def timed(n):
            clients = [await Client.connect(h.ip, sim.port) for _ in range(n)]

            async def one(c):
                t0 = time.monotonic()
                await c.get(h.name, "/")
                return time.monotonic() - t0

            times = await asyncio.gather(*(one(c) for c in clients))
            for c in clients:
                await c.close()
            return max(times)

        # within the capacity: the base time; beyond it: base * in_flight / capacity
        assert 0.1 - 0.01 <= await timed(2) < 0.25
        assert 0.1 * 6 / 2 - 0.01 <= await timed(6) < 0.6
        # the server's own record of the answer times it gave
        assert sorted(sim.server.load_delays) == pytest.approx(sorted([0.1, 0.1] + [0.1 * max(1, k / 2) for k in range(1, 7)]))


# -- DNS ---------------------------------------------------------------------------

def _a_query(name: str, qid: int = 0x1234) -> bytes:
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
    return q + struct.pack("!HH", 1, 1)


async def _resolve(port: int, name: str) -> list[str]:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, _a_query(name))
        data = await asyncio.wait_for(loop.sock_recv(sock, 4096), 5)
    finally:
        sock.close()
    ancount = struct.unpack_from("!H", data, 6)[0]
    # the A records are the 4-byte rdata at the end of each A answer: scan them
    ips, pos = [], 12
    while data[pos]:
        pos += data[pos] + 1
    pos += 5
    for _ in range(ancount):
        if data[pos] & 0xC0 == 0xC0:
            pos += 2
        else:
            while data[pos]:
                pos += data[pos] + 1
            pos += 1
        rtype, _cls, _ttl, rdlen = struct.unpack_from("!HHIH", data, pos)
        pos += 10
        if rtype == 1:
            ips.append(socket.inet_ntoa(data[pos:pos + 4]))
        pos += rdlen
    return ips


@pytest.mark.async_timeout(30)
async def test_dns_server_resolves_the_web():
    async with Sim(SimConfig(hosts=12, seed=4, dns=True)) as sim:
        assert sim.dns_port > 0
        for name in ("h0.sim.test", "h11.sim.test", "xn--bcher-kva.sim.test", "www.h3.sim.test"):
            assert await _resolve(sim.dns_port, name) == [sim.web.hosts[name].ip]
        assert await _resolve(sim.dns_port, "alias.sim.test") == [sim.web.hosts["h5.sim.test"].ip]
        assert await _resolve(sim.dns_port, "cdn.sim.test") == [sim.web.hosts["h1.sim.test"].ip]
        assert await _resolve(sim.dns_port, "dead.sim.test") == []
        assert sim.dns.queries == 7
        # the alias host is served under its own name on its target's IP
        alias = sim.web.hosts["alias.sim.test"]
        c = await Client.connect(alias.ip, sim.port)
        r = await c.get(alias.name, "/")
        assert r.status == 200 and r.body == sim.body(alias.root(sim.port))
        await c.close()
        assert split_url(sim.seeds[0])[1] == sim.port


@pytest.mark.async_timeout(60)
async def test_eight_keep_alive_clients_get_6000_answers_each_logged_once():
    """Server and 8 keep-alive clients on this one loop, one connection per IP
    and client: every answer is the page, every request logged once, on the
    connection it came on.  How fast: bench/sim.py (against nginx)."""
    async with Sim(SimConfig(hosts=100, seed=1)) as sim:
        targets = [(h.ip, h.name, pq) for h in sim.web.hosts.values()
                   for pq, r in h.resources.items() if r.status == 200]
        work = (targets * 10)[:6000]

        async def worker(items):
            conns, ok = {}, 0
            for ip, host, pq in items:
                c = conns.get(ip) or await Client.connect(ip, sim.port)
                conns[ip] = c
                r = await c.get(host, pq)
                ok += r.status == 200 and r.body == sim.web.hosts[host].resources[pq].body
            for c in conns.values():
                await c.close()
            return ok, len(conns)

        done = await asyncio.gather(*(worker(work[i::8]) for i in range(8)))
        assert sum(ok for ok, _ in done) == len(work)
        assert sorted((r.host, r.target) for r in sim.log.requests) == sorted((h, pq) for _ip, h, pq in work)
        assert len(sim.log.connections) == sum(n for _, n in done)  # kept alive: one per client and IP


@pytest.mark.async_timeout(30)
async def test_a_request_read_late_is_timed_by_its_arrival():
    """The sim's process busy when a request arrives (here: its loop blocked for
    80 ms) logs the kernel's arrival time, not its own late read; the same for
    the client's FIN, the connection's end.  A plain socket: its send and
    shutdown reach the kernel at once (uvloop's close would wait for the loop)."""
    loop = asyncio.get_running_loop()
    async with Sim(SimConfig(hosts=2, seed=3)) as sim:
        h = sim.web.hosts["h0.sim.test"]
        sock = socket.create_connection((h.ip, sim.port))
        sock.setblocking(False)
        try:
            await sim.log.wait_for(lambda log: len(log.connections) == 1, 5)  # accepted first
            sock.send(f"GET / HTTP/1.1\r\nHost: {h.name}\r\nAccept-Encoding: identity\r\n\r\n".encode())
            sent = time.monotonic()
            time.sleep(0.08)  # the loop the sim runs on is blocked: it reads the request late
            await sim.log.wait_for(lambda log: len(log.requests) == 1, 5)
            read = time.monotonic()
            r = sim.log.requests[0]
            assert read - sent >= 0.08
            assert abs(r.t - sent) <= 0.01, (r.t - sent, r.late)  # timed by the read: 0.08 s later
            # tcp_info counts in jiffies (4 ms at HZ 250): the same 10 ms slack as r.t's
            assert 0.06 <= r.late <= read - sent + 0.01
            assert abs(r.wall - (time.time() - (time.monotonic() - r.t))) <= 0.01
            answer = b""
            while b"</html>" not in answer:  # the answer, whole (the client acks it)
                answer += await loop.sock_recv(sock, 1 << 16)
            sock.shutdown(socket.SHUT_WR)  # the FIN
            fin = time.monotonic()
            time.sleep(0.08)  # read late too
            await sim.log.wait_for(lambda log: log.connections[r.conn].closed is not None, 5)
            assert abs(sim.log.connections[r.conn].closed - fin) <= 0.01
        finally:
            sock.close()
        # a request read at once keeps the read time (late 0.0)
        c = await Client.connect(h.ip, sim.port)
        before = time.monotonic()
        assert (await c.get(h.name, "/")).status == 200
        assert sim.log.requests[1].late == 0.0 and sim.log.requests[1].t >= before
        await c.close()


def test_too_close_names_the_pairs_under_the_floor_per_host_and_per_ip():
    from larbin_py.sim.log import Request, RequestLog

    log = RequestLog()

    def req(t, host, ip):
        return Request(t, t, 1, 1000, ip, 80, host, host, "GET", f"/{t}", 200)
    for r in (req(1.0, "a", "10.0.0.1"), req(1.5, "b", "10.0.0.1"), req(1.05, "c", "10.0.0.2"),
              req(1.3, "a", "10.0.0.1"), req(2.0, "c", "10.0.0.2")):
        log.add(r)
    def pairs(floor):
        return sorted((label, key, a.t, b.t) for label, key, a, b in log.too_close(floor))
    # per IP 10.0.0.1: 1.0, 1.3, 1.5 (a, a, b); per host a: 1.0, 1.3; c's two are 0.95 s apart
    assert pairs(0.25) == [("IP", "10.0.0.1", 1.3, 1.5)]
    assert pairs(0.35) == [("IP", "10.0.0.1", 1.0, 1.3), ("IP", "10.0.0.1", 1.3, 1.5), ("host", "a", 1.0, 1.3)]
    assert pairs(0.1) == []
    assert log.starts_by_ip() == {"10.0.0.1": [1.0, 1.3, 1.5], "10.0.0.2": [1.05, 2.0]}
