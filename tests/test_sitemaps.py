"""Sitemaps: the reader (larbin_py.sitemaps) and what a crawl does with a file (larbin_py.sitemap_fetch),
hostile files included: a gzip bomb, an index naming itself, one naming 10,000 sitemaps, 10 million URLs."""

from __future__ import annotations

import gzip
import resource
import time
from collections import Counter

import pytest

from larbin_py.frontier.admission import Admission
from larbin_py.frontier.lanes import Lanes
from larbin_py.frontier.store import UrlRecord, decode_record, encode_record
from larbin_py.rules import UrlRules
from larbin_py.scope import UrlPatterns
from larbin_py.sitemap_fetch import MAX_LEVEL, Sitemaps, found_by, is_sitemap, parse_via, sitemap_via
from larbin_py.sitemaps import MAX_BYTES, MAX_ENTRIES, SitemapReader, read_sitemap
from larbin_py.testing.fakes import memory_stores

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*entries: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {NS}>' + "".join(entries) + "</urlset>").encode()


def url(loc: str, lastmod: str = "") -> str:
    return f"<url><loc>{loc}</loc>" + (f"<lastmod>{lastmod}</lastmod>" if lastmod else "") + "</url>"


def index(*locs: str) -> bytes:
    return (f"<sitemapindex {NS}>" + "".join(f"<sitemap><loc>{u}</loc></sitemap>" for u in locs)
            + "</sitemapindex>").encode()


# ------------------------------------------------------------------ the reader

def test_a_urlset_its_lastmods_and_what_is_skipped():
    sm = read_sitemap(urlset(url("http://a.example/1", "2024-05-01"), url(" http://a.example/2 ", "yesterday"),
                             url(""), "<sitemap><loc>http://a.example/s.xml</loc></sitemap>",
                             url("http://a.example/" + "x" * 9000), url("http://a.example/3", "2024-05-01T10:00:00Z")))
    assert sm.kind == "urlset"
    assert sm.urls == [("http://a.example/1", "2024-05-01"), ("http://a.example/2", ""),
                       ("http://a.example/3", "2024-05-01T10:00:00Z")]
    assert sm.bad_entries == 3 and not sm.cut and not sm.broken and sm.sitemaps == []


def test_an_index_gzip_text_and_no_namespace():
    assert read_sitemap(index("http://a/s1.xml", "http://a/s2.xml.gz")).sitemaps == \
        [("http://a/s1.xml", ""), ("http://a/s2.xml.gz", "")]
    assert read_sitemap(gzip.compress(urlset(url("http://a/1")))).urls == [("http://a/1", "")]
    assert read_sitemap(b"<urlset><url><loc>http://a/1</loc></url></urlset>").urls == [("http://a/1", "")]
    text = read_sitemap(b"\xef\xbb\xbfhttp://a/1\r\n\n  https://a/2  \nftp://a/3\nnot a url\nhttp://a/4")
    assert text.kind == "text" and [u for u, _ in text.urls] == ["http://a/1", "https://a/2", "http://a/4"]
    # two gzip members one after the other (a concatenated file) are one stream
    assert len(read_sitemap(gzip.compress(b"http://a/1\n") + gzip.compress(b"http://a/2\n")).urls) == 2


def test_fed_byte_by_byte_it_reads_the_same():
    body = gzip.compress(urlset(*(url(f"http://a/{i}", "2024-01-01") for i in range(50))))
    reader = SitemapReader()
    for i in range(len(body)):
        reader.feed(body[i:i + 1])
    assert reader.close().urls == read_sitemap(body).urls and len(read_sitemap(body).urls) == 50


def test_damaged_files_give_what_came_before():
    sm = read_sitemap(urlset(url("http://a/1"), url("http://a/2"))[:-30] + b"<<<&&&\x00garbage")
    assert [u for u, _ in sm.urls][:1] == ["http://a/1"]
    gz = gzip.compress(b"http://a/1\n" + b"".join(b"http://a/x%d\n" % (i * 7919 % 10007) for i in range(3000)))
    assert len(gz) > 4000
    sm = read_sitemap(gz[:3000] + b"\x00" * 50 + gz[3050:])
    assert sm.broken and sm.urls[0] == ("http://a/1", "")
    assert read_sitemap(b"").kind == "unknown" and read_sitemap(b"<html><body>404</body></html>").urls == []


def test_entities_are_not_expanded():
    laughs = (b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY a "aaaaaaaaaa">'
              + b"".join(b'<!ENTITY %c "%s">' % (98 + i, b"&" + bytes([97 + i]) + b";" * 1) * 1 for i in range(0))
              + b']><urlset><url><loc>http://a/&a;</loc></url></urlset>')
    t0 = time.perf_counter()
    sm = read_sitemap(laughs)
    assert time.perf_counter() - t0 < 1
    assert all("aaaaaaaaaa" not in u for u, _ in sm.urls)


