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
from helpers.crawl import check_conservation

#: A page that starts with an XML declaration, in a charset read through the
#: str path (not handed to libxml2 as bytes): lxml refuses a str that declares
#: an encoding, so its links were lost until the declaration was dropped.
XML_DECLARED = b"<?xml version='1.0' encoding='shift_jis'?><html><a href=/found.html>x</a></html>"

#: The page whose parse is made to fail (no body known today makes lxml raise:
#: extract's failure path is reached by making the tree walk raise for it).
BAD_PATH = "/bad.html"


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


def test_a_page_with_an_xml_declaration_in_a_str_charset_keeps_its_links():
    page = extract(XML_DECLARED, "http://a.test/", "shift_jis")
    assert page.error is None
    assert page.links == ["http://a.test/found.html"]


def _failing_walk(monkeypatch):
    """Make the tree walk raise for :data:`BAD_PATH` (as lxml or a codec may on hostile input)."""
    import larbin_py.parse as parse_mod

    real = parse_mod._walk

    def walk(root, page, url, *args, **kwargs):
        if url.endswith(BAD_PATH):
            raise ValueError("a tree lxml could not build")
        return real(root, page, url, *args, **kwargs)

    monkeypatch.setattr(parse_mod, "_walk", walk)


def test_a_failed_parse_sets_page_error(monkeypatch):
    _failing_walk(monkeypatch)
    page = extract(b"<html><a href=/x.html>x</a></html>", "http://a.test" + BAD_PATH, None)
    assert page.error == "ValueError: a tree lxml could not build" and page.links == []


@pytest.mark.async_timeout(60)
async def test_a_page_lxml_cannot_parse_is_counted_as_parse_error(tmp_path, monkeypatch):
    from helpers.http_server import Server

    _failing_walk(monkeypatch)

    pages = {"/": (b"text/html", b'<html><a href="/bad.html">b</a><a href="/ok.html">o</a></html>'),
             BAD_PATH: (b"text/html", b'<html><a href="/never.html">n</a></html>'),
             "/ok.html": (b"text/html", b"<html>ok</html>")}
    async with Server(typed_server(pages)) as srv:
        # analysisWorkers 0: the parse monkeypatched above runs on the loop, in this process
        engine = Engine(loopback_config(tmp_path, srv.port).replace(analysis_workers=0), err=io.StringIO())
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
    from helpers.http_server import Server

    pages = {"/": (b'text/html; Charset="ISO-8859-1"', b'<html><a href="/caf\xe9.html">x</a></html>'),
             "/caf%C3%A9.html": (b"text/html", b"<html>ok</html>")}
    async with Server(typed_server(pages)) as srv:
        engine = Engine(loopback_config(tmp_path, srv.port), err=io.StringIO())
        summary = await engine.run()
    assert paths_asked(srv) == ["/robots.txt", "/", "/caf%C3%A9.html"]
    assert summary.pages == 2 and summary.page_errors == {}
