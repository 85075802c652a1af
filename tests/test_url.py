"""larbin_py.url: WHATWG resolution, the crawler's canonical form, fingerprints."""

from __future__ import annotations

import json
import os
import random

import pytest

from larbin_py.url import authority_of, fingerprint, fingerprints, host_of, normalize, normalize_links

# The WHATWG cases (tests/data/conformance; tests/test_conformance.py scores them one by one).
CASES = os.path.join(os.path.dirname(__file__), "data", "conformance", "url_cases.json")


@pytest.mark.parametrize("href, base, want", [
    # whitespace: C0 and space stripped at the ends, tab/newline removed anywhere
    ("  \t http://a.test/x \n", None, "http://a.test/x"),
    ("http://a.te\tst/p\na\rth", None, "http://a.test/path"),
    ("\x00\x1fhttp://a.test/\x01", None, "http://a.test/"),
    # backslashes are slashes; any number of slashes after the scheme
    ("http:\\\\a.test\\b\\c", None, "http://a.test/b/c"),
    ("http:///a.test/", None, "http://a.test/"),
    ("https:a.test", None, "https://a.test/"),
    # relative forms
    ("b/c", "http://a.test/x/y", "http://a.test/x/b/c"),
    ("../c", "http://a.test/x/y/z", "http://a.test/x/c"),
    ("/c", "http://a.test/x/y", "http://a.test/c"),
    ("//b.test/c", "https://a.test/x", "https://b.test/c"),
    ("?q=1", "http://a.test/x/y?old", "http://a.test/x/y?q=1"),
    ("", "http://a.test/x?q#f", "http://a.test/x?q"),
    ("#frag", "http://a.test/x?q", "http://a.test/x?q"),
    ("http:y", "http://a.test/x/", "http://a.test/x/y"),
    ("http:/y", "http://a.test/x/", "http://a.test/y"),
    # dot segments, plain and encoded
    ("/a/./b/../c", None, None),
    ("http://a.test/a/./b/../c", None, "http://a.test/a/c"),
    ("http://a.test/a/%2e/b/%2E%2e/c", None, "http://a.test/a/c"),
    ("http://a.test/a/b/c/.%2E/d", None, "http://a.test/a/b/d"),
    ("http://a.test/a/.%2e/.%2E/c/..", None, "http://a.test/"),
    ("http://a.test/../../x", None, "http://a.test/x"),
    # percent-encoding sets
    ("http://a.test/a b\"<>`{}|^", None, "http://a.test/a%20b%22%3C%3E%60%7B%7D|%5E"),
    ("http://a.test/p?a b\"'<>", None, "http://a.test/p?a%20b%22%27%3C%3E"),
    ("http://a.test/caf\u00e9?x=\u00e9", None, "http://a.test/caf%C3%A9?x=%C3%A9"),
    # canonical escapes: unreserved decoded, others upper-cased (path); query as is
    ("http://a.test/%7euser/%41%2f%3a", None, "http://a.test/~user/A%2F%3A"),
    ("http://a.test/p?x=%7e%2f", None, "http://a.test/p?x=%7e%2f"),
    # case, default port, empty path, fragment
    ("HTTP://A.Test:80", None, "http://a.test/"),
    ("https://a.test:443/x#y", None, "https://a.test/x"),
    ("http://a.test:8080/", None, "http://a.test:8080/"),
    ("http://a.test:0080/", None, "http://a.test/"),
    # IPv4 in all its forms
    ("http://0x7f.1/", None, "http://127.0.0.1/"),
    ("http://2130706433/", None, "http://127.0.0.1/"),
    ("http://0177.0.0.1/", None, "http://127.0.0.1/"),
    ("http://127.1/", None, "http://127.0.0.1/"),
    ("http://1.2.3.4./", None, "http://1.2.3.4/"),
    # IPv6
    ("http://[::1]:8080/", None, "http://[::1]:8080/"),
    ("http://[0:0:0:0:0:0:0:1]/", None, "http://[::1]/"),
    ("http://[::ffff:1.2.3.4]/", None, "http://[::ffff:102:304]/"),
    ("http://[2001:DB8::A]/", None, "http://[2001:db8::a]/"),
    # IDNA and percent-encoded hosts
    ("http://b\u00fccher.test/", None, "http://xn--bcher-kva.test/"),
    ("http://B\u00dcCHER.test/", None, "http://xn--bcher-kva.test/"),
    ("http://%62%C3%BCcher.test/", None, "http://xn--bcher-kva.test/"),
    ("http://\uff21.test/", None, "http://a.test/"),  # full-width A maps to a
    # userinfo is kept, encoded
    ("http://us er:p@ss@a.test/", None, "http://us%20er:p%40ss@a.test/"),
])
def test_resolution_and_canonical_form(href, base, want):
    assert normalize(href, base) == want