def test_a_gzip_bomb_inflates_no_further_than_50_mib():
    # 2 GiB of spaces inside a urlset in about 2 MB: 2048 gzip members of 1 MiB each, one after
    # the other (a gzip file may hold several), each compressed about 1000 times
    member = gzip.compress(b" " * (1 << 20), compresslevel=9, mtime=0)
    bomb = (gzip.compress(urlset(url("http://a/first"))[:-len("</urlset>")], mtime=0) + member * 2048
            + gzip.compress(b"</urlset>", mtime=0))
    assert len(bomb) < 3_000_000
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    sm = read_sitemap(bomb)
    elapsed = time.perf_counter() - t0
    assert sm.cut and sm.text_bytes == MAX_BYTES and sm.urls == [("http://a/first", "")]
    assert elapsed < 10, elapsed
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    assert grown < 200 << 20, grown  # never the 2 GiB


def test_ten_million_urls_the_limit_holds_and_the_rest_is_counted():
    """Generated as it is read (never held whole): 50,000 kept, every later entry read is counted,
    and reading stops at 50 MiB of text."""
    reader = SitemapReader()
    reader.feed(f'<?xml version="1.0"?><urlset {NS}>'.encode())
    batch = 10_000
    t0 = time.perf_counter()
    fed = 0
    for start in range(0, 10_000_000, batch):
        reader.feed("".join(f"<url><loc>http://big.example/p{i}.html</loc></url>"
                            for i in range(start, start + batch)).encode())
        fed += batch
        if reader.result.cut:
            break
    sm = reader.close()
    assert len(sm.urls) == MAX_ENTRIES and sm.urls[-1][0] == f"http://big.example/p{MAX_ENTRIES - 1}.html"
    assert sm.cut and sm.text_bytes == MAX_BYTES
    per = len("<url><loc>http://big.example/p1000000.html</loc></url>")
    assert sm.over_limit > MAX_BYTES // per - MAX_ENTRIES - 100_000  # about a million counted
    assert len(sm.urls) + sm.over_limit <= fed
    assert time.perf_counter() - t0 < 60


# ------------------------------------------------------------------ in a crawl

class Crawl:
    """An admission on memory lanes and the Sitemaps of a crawl, with what they queued."""

    def __init__(self, **rules) -> None:
        self.lanes = Lanes(memory_stores(), ram_urls=1000)
        self.admission = Admission(self.lanes, rules=UrlRules(**rules))
        self.sitemaps = Sitemaps(self.admission, max_url_size=512)

    def queued(self) -> list[UrlRecord]:
        out = []
        while len(self.lanes.main):
            out.append(self.lanes.main.pop())
        return out


def test_robots_txt_names_them_else_sitemap_xml():
    from larbin_py.robots import RobotsTxt

    c = Crawl()
    rules = RobotsTxt.parse(b"User-agent: *\nDisallow:\nSitemap: /maps/a.xml\nSitemap: http://cdn.example/m.xml.gz\n")
    assert c.sitemaps.discover("http://a.example:8080/robots.txt", rules) == 2
    c.sitemaps.discover("http://b.example/robots.txt", None)
    recs = c.queued()
    assert [(r.url, r.via) for r in recs] == [
        ("http://a.example:8080/maps/a.xml", "m0@a.example"), ("http://cdn.example/m.xml.gz", "m0@a.example"),
        ("http://b.example/sitemap.xml", "m0@b.example")]
    # robots.txt read again (after a day, a restart...): nothing queued twice
    assert c.sitemaps.discover("http://a.example:8080/robots.txt", rules) == 0
    assert c.admission.rejected["seen"] == 2


def test_listed_pages_go_through_the_rules_as_start_urls_and_keep_their_lastmod():
    c = Crawl(depth_in_site=4, forbidden_extensions=(".pdf",), get_cgi=False,
              patterns=UrlPatterns(exclude=["/private/"]))
    rec = UrlRecord("http://a.example/sitemap.xml", 0, 3, via=sitemap_via(0, "a.example"))
    body = urlset(url("http://a.example/1", "2024-05-01"), url("http://a.example/doc.pdf"),
                  url("http://a.example/q?x=1"), url("http://a.example/private/2"), url("http://other.example/"),
                  url("/relative"), url("http://a.example/1"))
    c.sitemaps.answered(rec, body)
    recs = c.queued()
    assert [(r.url, r.depth, r.via) for r in recs] == [("http://a.example/1", 4, "s:2024-05-01"),
                                                       ("http://a.example/relative", 4, "s")]
    assert c.admission.rejected == Counter({"forbiddenExtension": 1, "cgi": 1, "excluded": 1})
    assert c.sitemaps.counts["offSite"] == 1 and c.sitemaps.counts["queued"] == 2
    assert found_by(recs[0]) == ("sitemap", "2024-05-01") and found_by(recs[1]) == ("sitemap", "")
    assert found_by(UrlRecord("http://a/", 1, 0)) == ("", "")


