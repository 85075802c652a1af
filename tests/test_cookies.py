"""useCookies: the RFC 6265 jar (larbin_py.net.cookies), the fetcher's Cookie header, the crawl.

The jar is sans-I/O with the caller's clock, so its rules are tested with
chosen times; the fetcher and the engine are tested against small servers on
127.0.0.1 and 127.0.0.2 that set cookies and record what comes back.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re

import h11
import pytest

from larbin_py.config import parse_config_text
from larbin_py.engine import Engine
from larbin_py.net import cookies as cookies_mod
from larbin_py.net.cookies import (
    COOKIES_FILE, MAX_COOKIE_SIZE, MAX_COOKIES, MAX_PER_DOMAIN, MAX_PER_RESPONSE, CookieJar,
    default_path, load_jar, parse_cookie_date, path_match, save_jar,
)
from larbin_py.net import http as http_mod
from larbin_py.net.http import PARSERS, Fetcher

from helpers.http_server import Server, reply

NOW = 1_700_000_000.0
#: h11's request header field-value: a Cookie header must match it.
FIELD_VALUE = re.compile(rb"[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*")


def jar_with(url: str, *values, now: float = NOW) -> CookieJar:
    jar = CookieJar()
    jar.receive(url, values, now)
    return jar


def sent(jar: CookieJar, url: str, now: float = NOW) -> str | None:
    header = jar.header_for(url, now)
    return header.decode() if header is not None else None


# ----------------------------------------------------------------------
# Domain
# ----------------------------------------------------------------------
def test_a_cookie_without_domain_goes_to_its_host_only():
    jar = jar_with("http://www.example.com/", "a=1")
    assert sent(jar, "http://www.example.com/x") == "a=1"
    assert sent(jar, "http://sub.www.example.com/") is None
    assert sent(jar, "http://example.com/") is None
    assert sent(jar, "http://other.test/") is None


def test_a_domain_cookie_goes_to_the_domain_and_its_subdomains_only():
    jar = jar_with("http://www.example.com/", "a=1; Domain=.Example.COM")
    for url in ("http://example.com/", "http://www.example.com/", "http://a.b.example.com/p"):
        assert sent(jar, url) == "a=1", url
    for url in ("http://notexample.com/", "http://example.com.evil.test/", "http://example.org/"):
        assert sent(jar, url) is None, url


def test_a_domain_the_host_is_not_in_or_a_bare_tld_is_refused():
    jar = CookieJar()
    values = ["a=1; Domain=other.com", "b=2; Domain=com", "c=3; Domain=.com", "d=4; Domain=w.example.com",
              "e=5; Domain=ample.com", "f=6; Domain=example.com."]
    assert jar.receive("http://www.example.com/", values, NOW) == 0
    assert jar.refused == {"domain": 6} and len(jar) == 0
    assert sent(jar, "http://x.com/") is None


def test_a_single_label_domain_equal_to_the_host_is_host_only():
    jar = jar_with("http://localhost/", "a=1; Domain=localhost")
    assert len(jar) == 1 and jar.cookies()[0].host_only
    assert sent(jar, "http://localhost:8080/") == "a=1"
    assert sent(jar, "http://x.localhost/") is None


def test_an_ip_host_sets_cookies_for_itself_only():
    jar = CookieJar()
    jar.receive("http://127.0.0.1:81/", ["a=1", "b=2; Domain=127.0.0.1", "c=3; Domain=0.0.1"], NOW)
    assert jar.refused == {"domain": 1}
    assert sent(jar, "http://127.0.0.1/") == "a=1; b=2"
    assert sent(jar, "http://127.0.0.2/") is None and sent(jar, "http://0.0.1/") is None
    jar.receive("http://[::1]/", ["v6=1"], NOW)
    assert sent(jar, "http://[::1]:8080/x") == "v6=1"


# ----------------------------------------------------------------------
# Path
# ----------------------------------------------------------------------
def test_default_path_and_path_match():
    assert [default_path(p) for p in ("", "x", "/", "/a", "/a/", "/a/b/c.html")] == ["/", "/", "/", "/", "/a", "/a/b"]
    assert path_match("/foo", "/foo") and path_match("/foo/", "/foo") and path_match("/foo/bar", "/foo")
    assert path_match("/foo/bar", "/foo/") and path_match("/anything", "/")
    assert not path_match("/foobar", "/foo") and not path_match("/fo", "/foo")


def test_path_attribute_default_path_and_the_order_of_the_header():
    jar = CookieJar()
    jar.receive("http://s.test/docs/a/page.html", ["dir=1", "root=2; Path=/", "rel=3; Path=docs"], NOW)
    jar.receive("http://s.test/", ["deep=4; Path=/docs/a/page.html"], NOW + 1)
    assert sent(jar, "http://s.test/docs/a/page.html") == "deep=4; dir=1; rel=3; root=2"
    assert sent(jar, "http://s.test/docs/a") == "dir=1; rel=3; root=2"
    assert sent(jar, "http://s.test/docs/ab") == "root=2"
    assert sent(jar, "http://s.test/?q=/docs/a/") == "root=2"


def test_same_name_domain_and_path_replaces_and_keeps_its_creation_time():
    jar = CookieJar()
    jar.receive("http://s.test/", ["a=1; Path=/"], NOW)
    jar.receive("http://s.test/", ["b=2; Path=/"], NOW + 1)
    jar.receive("http://s.test/", ["a=3; Path=/", "a=4; Path=/x"], NOW + 5)
    assert len(jar) == 3
    assert sent(jar, "http://s.test/x") == "a=4; a=3; b=2"  # /x first, then a before b (older)


# ----------------------------------------------------------------------
# Expiry
# ----------------------------------------------------------------------
def test_max_age_expires_and_deletion():
    jar = CookieJar()
    jar.receive("http://s.test/", ["m=1; Max-Age=60", "e=2; Expires=Wed, 15 Nov 2023 00:00:00 GMT",
                                   "s=3", "both=4; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Max-Age=60"], NOW)
    assert sent(jar, "http://s.test/", NOW + 59) == "m=1; e=2; s=3; both=4"
    expires_e = parse_cookie_date("Wed, 15 Nov 2023 00:00:00 GMT")
    assert NOW + 59 < expires_e < NOW + 60 + 86400
    assert sent(jar, "http://s.test/", NOW + 60) == "e=2; s=3"
    assert sent(jar, "http://s.test/", expires_e) == "s=3"
    jar.receive("http://s.test/", ["s=gone; Max-Age=0"], NOW + 1)
    assert sent(jar, "http://s.test/", NOW + 1) is None and len(jar) == 0


def test_a_date_in_the_past_deletes_and_a_bad_one_is_ignored():
    jar = jar_with("http://s.test/", "a=1", "b=2")
    jar.receive("http://s.test/", ["a=x; Expires=Sun, 06 Nov 1994 08:49:37 GMT",
                                   "b=3; Expires=not a date; Max-Age=1e3"], NOW)
    assert sent(jar, "http://s.test/", NOW + 10**6) == "b=3"  # b: a session cookie


def test_cookie_dates_of_every_usual_form():
    want = 784111777.0  # Sun, 06 Nov 1994 08:49:37 GMT
    for text in ("Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                 "Sun Nov  6 08:49:37 1994", "6 nov 1994 8:49:37", "06-Nov-1994 08:49:37 UTC"):
        assert parse_cookie_date(text) == want, text
    for text in ("", "Sun, 31 Feb 2024 00:00:00", "06 Nov 1994", "99:00:00 6 Nov 1994",
                 "08:49:37 6 Nov 1600", "x" * 5000, "1:2:3 " * 1000):
        assert parse_cookie_date(text) is None, text[:40]


def test_a_lifetime_is_cut_to_400_days():
    jar = jar_with("http://s.test/", "a=1; Max-Age=999999999999", "b=1; Expires=Fri, 01 Jan 9999 00:00:00 GMT")
    assert {c.expires for c in jar.cookies()} == {NOW + 400 * 86400}


# ----------------------------------------------------------------------
# Secure
# ----------------------------------------------------------------------
def test_secure_cookies_go_over_https_only_and_come_from_https_only():
    jar = jar_with("https://s.test/", "sec=1; Secure; HttpOnly; SameSite=Strict", "plain=2")
    assert sent(jar, "https://s.test/") == "sec=1; plain=2"
    assert sent(jar, "http://s.test/") == "plain=2"
    assert jar.receive("http://s.test/", ["sec=evil", "new=3; secure"], NOW) == 0
    assert jar.refused == {"secure": 2}
    assert sent(jar, "https://s.test/") == "sec=1; plain=2"


# ----------------------------------------------------------------------
# Limits
# ----------------------------------------------------------------------
def test_cookie_size_limit():
    jar = CookieJar()
    ok = "n=" + "v" * (MAX_COOKIE_SIZE - 1)
    assert jar.receive("http://s.test/", [ok, "big=" + "v" * MAX_COOKIE_SIZE], NOW) == 1
    assert jar.refused == {"tooBig": 1}


def test_per_domain_limit_evicts_the_least_recently_used():
    jar = CookieJar()
    jar.receive("http://s.test/", [f"c{i}=1" for i in range(MAX_PER_DOMAIN)], NOW)
    jar.receive("http://s.test/", ["c0=2; Path=/"], NOW + 1)  # c0 is now the newest (replaced)
    assert sent(jar, "http://s.test/", NOW + 2).count("=") == MAX_PER_DOMAIN
    jar.receive("http://s.test/", ["late=1"], NOW + 3)
    names = {c.name for c in jar.cookies()}
    assert len(names) == MAX_PER_DOMAIN and "late" in names
    assert jar.evicted == 1 and "c1" not in names  # c1 least recently sent (sent in creation order)


def test_a_domain_limit_keeps_the_cookies_used_lately():
    jar = CookieJar()
    jar.receive("http://s.test/", ["keep=1; Path=/k"] + [f"c{i}=1; Path=/c" for i in range(MAX_PER_DOMAIN - 1)],
                NOW)
    assert sent(jar, "http://s.test/k", NOW + 1) == "keep=1"  # used: the others are older now
    jar.receive("http://s.test/", [f"n{i}=1" for i in range(MAX_PER_DOMAIN - 1)], NOW + 2)
    assert "keep" in {c.name for c in jar.cookies()} and len(jar) == MAX_PER_DOMAIN


def test_the_whole_jar_is_bounded_in_count_and_bytes():
    jar = CookieJar()
    for d in range(MAX_COOKIES // MAX_PER_DOMAIN + 5):
        jar.receive(f"http://h{d}.test/", [f"c{i}=v" for i in range(MAX_PER_DOMAIN)], NOW)
    assert len(jar) == MAX_COOKIES and jar.evicted == 5 * MAX_PER_DOMAIN
    assert sent(jar, "http://h0.test/") is None  # the first site's were the least recently used
    jar = CookieJar()
    big = "v" * (MAX_COOKIE_SIZE - 10)
    for d in range(400):
        jar.receive(f"http://h{d}.test/", [f"c{i}={big}" for i in range(4)], NOW)
    assert jar.bytes <= cookies_mod.MAX_JAR_BYTES and len(jar) < 400 * 4 and jar.evicted > 0
    assert jar.bytes == sum(c.size for c in jar.cookies())


def test_set_cookie_headers_of_one_answer_and_the_cookie_header_are_bounded():
    jar = CookieJar()
    values = [f"c{i}=1; Domain=s.test" if i % 2 else f"c{i}=1" for i in range(MAX_PER_RESPONSE + 50)]
    jar.receive("http://www.s.test/", values, NOW)
    assert jar.refused == {"tooMany": 50}
    jar = CookieJar()
    for p in range(10):
        jar.receive("http://s.test/", [f"c{p}_{i}={'v' * 1000}; Path=/{'x' * p}" for i in range(5)], NOW)
    header = jar.header_for("http://s.test/xxxxxxxxx", NOW)
    assert len(header) <= cookies_mod.MAX_HEADER and jar.not_sent > 0
    assert header.startswith(b"c9_0=")  # the most specific path first


# ----------------------------------------------------------------------
# Hostile headers
# ----------------------------------------------------------------------
def test_hostile_set_cookie_values_are_refused_and_never_raise():
    jar = CookieJar()
    hostile = [b"", b"=", b"noequals", b"=value", b" ; ;", b"a=1\r\nX-Injected: 1", b"a=\x00", b"a\x7f=1",
               b"n\xc3\xa9=1", b"a=caf\xc3\xa9", b"a=1\tb", b"a b=1", b";a=1", b"a=1; Domain",
               b"a=1; Path=/\r\n", b"a=1; Max-Age=" + b"9" * 5000, b"a=1;" * 20000, 12345, None]
    jar.receive("http://s.test/", hostile, NOW)
    for c in jar.cookies():
        assert "\r" not in c.value and "\n" not in c.value and "\x00" not in c.value
    assert jar.refused["badSyntax"] == 16  # all but "a=1; Domain", the long Max-Age and the ";" * 20000
    assert sent(jar, "http://s.test/") == "a=1"


def test_random_bytes_never_raise_and_every_header_is_a_valid_field_value():
    rng = random.Random(6265)
    jar = CookieJar()
    alphabet = b"a=;. \t/-\r\n\x00\xffDomainPathExpiresMax-AgeSecure0123456789:,"
    urls = ["http://s.test/", "https://a.s.test/x/y", "http://127.0.0.1/", "http://[::1]/", "ftp://x/", "http://"]
    for i in range(3000):
        n = rng.randrange(0, 80)
        value = bytes(rng.choice(alphabet) for _ in range(n))
        jar.receive(rng.choice(urls), [value, b"k%d=%s; Domain=s.test; Path=/" % (i, value[:5])], NOW + i)
    assert len(jar) > 0
    for url in urls:
        header = jar.header_for(url, NOW)
        assert header is None or FIELD_VALUE.fullmatch(header), header


# ----------------------------------------------------------------------
# The jar's file
# ----------------------------------------------------------------------
def test_the_jar_is_saved_atomically_and_loaded_without_its_expired_cookies(tmp_path):
    jar = CookieJar()
    jar.receive("https://www.s.test/a/b", ["short=1; Max-Age=10", "long=2; Max-Age=1000; Secure",
                                           "dom=3; Domain=s.test; Path=/", "session=4"], NOW)
    save_jar(str(tmp_path), jar.to_json())
    assert os.listdir(tmp_path) == [COOKIES_FILE]
    again, damaged = load_jar(str(tmp_path), NOW + 100)
    assert damaged == 0 and again.expired == 1
    assert sent(again, "https://www.s.test/a/b", NOW + 100) == "long=2; session=4; dom=3"
    assert sent(again, "https://x.s.test/", NOW + 100) == "dom=3"
    assert sent(again, "http://www.s.test/a/", NOW + 100) == "session=4; dom=3"


def test_a_damaged_jar_file_loses_only_its_bad_records(tmp_path):
    jar = jar_with("http://s.test/", "a=1", "b=2")
    save_jar(str(tmp_path), jar.to_json())
    path = tmp_path / COOKIES_FILE
    doc = json.loads(path.read_text())
    doc["cookies"] += [["x\r\n", "1", "s.test", True, "/", False, None, NOW],
                       ["y", "1", "com", False, "/", False, None, NOW], "junk", [1, 2]]
    path.write_text(json.dumps(doc))
    again, damaged = load_jar(str(tmp_path), NOW)
    assert damaged == 4 and sent(again, "http://s.test/") == "a=1; b=2"
    path.write_text('{"format": "larbin_py-cookies", "vers')
    again, damaged = load_jar(str(tmp_path), NOW)
    assert damaged == 1 and len(again) == 0
    assert load_jar(str(tmp_path / "none"), NOW)[1] == 0


# ----------------------------------------------------------------------
# The fetcher's Cookie header
# ----------------------------------------------------------------------
@pytest.mark.parametrize("parser", PARSERS)
async def test_the_fetcher_sends_the_cookie_last_as_h11_would_and_keeps_the_site_headers(parser):
    async with Server(reply()) as srv:
        f = Fetcher(user_agent="larbin_py/test", parser=parser, timeout_page=2.0, connect_timeout=2.0)
        url = f"http://site.test:{srv.port}/p"
        results = [await f.fetch(url, "127.0.0.1", srv.port),
                   await f.fetch(url, "127.0.0.1", srv.port, cookie=b"a=1; b=x y"),
                   await f.fetch(url, "127.0.0.1", srv.port),
                   await f.fetch(url, "127.0.0.1", srv.port, cookie=b"a=1\r\nX-Evil: 1")]
        await f.close()
    assert [r.error for r in results[:3]] == [None, None, None]
    assert results[3].error == "badResponse" and len(srv.heads) == 3  # refused, never sent
    host = [(b"Host", f"site.test:{srv.port}".encode())]
    for head, extra in zip(srv.heads, ([], [(b"Cookie", b"a=1; b=x y")], [])):
        want = h11.Connection(h11.CLIENT).send(
            h11.Request(method=b"GET", target=b"/p", headers=host + f._base_headers + extra))
        assert head == want
    assert len(f._headers_by_host) == 1  # one kept entry for the site, not one per cookie
    headers, block = f._headers_by_host[f"site.test:{srv.port}"]
    assert b"Cookie" not in block
    with_cookie = http_mod._with_header(headers, block, b"Cookie", b"a=1; b=x y")[1]
    assert with_cookie == block[:-2] + b"Cookie: a=1; b=x y\r\n\r\n"  # the fast path keeps its block
    assert http_mod._with_header(headers, block, b"Cookie", b"a=\x00")[1] is None  # h11 judges (and refuses) it


# ----------------------------------------------------------------------
# A crawl: cookies per site, across --reload, off by default
# ----------------------------------------------------------------------
class CookieSite:
    """A site on ``ip``: ``/`` sets a cookie and links to ``/next``; every request is recorded."""

    def __init__(self, ip: str, name: str, log: list, links: str = "") -> None:
        self.ip, self.name, self.log, self.links = ip, name, log, links
        self.server = None

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, self.ip, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}/"

    async def _serve(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                cookie = next((ln.split(":", 1)[1].strip() for ln in lines[1:]
                               if ln.lower().startswith("cookie:")), None)
                self.log.append((self.ip, path, cookie))
                extra, body = b"", b""
                if path == "/robots.txt":
                    status = b"404 Not Found"
                else:
                    status = b"200 OK"
                    if path == "/":
                        extra = (b"Set-Cookie: %s=1; Max-Age=3600\r\nSet-Cookie: gone=1; Max-Age=3600\r\n"
                                 b"Set-Cookie: other=1; Domain=example.com\r\n" % self.name.encode())
                        body = b'<html><a href="/next">n</a>%s</html>' % self.links.encode()
                    elif path == "/next":
                        body = b'<html><a href="/last">l</a></html>'
                    else:
                        body = b"<html>end</html>"
                writer.write(b"HTTP/1.1 %s\r\nContent-Type: text/html\r\nContent-Length: %d\r\n%s\r\n%s"
                             % (status, len(body), extra, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def crawl_config(tmp_path, seeds, **changes):
    base = parse_config_text("", require_start_urls=False)
    values = dict(start_urls=tuple(seeds), save_dir=str(tmp_path / "save"), state_dir=str(tmp_path / "state"),
                  http_port=0, output_mode="stats", wait_duration=0.02, timeout_page=2.0,
                  connect_timeout=2.0, use_cookies=True)
    values.update(changes)
    config = base.replace(**values)
    if hasattr(config, "private_networks"):  # loopback sites are the point of these tests
        config = config.replace(private_networks="allow")
    return config


@pytest.mark.async_timeout(60)
async def test_a_cookie_goes_back_to_its_site_only(tmp_path):
    log: list = []
    async with CookieSite("127.0.0.2", "b", log) as b:
        async with CookieSite("127.0.0.1", "a", log, links=f'<a href="{b.url}x">b</a>') as a:
            engine = Engine(crawl_config(tmp_path, [a.url]), err=open(os.devnull, "w"))
            summary = await engine.run()
    assert summary.stop_reason == "end of work"
    sent_to = {(ip, path): cookie for ip, path, cookie in log}
    assert sent_to[("127.0.0.1", "/")] is None and sent_to[("127.0.0.2", "/x")] is None
    assert sent_to[("127.0.0.1", "/next")] == "a=1; gone=1"
    assert sent_to[("127.0.0.1", "/last")] == "a=1; gone=1"
    assert all(cookie is None for ip, path, cookie in log if ip == "127.0.0.2" or path == "/robots.txt")
    assert summary.cookies["refused"] == {"domain": 1} and "cookies" in summary.format()


@pytest.mark.async_timeout(60)
async def test_without_use_cookies_no_cookie_is_ever_sent_and_no_jar_kept(tmp_path):
    log: list = []
    async with CookieSite("127.0.0.1", "a", log) as a:
        engine = Engine(crawl_config(tmp_path, [a.url], use_cookies=False), err=open(os.devnull, "w"))
        summary = await engine.run()
    assert summary.stop_reason == "end of work" and {p for _, p, _ in log} == {"/robots.txt", "/", "/next", "/last"}
    assert all(cookie is None for _, _, cookie in log)
    assert engine.crawl_state.cookies is None and summary.cookies is None
    assert not os.path.exists(tmp_path / "state" / COOKIES_FILE)


@pytest.mark.async_timeout(90)
async def test_cookies_survive_reload_and_the_expired_ones_do_not(tmp_path):
    log: list = []
    async with CookieSite("127.0.0.1", "a", log) as a:
        config = crawl_config(tmp_path, [a.url], limit_page=1)
        summary = await Engine(config, err=open(os.devnull, "w")).run()
        assert [p for _, p, _ in log] == ["/robots.txt", "/"]
        path = tmp_path / "state" / COOKIES_FILE
        doc = json.loads(path.read_text())
        for rec in doc["cookies"]:
            if rec[0] == "gone":
                rec[6] = 1.0  # expired long ago
        path.write_text(json.dumps(doc))
        err = tmp_path / "err.txt"
        with open(err, "w") as f:
            summary = await Engine(config.replace(limit_page=0), reload=True, err=f).run()
    assert summary.stop_reason == "end of work"
    sent_to = {path: cookie for _, path, cookie in log}
    assert sent_to["/next"] == "a=1" and sent_to["/last"] == "a=1"
    assert summary.cookies["expired"] == 1
    assert "damaged" not in err.read_text()
