"""pageNoDuplicate's table (larbin_py.page_digests): bounded, and kept across --reload."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from larbin_py.config import parse_config_text
from larbin_py.engine import Engine
from larbin_py.page_digests import MAX_PAGE_DIGESTS, PageDigests


def test_a_body_met_again_names_the_first_url():
    t = PageDigests()
    assert t.first_of(b"same", "http://a/1") is None
    assert t.first_of(b"other", "http://a/2") is None
    assert t.first_of(b"same", "http://a/3") == "http://a/1"
    assert len(t) == 2 and MAX_PAGE_DIGESTS >= 10_000


def test_past_the_bound_the_least_recently_met_is_forgotten():
    t = PageDigests(limit=3)
    for i in range(3):
        t.first_of(b"page %d" % i, f"http://a/{i}")
    assert t.first_of(b"page 0", "http://a/again") == "http://a/0"  # page 0 met again: most recent
    assert t.first_of(b"page 3", "http://a/3") is None  # the bound: page 1 goes
    assert len(t) == 3 and t.evicted == 1
    # a duplicate of a page forgotten is taken as new (and remembered again)
    assert t.first_of(b"page 1", "http://a/1-again") is None
    assert t.first_of(b"page 0", "http://a/x") == "http://a/0"


def test_the_state_round_trips_in_order_and_damaged_records_are_counted():
    t = PageDigests(limit=10)
    for i in range(5):
        t.first_of(b"page %d" % i, f"http://a/{i}?q=a b")
    state = t.to_state()
    assert all(len(s.split(" ", 1)[0]) == 16 for s in state)
    u = PageDigests(limit=10)
    assert u.restore(state + ["zz not-hex", "0011", 7, "00112233445566 short-digest"]) == 4
    assert u.to_state() == state
    assert u.first_of(b"page 2", "http://b/") == "http://a/2?q=a b"
    small = PageDigests(limit=2)  # a smaller bound keeps the most recent
    assert small.restore(state) == 0 and small.to_state() == state[-2:]


PAGES = {
    "/": b'<html><a href="/a">a</a><a href="/b">b</a><a href="/c">c</a></html>',
    "/a": b"<html>the same body</html>",
    "/b": b"<html>the same body</html>",
    "/c": b"<html>the same body</html>",
}


async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ")[1].decode()
            body = PAGES.get(path)
            status = b"200 OK" if body is not None else b"404 Not Found"
            body = body or b""
            writer.write(b"HTTP/1.1 %s\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
                         % (status, len(body), body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass


@pytest.mark.async_timeout(60)
async def test_the_table_is_kept_across_reload(tmp_path):
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    base = parse_config_text("", require_start_urls=False)
    config = base.replace(start_urls=(f"http://127.0.0.1:{port}/",), save_dir=str(tmp_path / "save"),
                          state_dir=str(tmp_path / "state"), http_port=0, output_mode="stats",
                          wait_duration=0.02, private_networks="allow", page_no_duplicate=True,
                          fetch_info=True, limit_page=2)
    try:
        first = io.StringIO()
        summary = await Engine(config, out=first, err=io.StringIO()).run()
        assert summary.pages == 2 and "200 ok" in first.getvalue()
        with open(tmp_path / "state" / "checkpoint.json") as f:
            saved = json.load(f)["engine"]["page_digests"]
        assert len(saved) == 2 and saved[-1].endswith(f":{port}/a")
        second = io.StringIO()
        summary = await Engine(config.replace(limit_page=0), reload=True, out=second,
                               err=io.StringIO()).run()
    finally:
        server.close()
    assert summary.stop_reason == "end of work" and summary.pages == 4
    # /b and /c: duplicates of /a, fetched before the reload
    lines = [ln for ln in second.getvalue().splitlines() if ln.startswith("200 ")]
    assert [ln.split()[1] for ln in lines] == ["duplicate", "duplicate"], lines
