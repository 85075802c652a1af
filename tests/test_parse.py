"""larbin_py.parse: links, directives and character sets of HTML pages."""

from __future__ import annotations

import random

import pytest

from larbin_py.net.decode import media_type
from larbin_py.parse import HTML_TYPES, detect_charset, extract

URL = "http://a.test/dir/page.html"


def charset_of(ctype: str | None) -> str | None:
    """The header's charset as the fetcher hands it to extract (FetchResult.charset)."""
    return media_type(ctype.encode("latin-1"))[1] if ctype is not None else None


def links(html: str | bytes, url: str = URL, ctype: str | None = "text/html; charset=utf-8", **kw):
    body = html.encode("utf-8") if isinstance(html, str) else html
    return extract(body, url, charset_of(ctype), **kw).links


def test_every_link_source_in_document_order():
    html = """<html><head><link rel="next" href="n.html"><link rel="stylesheet" href="s.css">
    <link rel="Alternate nofollow" href="alt-nf.html"><link rel="prev" href="/p.html"></head>
    <body><a href="a.html">a</a><map><area href="area.html"></map>
    <frameset><frame src="frame.html"></frameset><iframe src="//b.test/if"></iframe>
    <img src="i.png"><a>no href</a><a href="">self</a></body></html>"""
    assert links(html) == [
        "http://a.test/dir/n.html", "http://a.test/p.html", "http://a.test/dir/a.html",
        "http://a.test/dir/area.html", "http://a.test/dir/frame.html", "http://b.test/if",
        "http://a.test/dir/page.html",
    ]


def test_frames_and_images_are_named_as_embeds():
    html = '<a href="a.html">a</a><frame src="f.html"><iframe src="//b.test/if"></iframe><img src="i.png">'
    assert extract(html.encode(), URL, "utf-8").embeds == {"http://a.test/dir/f.html", "http://b.test/if"}
    page = extract(html.encode(), URL, "utf-8", get_images=True)
    assert page.embeds == {"http://a.test/dir/f.html", "http://b.test/if", "http://a.test/dir/i.png"}
    assert set(page.embeds) < set(page.links)
    assert extract(b'<a href="a.html">a</a>', URL, "utf-8").embeds == frozenset()


def test_images_only_when_asked():
    html = '<img src="i.png"><a href="x.html">x</a>'
    assert links(html) == ["http://a.test/dir/x.html"]
    assert links(html, get_images=True) == ["http://a.test/dir/i.png", "http://a.test/dir/x.html"]


def test_base_href_first_one_resolved_against_the_page():
    html = '<base href="../other/"><base href="http://c.test/"><a href="x">x</a>'
    page = extract(html.encode(), URL, None)
    assert page.base == "http://a.test/other/"
    assert page.links == ["http://a.test/other/x"]
    # a base that is not http(s) is ignored
    assert links('<base href="javascript:x"><a href="y">y</a>') == ["http://a.test/dir/y"]
    # a base without href does not count as the first
    assert links('<base target="_top"><base href="/b/"><a href="y">y</a>') == ["http://a.test/b/y"]


def test_nofollow_links_are_counted_not_followed():
    html = ('<a rel="NoFollow" href="1">1</a><a rel="external nofollow noopener" href="2">2</a>'
            '<a rel="noopener" href="3">3</a><area rel=nofollow href="4">')
    page = extract(html.encode(), URL, None)
    assert page.links == ["http://a.test/dir/3"]
    assert page.nofollow_links == 3


@pytest.mark.parametrize("content, nofollow, noindex", [
    ("nofollow", True, False), ("NOINDEX, nofollow", True, True), ("none", True, True),
    ("noindex", False, True), ("index,follow", False, False),
])
def test_meta_robots(content, nofollow, noindex):
    for name in ("robots", "ROBOTS", "larbin_py"):
        page = extract(f'<meta name="{name}" content="{content}"><a href=x>x</a>'.encode(), URL, None)
        assert (page.meta_nofollow, page.meta_noindex) == (nofollow, noindex)
    other = extract(f'<meta name="googlebot" content="{content}">'.encode(), URL, None)
    assert (other.meta_nofollow, other.meta_noindex) == (False, False)


def test_canonical_and_refresh():
    page = extract(b'<link rel="canonical" href="/canon.html">'
                   b'<meta http-equiv="Refresh" content="5; URL=\'next.html\'">', URL, None)
    assert page.canonical == "http://a.test/canon.html"
    assert page.refresh == "http://a.test/dir/next.html"
    assert page.links == ["http://a.test/dir/next.html"]  # canonical is not a link to follow
    for content, want in [("0;url=a.html", "http://a.test/dir/a.html"), ("3", None),
                          ("1, http://x.test/", "http://x.test/"), ("0; URL = b.html ", "http://a.test/dir/b.html")]:
        got = extract(f'<meta http-equiv="refresh" content="{content}">'.encode(), URL, None).refresh
        assert got == want, content


def test_unfollowable_skipped_fragments_dropped_duplicates_once():
    html = ('<a href="mailto:a@b">m</a><a href="javascript:go()">j</a><a href="data:,x">d</a>'
            '<a href="x.html#one">1</a><a href="x.html#two">2</a><a href="./x.html">3</a>'
            '<a href="ftp://f.test/">f</a><a href="  x.html  ">4</a>')
    assert links(html) == ["http://a.test/dir/x.html"]


def test_entities_in_attributes():
    assert links('<a href="q?a=1&amp;b=2&lt">x</a>') == ["http://a.test/dir/q?a=1&b=2%3C"]