@pytest.mark.parametrize("href, base", [
    ("mailto:someone@a.test", None),
    ("javascript:void(0)", "http://a.test/"),
    ("JavaScript:alert(1)", "http://a.test/"),
    ("data:text/html,<b>x</b>", "http://a.test/"),
    ("ftp://a.test/pub/", None),
    ("file:///etc/passwd", "http://a.test/"),
    ("tel:+15550100", "http://a.test/"),
    ("relative/without/base", None),
    ("http://", None),
    ("http://a.test:65536/", None),
    ("http://a.test:8x/", None),
    ("http://a b.test/", None),
    ("http://a<b.test/", None),
    ("http://a%00b.test/", None),
    ("http://1.2.3.256/", None),
    ("http://0x100000000/", None),
    ("http://[1::2::3]/", None),
    ("http://[::1/", None),
    ("http://user@/", None),
    ("x", "not a url"),
    ("x", "mailto:a@b"),
])
def test_not_crawlable_gives_none(href, base):
    assert normalize(href, base) is None


def test_max_length():
    long = "http://a.test/" + "x" * 3000
    assert normalize(long) is None
    assert normalize(long, max_length=4000) == long
    assert normalize("http://a.test/x", max_length=15) == "http://a.test/x"
    assert normalize("http://a.test/xy", max_length=15) is None


def test_normalize_is_idempotent_on_its_output():
    rng = random.Random(3)
    parts = ["a", "%7e", "%2f", "..", ".", "b c", "\u00e9", "?", "#", "//", "\\", "%41", "q=1&r=%2F"]
    for _ in range(2000):
        href = "".join(rng.choice(parts) for _ in range(rng.randint(1, 8)))
        once = normalize(href, "http://Host.test:80/dir/page?x")
        if once is not None:
            assert normalize(once) == once, href


def test_never_raises_on_any_input():
    rng = random.Random(7)
    alphabet = "ab:/\\?#%@[]. \t\n\x00\x7f\u00e9\ud800\uffff0123456789xX-_~!$&'()*+,;="
    for _ in range(5000):
        href = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        base = rng.choice([None, "http://a.test/b/c", "https://[::1]:8443/x?y", "http://%zz/", "junk"])
        for h in (href, "http://" + href, "//" + href):
            result = normalize(h, base)
            assert result is None or result.startswith(("http://", "https://"))
    assert normalize("http://a.test/" + "\ud800") is not None  # lone surrogate: U+FFFD, no crash
    assert normalize("http://" + "a." * 10000 + "test/") is None  # too long, no crash


def test_fingerprint_is_stable_64_bit_and_distinct():
    # Golden values: a change of algorithm would split the seen sets of old
    # crawls (--reload), so it must show up here.
    assert fingerprint("http://a.test/") == 0x11A0A897F0977205
    assert fingerprint("https://b.test/x?y=1") == 0x9320F7507B16FB6E
    values = {fingerprint(f"http://a.test/{i}") for i in range(10000)}
    assert len(values) == 10000
    assert all(0 <= v < 2**64 for v in values)
    urls = ["http://a.test/", "https://b.test/x?y=1", "http://a.test/\ud800", "http://\u00e9.test/"]
    assert fingerprints(urls) == [fingerprint(u) for u in urls]
    assert fingerprints([]) == []


