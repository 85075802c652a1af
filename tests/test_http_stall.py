"""larbin_py.net.http: the loop standing still does not time out what it did not see;
a request that may no longer go out is not sent on its new connection.

A SIGSTOP, a suspended VM or a callback blocking the loop stops the
crawler but not the clock: when the loop runs again, the deadlines of the
fetches in flight have passed, though nothing could be read or sent
meanwhile.  The fetcher's deadlines must move by the stall, so that a
connect that completed in it, or an answer that comes a moment after it,
is not counted a ``timeout``; and they must stay deadlines: a server that
never answers still times out, even when the loop stalls again and again.

The servers here run in a thread of their own (a blocked loop must not
block them too); the stall is ``time.sleep`` on the loop.  Two tests
stall a whole crawl of the synthetic web (which runs on the same loop, so
every answer comes after the stall) with no retry to hide a loss: one in
the middle of the crawl, one right after the stop was asked (SIGTERM's
path), followed by --reload.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.engine import Engine
from larbin_py.net.http import Fetcher
from larbin_py.sim import Sim, SimConfig
from larbin_py.sim.faults import Fault
from helpers.crawl import check_conservation, make_config, page_requests
from helpers.http_server import Server, reply


class ThreadServer:
    """One-connection-at-a-time HTTP server on 127.0.0.1 in a thread.

    ``delay``: seconds between reading the request and answering; ``go``:
    when set to an Event, the answer waits for it; ``silent``: never answers.
    ``asked`` is set when a request head arrived, ``answered`` when the
    answer is written.
    """

    def __init__(self, *, delay: float = 0.0, go: threading.Event | None = None, silent: bool = False):
        self.delay, self.go, self.silent = delay, go, silent
        self.asked, self.answered, self.closing = threading.Event(), threading.Event(), threading.Event()
        self.requests = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.closing.set()
        self.thread.join(5)
        self.sock.close()

    def _run(self) -> None:
        while not self.closing.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(0.1)
                head = b""
                while b"\r\n\r\n" not in head and not self.closing.is_set():
                    try:
                        data = conn.recv(65536)
                    except TimeoutError:
                        continue
                    if not data:
                        break
                    head += data
                if b"\r\n\r\n" not in head:
                    continue
                self.asked.set()
                self.requests += 1
                if self.go is not None:
                    self.go.wait(10)
                if self.silent:
                    self.closing.wait(30)
                    continue
                time.sleep(self.delay)
                body = b"<html>waited</html>"
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (len(body), body))
                self.answered.set()
                self.closing.wait(0.5)  # (the client reads and closes)


def fetcher(**kw) -> Fetcher:
    args = dict(user_agent="larbin_py/test", connect_timeout=0.5, timeout_page=0.5, timeout_incr=2000,
                max_page_size=100_000)
    args.update(kw)
    return Fetcher(**args)


def url(srv: ThreadServer) -> str:
    return f"http://stall.test:{srv.port}/"


@pytest.mark.async_timeout(20)
async def test_an_answer_that_came_while_the_loop_stood_still_is_read():
    go = threading.Event()
    go.set()
    with ThreadServer(go=go) as srv:
        f = fetcher()
        task = asyncio.create_task(f.fetch(url(srv), "127.0.0.1", srv.port))
        assert await asyncio.to_thread(srv.answered.wait, 5)
        time.sleep(1.2)  # the answer waits in the buffer, well past the page deadline (0.5 s)
        res = await task
        await f.close()
    assert res.error is None and res.status == 200 and res.body == b"<html>waited</html>", res.error_detail


@pytest.mark.async_timeout(20)
async def test_a_fetch_in_flight_through_a_stall_keeps_the_time_it_had_left():
    """The request is out, the loop stands still past the page deadline, and the server answers
    0.4 s after the loop runs again (as when a worker gets SIGCONT): in time, for the page had
    nearly all of its 1 s left when the stall began (the stall is measured to a sweep interval)."""
    go = threading.Event()
    with ThreadServer(go=go, delay=0.4) as srv:
        f = fetcher(timeout_page=1.0)
        task = asyncio.create_task(f.fetch(url(srv), "127.0.0.1", srv.port))
        assert await asyncio.to_thread(srv.asked.wait, 5)
        time.sleep(1.5)
        go.set()
        res = await task
        stats = f.stats
        await f.close()
    assert res.error is None and res.status == 200 and res.body == b"<html>waited</html>", res.error_detail
    assert stats["stalls"] == 1 and stats["stalled_seconds"] >= 1.2
    assert res.elapsed >= 1.9  # the duration is the real one


@pytest.mark.async_timeout(20)
async def test_a_connect_that_spans_a_stall_keeps_its_time_and_the_page_after_it_too():
    """Stalled while connecting (the connect deadline would have passed) and longer than the page
    deadline too: the page's time counts from after the stall (less up to one sweep interval, the
    stall's measure), so an answer 0.5 s after it is in time for a page deadline of 1 s."""
    with ThreadServer(delay=0.5) as srv:
        f = fetcher(timeout_page=1.0)
        task = asyncio.create_task(f.fetch(url(srv), "127.0.0.1", srv.port))
        while f.stats["active_connections"] == 0:  # the connection is being opened
            await asyncio.sleep(0)
        time.sleep(2.0)  # past connect_timeout + timeout_page
        res = await task
        stats = f.stats
        await f.close()
    assert res.error is None and res.status == 200, (res.error, res.error_detail)
    assert stats["stalls"] >= 1