def test_a_sitemap_listed_by_another_hosts_robots_may_list_that_host():
    c = Crawl()
    rec = UrlRecord("http://cdn.example/m.xml", 0, 3, via=sitemap_via(0, "www.example"))
    c.sitemaps.answered(rec, urlset(url("http://www.example/a"), url("http://cdn.example/b"),
                                    url("http://third.example/c")))
    assert [r.url for r in c.queued()] == ["http://www.example/a", "http://cdn.example/b"]
    assert c.sitemaps.counts["offSite"] == 1


def test_an_index_that_names_itself_is_read_once():
    c = Crawl()
    me = "http://a.example/maps/index.xml"
    c.sitemaps.discover("http://a.example/robots.txt", type("R", (), {"sitemaps": [me]})())
    [rec] = c.queued()
    c.sitemaps.answered(rec, index(me, "http://a.example/maps/a.xml"))
    [child] = c.queued()
    assert child.url == "http://a.example/maps/a.xml" and parse_via(child.via) == (1, "a.example")
    assert c.admission.rejected["seen"] == 1  # itself


def test_two_index_files_naming_each_other_end():
    c = Crawl()
    a, b = "http://a.example/a.xml", "http://a.example/b.xml"
    c.sitemaps.discover("http://a.example/robots.txt", type("R", (), {"sitemaps": [a]})())
    reads = 0
    while len(c.lanes.main):
        rec = c.lanes.main.pop()
        reads += 1
        c.sitemaps.answered(rec, index(b if rec.url == a else a))
    assert reads == 2 and c.admission.rejected["seen"] == 1


def test_nesting_stops_at_the_deepest_level():
    c = Crawl()
    rec = UrlRecord("http://a.example/i.xml", 0, 3, via=sitemap_via(MAX_LEVEL, "a.example"))
    c.sitemaps.answered(rec, index("http://a.example/deeper.xml"))
    assert c.queued() == [] and c.sitemaps.counts["tooDeep"] == 1


def test_an_index_fanning_out_to_10000_sitemaps():
    c = Crawl()
    locs = [f"http://a.example/maps/part{i}.xml.gz" for i in range(10_000)]
    rec = UrlRecord("http://a.example/maps/index.xml", 0, 3, via=sitemap_via(0, "a.example"))
    t0 = time.perf_counter()
    c.sitemaps.answered(rec, gzip.compress(index(*locs)))
    assert time.perf_counter() - t0 < 5
    recs = c.queued()
    assert len(recs) == 10_000 and all(parse_via(r.via) == (1, "a.example") for r in recs)
    assert c.sitemaps.counts["sitemaps"] == 10_000
    # in memory the lanes keep only their window; the rest waits on disk in a real crawl
    assert c.admission.taken == 10_000


def test_records_keep_via_on_disk_and_in_redis_entries():
    for rec in (UrlRecord("http://a/s.xml", 0, 3, via="m2@a"), UrlRecord("http://a/p", 4, 1, 2, "7/1-0", "s:2024-01-01"),
                UrlRecord("http://a/q", 4, 1)):
        assert decode_record(encode_record(rec)) == rec
    assert is_sitemap(UrlRecord("http://a/s.xml", 0, 3, via="m0@a")) and not is_sitemap(UrlRecord("http://a/", 0, 3))


@pytest.mark.parametrize("via", ["s", "s:2024", "", "m", "mx@a", "m1"])
def test_only_sitemap_files_parse_as_such(via):
    assert parse_via(via) is None


def test_a_hundred_thousand_tiny_gzip_members_and_trailing_junk():
    member = gzip.compress(b"http://a/1\n", mtime=0)
    t0 = time.perf_counter()
    sm = read_sitemap(member * 100_000)
    assert time.perf_counter() - t0 < 10
    assert len(sm.urls) == MAX_ENTRIES and sm.over_limit == 100_000 - MAX_ENTRIES
    sm = read_sitemap(gzip.compress(b"http://a/1\nhttp://a/2\n") + b"<html>junk</html>" * 100)
    assert [u for u, _ in sm.urls] == ["http://a/1", "http://a/2"] and not sm.broken