@pytest.mark.parametrize("ctype, body, want", [
    ("text/html; charset=ISO-8859-1", b"<meta charset=utf-8>", "cp1252"),  # header wins
    ("text/html; charset=bogus", b"<meta charset=shift_jis>", "shift_jis"),  # unknown header: next source
    ('Text/HTML; Charset="KOI8-R"', b"\xef\xbb\xbf<meta charset=utf-8>", "koi8-r"),  # header over BOM
    ("text/html; charset=utf-8", b"\xff\xfe<\x00h\x00", "utf-8"),
    ("text/html", b"\xef\xbb\xbf<html>", "utf-8"),  # BOM
    ("text/html", b"\xff\xfe<\x00h\x00", "utf-16-le"),
    (None, b'<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">', "cp1252"),
    (None, b"<html><meta charset='nonsense'>", "utf-8"),
    (None, b"", "utf-8"),
])
def test_charset_sources_and_priority(ctype, body, want):
    assert detect_charset(body, charset_of(ctype)) == want


def test_latin1_page_with_non_ascii_href():
    body = '<a href="caf\u00e9.html">x</a>'.encode("latin-1")
    assert links(body, ctype="text/html; charset=iso-8859-1") == ["http://a.test/dir/caf%C3%A9.html"]
    sjis = '<meta charset="shift_jis"><a href="\u65e5\u672c.html">x</a>'.encode("shift_jis")
    assert links(sjis, ctype="text/html") == ["http://a.test/dir/%E6%97%A5%E6%9C%AC.html"]


def test_title():
    assert extract(b"<title> Hello </title>", URL, None).title == "Hello"
    # the first title in document order, wherever it stands, and only it
    page = extract(b"<a href=x>x</a><body><title>One</title><title>Two</title>", URL, None)
    assert page.title == "One" and page.links == ["http://a.test/dir/x"]
    assert extract(b"<title></title><title>Two</title>", URL, None).title is None
    assert extract(b"<p>no title</p>", URL, None).title is None


@pytest.mark.parametrize("body", [
    b"", b"   \n", b"\x00" * 1000, b"<", b"<a href=", b"<a href='x", b"<!-- never closed",
    b"<?xml version='1.0' encoding='bogus'?><html><a href=ok>x</a>",
    b"<html>&#xZZ; &copy &#99999999999; &bogus;<a href=ok>x</a>",
    b"<![CDATA[ <a href=x> ]]><a href=ok>",
    b"\xff\xfe\x00\xd8<a href=x>",  # a lone surrogate in UTF-16
    b"<a href=\"\x00\x01ok\">x</a>",
])
def test_hostile_small_inputs_never_raise(body):
    page = extract(body, URL, None)
    assert page.error is None or isinstance(page.error, str)
    assert all(link.startswith("http://") for link in page.links)


def test_random_bytes_never_raise():
    rng = random.Random(11)
    for _ in range(300):
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 3000)))
        for ctype in (None, "text/html; charset=utf-16", "text/html; charset=shift_jis"):
            page = extract(body, URL, charset_of(ctype))
            assert isinstance(page.links, list)


def test_deep_nesting_keeps_links():
    body = b'<a href="first">f</a>' + b"<div>" * 100_000 + b'<a href="deep">d</a>' + b"</div>" * 10
    assert links(body) == ["http://a.test/dir/first", "http://a.test/dir/deep"]


def test_huge_attribute_is_skipped_not_fatal():
    body = b'<a href="' + b"x" * 10_000_000 + b'">big</a><a href="small">s</a>'
    assert links(body) == ["http://a.test/dir/small"]


def test_many_links_all_found():
    body = "".join(f'<p><a href="/p{i}.html">{i}</a></p>' for i in range(5000)).encode()
    assert len(links(body)) == 5000


def test_html_types_are_media_types_as_the_fetcher_gives_them():
    assert media_type(b"Text/HTML; charset=utf-8")[0] in HTML_TYPES
    assert media_type(b"application/xhtml+xml")[0] in HTML_TYPES
    assert media_type(b"text/plain")[0] not in HTML_TYPES


def test_invalid_utf8_and_nul_do_not_hide_later_links():
    body = b'<a href=a>x</a>\xff\xfe\xc3<a href=b>y</a>\x00<a href=c>z</a>'
    assert links(body) == ["http://a.test/dir/a", "http://a.test/dir/b", "http://a.test/dir/c"]
    cp = '<a href="caf\u00e9">y</a> \u20ac'.encode("cp1252")
    assert links(cp, ctype="text/html; charset=windows-1252") == ["http://a.test/dir/caf%C3%A9"]


IDS_PAGE = ('<html><body><div id="intro"><a href="/a">a</a></div><div id="intro"><a href="/b">b</a></div>'
            '<p id="end"><a href="c">c</a></p></body></html>')


@pytest.mark.parametrize("ctype", ["text/html; charset=utf-8", "text/html; charset=iso-8859-2"])
def test_a_kept_tree_has_its_ids_and_the_links_are_the_same_without_one(ctype):
    # utf-8: libxml2 reads the bytes; iso-8859-2: the text is decoded first (the str parser)
    body = IDS_PAGE.encode("utf-8")
    kept = extract(body, URL, charset_of(ctype), keep_root=True)
    plain = extract(body, URL, charset_of(ctype))
    assert plain.root is None
    assert plain.links == kept.links == ["http://a.test/a", "http://a.test/b", "http://a.test/dir/c"]
    # XPath's id() reads the table of ids: an analyzer given the tree finds the element
    assert [el.tag for el in kept.root.xpath("id('end')")] == ["p"]
