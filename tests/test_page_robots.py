"""Page-level robots rules (larbin_py.page_robots): X-Robots-Tag, meta robots, rel=canonical, loops."""

from __future__ import annotations

import time

import pytest

from larbin_py.page_robots import CanonicalLoops, HEAD_SCAN, agent_names, head_directives, header_directives, read

AGENTS = agent_names("larbin_py/0.1 (+https://example.org/)")
URL = "http://a.example/dir/page.html"


def hdr(*values: str):
    return [(b"content-type", b"text/html")] + [(b"x-robots-tag", v.encode()) for v in values]


@pytest.mark.parametrize("values,noindex,nofollow", [
    (("noindex",), True, False),
    (("nofollow",), False, True),
    (("NoIndex, NoFollow",), True, True),
    (("none",), True, True),
    (("all",), False, False),
    (("otherbot: noindex, nofollow",), False, False),  # another crawler's
    (("larbin_py: noindex",), True, False),  # our product token
    (("larbin: nofollow",), False, True),
    (("otherbot: noindex, larbin_py: nofollow",), False, True),  # an agent name applies up to the next
    (("unavailable_after: 25 Jun 2010 15:00:00 PST, noindex",), True, False),  # a valued directive is no agent
    (("max-snippet: 20", "noarchive"), False, False),
    (("otherbot: none", "nofollow"), False, True),  # each header value starts for every agent
])
def test_x_robots_tag(values, noindex, nofollow):
    d = header_directives(hdr(*values), AGENTS)
    assert (d.noindex, d.nofollow) == (noindex, nofollow)


def page(head: str, body: str = "<p>text</p>") -> bytes:
    return f"<!DOCTYPE html><html><head><title>t</title>{head}</head><body>{body}</body></html>".encode()


@pytest.mark.parametrize("head,noindex,nofollow", [
    ('<meta name="robots" content="noindex">', True, False),
    ('<META NAME="Robots" CONTENT="NOINDEX,NOFOLLOW">', True, True),
    ('<meta name="robots" content="none">', True, True),
    ('<meta name="larbin_py" content="noindex">', True, False),
    ('<meta name="otherbot" content="noindex">', False, False),
    ('<meta name="robots" content="index, follow">', False, False),
    ('<!-- <meta name="robots" content="noindex"> -->', False, False),  # a comment
    ('<script>document.write(\'<meta name="robots" content="noindex">\')</script>', False, False),
    ('<meta name="description" content="noindex">', False, False),
])
def test_meta_robots_in_the_head(head, noindex, nofollow):
    d = head_directives(page(head), URL, None, AGENTS)
    assert (d.noindex, d.nofollow) == (noindex, nofollow)


def test_a_meta_in_the_body_is_not_read():
    d = head_directives(page("", '<p>x</p><meta name="robots" content="noindex">'), URL, None, AGENTS)
    assert not d.noindex


def test_the_canonical_is_resolved_against_the_base_and_normalized():
    d = head_directives(page('<base href="/other/"><link rel="canonical" href="Canon%7e.html#frag">'
                             '<link rel="canonical" href="/second.html">'), URL, None, AGENTS)
    assert d.canonical == "http://a.example/other/Canon~.html"
    assert head_directives(page('<link rel="Canonical Alternate" href="HTTP://A.EXAMPLE:80/x">'), URL, None,
                           AGENTS).canonical == "http://a.example/x"
    for bad in ('<link rel="canonical" href="mailto:x@y">', '<link rel="canonical">',
                f'<link rel="canonical" href="/{"x" * 5000}">'):
        assert head_directives(page(bad), URL, None, AGENTS).canonical is None


def test_a_thousand_meta_robots_tags_cost_milliseconds_and_add_up():
    metas = '<meta name="robots" content="index, follow">' * 999 + '<meta name="robots" content="noindex">'
    body = page(metas, "<p>" + "x" * 4_000_000 + "</p>")
    t0 = time.perf_counter()
    d = read(hdr(), body, URL, None, AGENTS)
    assert time.perf_counter() - t0 < 0.5
    assert d.noindex and not d.nofollow


def test_the_head_is_read_in_its_first_256_kib_only():
    late = page("<title>" + "t" * HEAD_SCAN + "</title>" + '<meta name="robots" content="noindex">')
    t0 = time.perf_counter()
    assert not head_directives(late, URL, None, AGENTS).noindex
    assert time.perf_counter() - t0 < 0.5


def test_a_short_head_costs_the_same_on_a_long_page_and_long_heads_are_read_across_pieces():
    """Issue 37: the loop reads every HTML page's head; a 100 kB page with a
    head of a hundred bytes cost 6-12x a 700-byte page's read (the parser was
    fed 16 KiB at once and built it all), now about the same: the pieces
    grow from 256 bytes.  CPU time, the best of 5 runs of 30 reads.
    Directives met across the pieces' bounds (256 bytes doubled up to 16 KiB,
    then 16 KiB each) still count, and the first canonical wins."""
    links = "<div><ul>" + "".join(f'<li><a href="/p{i}.html">link {i}</a></li>' for i in range(40)) + "</ul></div>"
    small, big = page("", links[:600]), page("", links * 60)
    assert len(big) > 90_000

    def cost(body: bytes) -> float:
        best = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            for _ in range(30):
                head_directives(body, URL, None, AGENTS)
            best = min(best, time.process_time() - t0)
        return best

    head_directives(small, URL, None, AGENTS)
    assert cost(big) < 3 * cost(small)
    for at in (256, 768, 1792, 3840, 7936, 16128, 32512, 40_000):
        for shift in range(-30, 31, 6):
            pad = '<meta name="description" content="' + "d" * max(0, at + shift - 101) + '">'
            d = head_directives(page(pad + '<meta name="robots" content="nofollow">'
                                     '<link rel="canonical" href="/c1"><link rel="canonical" href="/c2">'),
                                URL, None, AGENTS)
            assert d.nofollow and not d.noindex and d.canonical == "http://a.example/c1", (at, shift)


def test_a_charset_libxml2_does_not_know_and_broken_bytes_never_raise():
    for body, charset in ((page('<meta name="robots" content="noindex">'), "x-unknown"),
                          (b"\xff\xfe\x00<\x00m\x00" * 1000, None), (b"<html><head><meta name=robots content=noindex", None)):
        read(hdr(), body, URL, charset, AGENTS)  # no exception
    assert read(hdr(), "<meta name=robots content=noindex><title>é</title>".encode("cp1252"), URL, "windows-1252",
                AGENTS).noindex


def test_a_canonical_loop_keeps_one_page():
    loops = CanonicalLoops()
    assert loops.follow("http://a/1", "http://a/2")  # 1 gives way to 2
    assert not loops.follow("http://a/2", "http://a/1")  # 2 names 1, which named 2: 2 is kept
    assert loops.follow("http://a/3", "http://a/4") and loops.follow("http://a/4", "http://a/5")
    assert not loops.follow("http://a/5", "http://a/3")  # a longer ring
    assert loops.follow("http://a/6", "http://a/2")  # a chain into a kept page is no loop


def test_the_canonical_memory_is_bounded():
    loops = CanonicalLoops(limit=100)
    for i in range(1000):
        loops.follow(f"http://a/{i}", f"http://a/c{i}")
    assert len(loops) == 100