@pytest.mark.async_timeout(20)
async def test_a_silent_server_still_times_out_after_a_stall():
    with ThreadServer(silent=True) as srv:
        f = fetcher()
        t0 = time.monotonic()
        task = asyncio.create_task(f.fetch(url(srv), "127.0.0.1", srv.port))
        assert await asyncio.to_thread(srv.asked.wait, 5)
        time.sleep(1.0)
        res = await task
        took = time.monotonic() - t0
        await f.close()
    assert res.error == "timeout"
    assert 1.0 + 0.5 <= took < 1.0 + 0.5 + 1.0  # its 0.5 s, after the stall


@pytest.mark.async_timeout(30)
async def test_a_loop_that_stalls_again_and_again_still_times_out_a_silent_server():
    """Blocked 0.5 s out of every 0.55 s: the deadline stretches with the stalls, yet it comes
    (each sweep takes at least its interval off the time left)."""
    with ThreadServer(silent=True) as srv:
        f = fetcher()
        task = asyncio.create_task(f.fetch(url(srv), "127.0.0.1", srv.port))
        assert await asyncio.to_thread(srv.asked.wait, 5)
        t0 = time.monotonic()
        while not task.done():
            assert time.monotonic() - t0 < 15, "the page deadline never came"
            time.sleep(0.5)
            await asyncio.sleep(0.05)
        res = task.result()
        stats = f.stats
        await f.close()
    assert res.error == "timeout" and stats["stalls"] >= 1


async def fetches_in_flight(engine: Engine, run: asyncio.Task) -> None:
    """Until ``engine`` fetched 10 pages and has at least 3 in flight (a minute at most)."""
    deadline = time.monotonic() + 60
    while not (engine.frontier.fetched >= 10 and engine.frontier.in_flight >= 3):
        assert time.monotonic() < deadline and not run.done(), "no moment with fetches in flight"
        await asyncio.sleep(0.001)


@pytest.mark.async_timeout(120)
async def test_a_crawl_whose_loop_stands_still_mid_crawl_forgets_nothing_for_it(tmp_path):
    """The whole crawler (and the synthetic web, on the same loop) stands still 2.5 s with fetches
    in flight, past every connect and page deadline (1 s) and with no retry to hide a loss: every
    page is still fetched, none forgotten as ``timeout`` or ``noConnection``."""
    async with Sim(SimConfig(seed=3, hosts=30, pages_per_host=(3, 6), dns=True, trap=False)) as sim:
        config = make_config(tmp_path, sim, timeout_page=1.0, connect_timeout=1.0, retries=0, wait_duration=0.05)
        engine = Engine(config)
        run = asyncio.create_task(engine.run())
        await fetches_in_flight(engine, run)
        in_flight = engine.frontier.in_flight
        time.sleep(2.5)
        summary = await run
        truth = sim.truth(crawl_rules(config, sim.seeds))
        requested = {r.url for r in page_requests(sim)}
    assert requested == truth.must_request, sorted(truth.must_request ^ requested)[:10]
    assert not {"timeout", "noConnection"} & set(summary.forgotten), (in_flight, summary.forgotten)
    assert summary.pages == len(truth.saved)
    check_conservation(engine, summary)
    assert summary.stalls == 1 and summary.stalled_seconds >= 2.0
    assert "loop stalls     1 (" in summary.format()


