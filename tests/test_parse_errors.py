"""End-to-end: the Content-Type the fetcher parsed is the one extraction uses,
and a page lxml cannot parse is counted (``parseError``), never silently lost.
Against a small server on loopback.
"""

from __future__ import annotations

import io

import pytest

from larbin_py.engine import Engine
from larbin_py.parse import extract
from larbin_py.web.metrics import render_metrics
from larbin_py.web.source import check_snapshot

from test_crawl_limits import loopback_config, paths_asked
from test_e2e import check_conservation

#: A page lxml refuses: an XML declaration read through the str path (a charset
#: libxml2 is not handed as bytes) raises "Unicode strings with encoding
#: declaration are not supported".  The one such body known today.
UNPARSABLE = b"<?xml version='1.0' encoding='shift_jis'?><html><a href=/never.html>x</a></html>"


def typed_server(pages: dict[str, tuple[bytes, bytes]]):
    """A handler for test_http.Server: ``path -> (Content-Type, body)``; 404 otherwise."""

    async def handler(reader, writer, head):
        path = head.split(b" ", 2)[1].decode()
        if path in pages:
            ctype, body = pages[path]
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                         % (ctype, len(body), body))
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    return handler


def test_the_unparsable_body_sets_page_error():
    page = extract(UNPARSABLE, "http://a.test/", "shift_jis")
    assert page.error is not None and page.links == []


@pytest.mark.async_timeout(60)
async def test_a_page_lxml_cannot_parse_is_counted_as_parse_error(tmp_path):
    from test_http import Server

    pages = {"/": (b"text/html", b'<html><a href="/bad.html">b</a><a href="/ok.html">o</a></html>'),
             "/bad.html": (b"text/html; charset=Shift_JIS", UNPARSABLE),
             "/ok.html": (b"text/html", b"<html>ok</html>")}
    async with Server(typed_server(pages)) as srv:
        engine = Engine(loopback_config(tmp_path, srv.port), err=io.StringIO())
        summary = await engine.run()
    assert summary.stop_reason == "end of work"
    assert sorted(paths_asked(srv)) == ["/", "/bad.html", "/ok.html", "/robots.txt"]
    assert summary.pages == 3  # the page was fetched: it is a page, its links are what is lost
    assert summary.page_errors == {"parseError": 1}
    assert "pages unparsed  parseError 1" in summary.format()
    snap = engine.snapshot()
    assert check_snapshot(snap) == []
    assert snap["pages"]["errors"] == {"parseError": 1}
    assert 'larbin_pages_errors_total{reason="parseError"} 1' in render_metrics(snap)
    check_conservation(engine, summary)


@pytest.mark.async_timeout(60)
async def test_the_header_charset_parsed_by_the_fetcher_decodes_the_links(tmp_path):
    # "caf\xe9" is "café" only in the header's Latin-1 (as UTF-8, the default,
    # the byte is invalid and becomes U+FFFD): the link asked for tells which
    # charset extraction used.
    from test_http import Server

    pages = {"/": (b'text/html; Charset="ISO-8859-1"', b'<html><a href="/caf\xe9.html">x</a></html>'),
             "/caf%C3%A9.html": (b"text/html", b"<html>ok</html>")}
    async with Server(typed_server(pages)) as srv:
        engine = Engine(loopback_config(tmp_path, srv.port), err=io.StringIO())
        summary = await engine.run()
    assert paths_asked(srv) == ["/robots.txt", "/", "/caf%C3%A9.html"]
    assert summary.pages == 2 and summary.page_errors == {}