@pytest.mark.parametrize("url, parts", [
    ("http://a.test/x?y", ("http", "a.test", "a.test", 80, "/x?y")),
    ("https://a.test", ("https", "a.test", "a.test", 443, "")),
    ("http://a.test?q#f", ("http", "a.test", "a.test", 80, "?q#f")),
    ("http://a.test#f", ("http", "a.test", "a.test", 80, "#f")),
    ("http://a.test:8080", ("http", "a.test:8080", "a.test", 8080, "")),
    ("http://a.test:/x", ("http", "a.test:", "a.test", 80, "/x")),      # an empty port is the default
    ("http://a.test:80/", ("http", "a.test:80", "a.test", 80, "/")),    # written as written
    ("https://u:p@[::1]:8443/", ("https", "[::1]:8443", "[::1]", 8443, "/")),
    ("http://[::ffff:1.2.3.4]/", ("http", "[::ffff:1.2.3.4]", "[::ffff:1.2.3.4]", 80, "/")),
    ("http://[::1]?x", ("http", "[::1]", "[::1]", 80, "?x")),
    ("http://u@v:w@a.test:81/p@q", ("http", "a.test:81", "a.test", 81, "/p@q")),  # the last "@" of the authority
    ("http://@a.test/", ("http", "a.test", "a.test", 80, "/")),
    ("HTTPS://A.Test/", ("https", "A.Test", "A.Test", 443, "/")),  # scheme lower-cased, host as written
    ("http://1.2.3.4:65536/", ("http", "1.2.3.4:65536", "1.2.3.4", 65536, "/")),
])
def test_authority_of_splits_awkward_authorities(url, parts):
    scheme, hostport, host, port, rest = parts
    assert authority_of(url) == (scheme, hostport, host, port, len(url) - len(rest))
    assert host_of(url) == host


@pytest.mark.parametrize("url", [
    "ftp://a.test/", "mailto:x@a.test", "a.test/x", "//a.test/", "http:/a.test/", "http:///x",
    "http://:80/", "http://u@/", "http://[::1/", "http://[::1]x/", "http://a.test:8o/",
    "http://a.test:80:81/", "http://a[b/", "",
])
def test_authority_of_refuses_what_has_no_http_authority(url):
    assert authority_of(url) is None
    assert host_of(url) == ""


# Awkward pieces that random links are made of, and bases to resolve them against.
_PIECES = ["a", "B", "0", "-", ".", "..", "/", "//", "?", "#", "#x", ":", "@", "%41", "~", "x.html", "1.2.3",
           "127.0.0.1", "http://", "https://", "HTTP://", "h.test", "H.Test", "h.test:80", "h.test:0080", ":99999",
           ":443", "'", "!", "$", "%2e", "%2E", "%7E", "%7e", "./", "../", "%zz", "%", "x/..", "/.", "xn--a",
           # non-ASCII text, IDNA and odd hosts, white space around or inside
           "\u00e9", "\u00dc", "\u00df", "\u65e5\u672c", "\U0001F600", "\u3002", "\uff21", "xn--bcher-kva",
           "b\u00fccher.test", "0x7f.1", "%C3%A9", "a_b", " ", "\t", "\n", "\x00", "\\", "[::1]",
           # schemes, refused or not
           "mailto:", "tel:", "javascript:", "Http:", "hTTps:", "c:", "a+b.c-d:", "1a:", "ftp:"]
_BASES = ["http://a.test/d/p.html?q", "https://b.test:8443/", "http://c.test/%7Ex/y/", "http://[::1]/a/b",
          "http://u:p@d.test/x", "not a base", "http://e.test"]