@pytest.mark.async_timeout(90)
async def test_a_stall_during_the_stop_ends_the_fetches_in_flight_and_the_reload_asks_the_rest_once(tmp_path):
    """The stop is asked (what SIGTERM does) with fetches in flight, and the loop then stands
    still 2.5 s, past every page deadline (1 s) but within the stop's grace.  Every page answers
    0.15 s after its request (a timer of the sim, on the same loop), so the answers of the fetches
    in flight come after the stall: they still end with their pages (none forgotten as
    ``timeout``, none cut by the stop), and --reload asks every page the stopped crawl did not
    fetch, each once."""
    late = Fault("latency", 1.0, delay=0.15)
    async with Sim(SimConfig(seed=4, hosts=30, pages_per_host=(3, 6), dns=True, trap=False, faults=[late])) as sim:
        config = make_config(tmp_path, sim, timeout_page=1.0, connect_timeout=1.0, retries=0, wait_duration=0.05,
                             can_reload=True)
        engine = Engine(config)
        run = asyncio.create_task(engine.run())
        await fetches_in_flight(engine, run)
        fetched_at_stop, in_flight = engine.frontier.fetched, engine.frontier.in_flight
        engine.request_stop("the test's stop")
        time.sleep(2.5)
        stopped = await run
        assert stopped.failed is None and stopped.stalls == 1, (stopped.failed, stopped.stalls)
        assert not {"timeout", "noConnection"} & set(stopped.forgotten), (in_flight, stopped.forgotten)
        assert stopped.in_flight == 0 and stopped.pages >= fetched_at_stop  # none cut by the stop
        before = list(page_requests(sim))
        sim.log.clear()
        summary = await Engine(config, reload=True).run()
        after = list(page_requests(sim))
        truth = sim.truth(crawl_rules(config, sim.seeds))
    assert summary.failed is None
    requests = [r.url for r in before + after]
    assert set(requests) == truth.must_request, sorted(truth.must_request ^ set(requests))[:10]
    assert len(requests) == len(set(requests)), "a page asked twice across the stop"
    assert summary.pages == len(truth.saved)  # the reloaded crawl counts on from the stopped one


@pytest.mark.async_timeout(20)
async def test_a_request_that_may_no_longer_go_out_is_not_sent_on_its_new_connection():
    """``may_send`` (a worker's IP-lease deadline) is asked once a new connection is open: refused,
    the connection closes and nothing reaches the server (``notSent``); a kept-alive connection
    taken again is not asked (the engine's gate was asked as the request started)."""
    go = threading.Event()
    go.set()
    with ThreadServer(go=go) as srv:
        f = fetcher()
        asked: list[str] = []

        def refuse(ip: str) -> bool:
            asked.append(ip)
            return False

        f.may_send = refuse
        res = await f.fetch(url(srv), "127.0.0.1", srv.port)
        stats = f.stats
        assert res.error == "notSent" and res.status is None and asked == ["127.0.0.1"], res.error_detail
        assert stats["errors"] == {"notSent": 1} and stats["open_connections"] == 0
        f.may_send = lambda ip: True
        res = await f.fetch(url(srv), "127.0.0.1", srv.port)
        await f.close()
    assert res.error is None and res.status == 200
    assert srv.requests == 1  # the refused one never reached it


async def test_a_kept_alive_connection_is_reused_without_asking_may_send():
    async with Server(reply(b"<html>again</html>")) as srv:
        f = fetcher()
        calls: list[str] = []
        f.may_send = lambda ip: calls.append(ip) or True
        first = await f.fetch(f"http://k.test:{srv.port}/a", "127.0.0.1", srv.port)
        again = await f.fetch(f"http://k.test:{srv.port}/b", "127.0.0.1", srv.port)
        await f.close()
    assert first.error is None and again.error is None and again.conn_reused
    assert calls == ["127.0.0.1"]  # asked for the new connection only