def _awkward_pairs(seed: int) -> list[tuple[str, str]]:
    """(href, base): the hostile sim's links, the WHATWG cases, 30,000 random compositions."""
    from larbin_py.sim import SimConfig
    from larbin_py.sim.web import SimWeb

    pairs = []
    web = SimWeb.generate(SimConfig(seed=4, hosts=30, hostile=True), 8080)
    for host in web.hosts.values():
        for res in host.resources.values():
            pairs.extend((link.raw, link.base) for link in res.links)
    with open(CASES, encoding="utf-8") as f:
        pairs.extend((case["input"], case["base"]) for case in json.load(f) if case["base"])
    rng = random.Random(seed)
    for _ in range(30000):
        pairs.append(("".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 7))), rng.choice(_BASES)))
    return pairs


def test_fast_path_agrees_with_the_full_parser():
    """Every href the fast path answers gets the same answer from the parser."""
    from larbin_py import url as url_mod

    fast = [(href, base, url_mod._fast(href, base)) for href, base in _awkward_pairs(9)]
    answered = [(h, b, f) for h, b, f in fast if f is not None]
    assert len(answered) > 1000
    # The shapes the fast path was widened to are among its answers.
    assert any(not h.isascii() for h, _b, _f in answered)
    assert any("xn--" in f for _h, _b, f in answered)
    assert any(h != h.strip(" ") for h, _b, _f in answered)
    assert any(" " in h.strip(url_mod._STRIP) for h, _b, _f in answered)  # inside a path: %20
    assert any(f == "" for _h, _b, f in answered)  # mailto:, javascript:... refused at once
    for href, base, got in answered:
        text = href.strip(url_mod._STRIP).translate(url_mod._TABNL)
        assert url_mod._by_parser(text, base, 100_000) == (got or None), (href, base)


def test_normalize_links_agrees_with_normalize_link_by_link():
    """The batch resolver gives what normalize gives, on every kind of href."""
    answered = 0
    for href, base in _awkward_pairs(10):
        want = normalize(href, base, max_length=60)
        assert normalize_links([href], base, max_length=60) == ([want] if want is not None else []), (href, base)
        answered += want is not None
    assert answered > 5000


def test_normalize_links_keeps_document_order_and_drops_repeats():
    base = "http://a.test/d/p.html"
    hrefs = ["b.html", "#top", "./b.html", "B.html", "http://A.test/d/b.html#x", "mailto:x", "", "b.html"]
    assert normalize_links(hrefs, base) == ["http://a.test/d/b.html", "http://a.test/d/p.html",
                                            "http://a.test/d/B.html"]


def test_a_canonical_base_is_cut_up_like_the_parser_would():
    from larbin_py import url as url_mod

    bases = ["http://a.test/", "http://a.test/d/e/p.html?q=1&r", "https://b.test:8443/x/", "http://1.2.3.4/a",
             "http://xn--bcher-kva.test/%C3%A9/p?x=%41", "http://a.test/d/p.html?", "https://c.test/~u/a;b=c/"]
    for base in bases:
        assert normalize(base) == base
        fast = url_mod._canonical_base_info(base)
        assert fast is not None and fast == url_mod._parsed_base_info(base), base
    for base in ["HTTP://a.test/", "http://a.test", "http://u@a.test/", "http://a.test/#f", "http://a.test/./x"]:
        assert url_mod._canonical_base_info(base) is None, base  # not canonical: the parser answers


def test_the_fast_paths_classes_are_the_sets_they_stand_for():
    """Issue 37: the fast path's character classes, written as negations (compiled in
    microseconds, not tens of milliseconds at every start), match exactly the code points
    of the classes they replace: _PCHARS and their extra characters, and every non-ASCII
    code point but the surrogates."""
    import re

    from larbin_py import url as url_mod

    unicode_ = "\x80-\ud7ff\ue000-\U0010ffff"
    for extra, written in (("'/", url_mod._PATH_CHARS), ("/?", url_mod._QUERY_CHARS)):
        listed = re.compile("[" + url_mod._PCHARS + re.escape(extra) + unicode_ + "]")
        negated = re.compile(written)
        assert written.startswith("[^")
        differ = [c for c in range(0x110000) if (listed.fullmatch(chr(c)) is None) != (negated.fullmatch(chr(c)) is None)]
        assert differ == []
