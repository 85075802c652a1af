"""HTTP authentication (larbin_py.net.auth): basic against Debian's nginx, bearer from a token file
read again when it changes, digest against a scripted server that checks the response itself.

Credentials reach only their prefix's origin: a crawl that is redirected
from the authenticated origin to another host sends nothing there (the
second nginx server's log says so), and neither the crawl's outputs (WARC
request records) nor its stats hold them.  A 401 without credentials is
``authRequired``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import subprocess

import pytest

from larbin_py.config import parse_config_text
from larbin_py.net.auth import AuthRule, AuthRules, parse_challenges, parse_rule
from larbin_py.net.http import Fetcher
from larbin_py.sim.dns import SimDNSServer
from helpers.crawl import crawl
from helpers.http_server import Server
from helpers.nginx import Nginx, free_port

SECRET = "au7h-s3cret"


@pytest.fixture(scope="module")
def sites():
    """nginx: a.test (basic auth on /private/, a redirect to b.test) and b.test, on two ports."""
    a_port, b_port = free_port(), free_port()
    nginx = Nginx(f"""
    server {{
        listen 127.0.0.1:{a_port};
        root {{root}}/a;
        location /private/ {{
            auth_basic "larbin";
            auth_basic_user_file {{root}}/htpasswd;
        }}
        location = /private/away {{
            auth_basic "larbin";
            auth_basic_user_file {{root}}/htpasswd;
            return 302 http://b.test:{b_port}/landing;
        }}
    }}
    server {{
        listen 127.0.0.1:{b_port};
        root {{root}}/b;
    }}""", ports=[("127.0.0.1", a_port), ("127.0.0.1", b_port)])
    hashed = subprocess.run(["openssl", "passwd", "-apr1", SECRET], capture_output=True, text=True,
                            check=True).stdout.strip()
    nginx.write("htpasswd", f"crawler:{hashed}\n".encode())
    nginx.write("a/private/index.html", b"<html>members only <a href='/private/away'>on</a></html>")
    nginx.write("a/robots.txt", b"User-agent: *\nDisallow:\n")
    nginx.write("b/landing", b"<html>landed</html>")
    nginx.write("b/robots.txt", b"User-agent: *\nDisallow:\n")
    with nginx.start():
        yield a_port, b_port, nginx


def fetcher(rules, **kw) -> Fetcher:
    return Fetcher(user_agent="larbin_py/test", connect_timeout=2.0, timeout_page=2.0, auth=AuthRules(rules), **kw)


async def test_basic_credentials_open_the_prefix_and_nothing_else(sites):
    a_port, _, nginx = sites
    f = fetcher([(f"http://a.test:{a_port}/private/", "basic", "crawler", SECRET)], keep_raw=True)
    ok = await f.fetch(f"http://a.test:{a_port}/private/", "127.0.0.1", a_port)
    public = await f.fetch(f"http://a.test:{a_port}/robots.txt", "127.0.0.1", a_port)
    await f.close()
    assert ok.error is None and ok.status == 200 and b"members only" in ok.body
    token = base64.b64encode(f"crawler:{SECRET}".encode()).decode()
    lines = nginx.wait_log(lambda log: {"/private/", "/robots.txt"} <= {e["request"].split()[1] for e in log})
    log = {e["request"].split()[1]: e for e in lines if e["port"] == str(a_port)}
    assert log["/private/"]["authorization"] == f"Basic {token}"
    assert log["/robots.txt"]["authorization"] == ""  # outside the prefix: nothing sent
    assert public.error is None
    # the WARC's request record: a placeholder, never the credential
    assert b"Authorization: Basic ***" in ok.raw_request and token.encode() not in ok.raw_request
    assert SECRET not in repr(f.stats) and token not in repr(f.stats)


async def test_a_401_without_credentials_is_auth_required_and_with_wrong_ones_a_4xx(sites):
    a_port, _, _ = sites
    f = fetcher([])
    none = await f.fetch(f"http://a.test:{a_port}/private/", "127.0.0.1", a_port)
    await f.close()
    f = fetcher([(f"http://a.test:{a_port}/private/", "basic", "crawler", "wrong")])
    wrong = await f.fetch(f"http://a.test:{a_port}/private/", "127.0.0.1", a_port)
    await f.close()
    assert none.error == "authRequired" and none.status == 401
    assert wrong.error is None and wrong.status == 401  # refused credentials: the server's 4xx


@pytest.mark.async_timeout(60)
async def test_a_redirect_to_another_host_carries_no_credentials(sites, tmp_path):
    a_port, b_port, nginx = sites
    async with SimDNSServer({"a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]}) as dns:
        config = parse_config_text("", require_start_urls=False).replace(
            start_urls=(f"http://a.test:{a_port}/private/",), dns_servers=(dns.address,),
            private_networks="allow", state_dir=str(tmp_path / "state"), save_dir=str(tmp_path / "save"),
            http_port=0, output_mode="warc", wait_duration=0.05, ip_version="4",
            auth=((f"http://a.test:{a_port}/private/", "basic", "crawler", SECRET),))
        engine, summary = await crawl(config)
    assert summary.pages >= 2 and summary.forgotten.get("err30X") == 1, summary
    log = nginx.wait_log(lambda log: any(e["request"].startswith("GET /landing") for e in log))
    landed = [e for e in log if e["port"] == str(b_port) and e["request"].startswith("GET /landing")]
    assert landed and all(e["authorization"] == "" for e in log if e["port"] == str(b_port))
    away = [e for e in log if e["request"].startswith("GET /private/away")]
    assert away and away[0]["authorization"].startswith("Basic ")
    token = base64.b64encode(f"crawler:{SECRET}".encode())
    warcs = 0
    for root, _, files in os.walk(tmp_path):
        for name in files:
            data = open(os.path.join(root, name), "rb").read()
            if name.endswith((".warc", ".warc.gz")):
                import gzip
                data = gzip.decompress(data) if name.endswith(".gz") else data
                assert b"Authorization: Basic ***" in data
                warcs += 1
            assert token not in data and SECRET.encode() not in data, name
    assert warcs >= 1


async def test_a_bearer_token_file_is_read_again_when_it_changes(tmp_path):
    seen = []

    async def handler(reader, writer, head):
        m = re.search(rb"\r\nauthorization: ([^\r]*)", head, re.I)
        seen.append(m.group(1) if m else None)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    token = tmp_path / "token"
    async with Server(handler) as srv:
        f = fetcher([(f"http://api.test:{srv.port}/", "bearer", str(token), "")])
        url = f"http://api.test:{srv.port}/v1"
        missing = await f.fetch(url, "127.0.0.1", srv.port)
        token.write_text("tok-one\n")
        await f.fetch(url, "127.0.0.1", srv.port)
        await f.fetch(url, "127.0.0.1", srv.port)
        token.write_text("tok-number-two\n")  # another size: seen as changed whatever the clock's grain
        await f.fetch(url, "127.0.0.1", srv.port)
        await f.close()
    assert missing.error is None
    assert seen == [None, b"Bearer tok-one", b"Bearer tok-one", b"Bearer tok-number-two"]


class DigestServer:
    """Checks RFC 7616 digest responses itself (MD5, qop=auth); every nonce is good once per nc."""

    def __init__(self, user: str, password: str, *, stale_first: bool = False) -> None:
        self.user, self.password = user, password
        self.nonce = "n0nce-1"
        self.stale_first = stale_first
        self.statuses: list[int] = []
        self.authorizations: list[bytes | None] = []

    def check(self, method: str, fields: dict) -> bool:
        def H(t: str) -> str:
            return hashlib.md5(t.encode()).hexdigest()
        ha1 = H(f"{self.user}:larbin:{self.password}")
        ha2 = H(f"{method}:{fields['uri']}")
        want = H(f"{ha1}:{fields['nonce']}:{fields['nc']}:{fields['cnonce']}:auth:{ha2}")
        return fields.get("response") == want and fields["nonce"] == self.nonce

    async def handler(self, reader, writer, head):
        m = re.search(rb"\r\nauthorization: Digest ([^\r]*)", head, re.I)
        self.authorizations.append(m.group(1) if m else None)
        ok = False
        stale = ""
        if m:
            fields = parse_challenges([b"Digest " + m.group(1)])["digest"]
            ok = self.check("GET", fields)
            if ok and self.stale_first:
                self.stale_first, ok, stale = False, False, ", stale=true"
                self.nonce = "n0nce-2"
        status = 200 if ok else 401
        self.statuses.append(status)
        body = b"ok" if ok else b"no"
        extra = b"" if ok else (f'WWW-Authenticate: Digest realm="larbin", qop="auth", '
                                f'nonce="{self.nonce}", opaque="op"{stale}\r\n').encode()
        writer.write(b"HTTP/1.1 %d X\r\n%sContent-Length: 2\r\n\r\n%s" % (status, extra, body))
        await writer.drain()


async def test_digest_answers_the_challenge_on_the_next_request_then_reuses_it():
    server = DigestServer("bob", SECRET)
    async with Server(server.handler) as srv:
        f = fetcher([(f"http://wiki.test:{srv.port}/", "digest", "bob", SECRET)])
        url = f"http://wiki.test:{srv.port}/page"
        first = await f.fetch(url, "127.0.0.1", srv.port)
        second = await f.fetch(url, "127.0.0.1", srv.port)
        third = await f.fetch(url + "2", "127.0.0.1", srv.port)
        await f.close()
    assert first.error == "authRetry" and first.status == 401  # queued again, politely, for free
    assert (second.error, second.status, third.error, third.status) == (None, 200, None, 200)
    assert server.authorizations[0] is None and b'nc=00000002' in server.authorizations[2]
    assert all(SECRET.encode() not in (a or b"") for a in server.authorizations)


async def test_digest_follows_a_stale_nonce_a_bounded_number_of_times():
    server = DigestServer("bob", SECRET, stale_first=True)
    async with Server(server.handler) as srv:
        f = fetcher([(f"http://wiki.test:{srv.port}/", "digest", "bob", SECRET)])
        url = f"http://wiki.test:{srv.port}/page"
        results = [await f.fetch(url, "127.0.0.1", srv.port) for _ in range(3)]
        await f.close()
    assert [r.error for r in results] == ["authRetry", "authRetry", None] and results[2].status == 200
    wrong = DigestServer("bob", "other-password")
    async with Server(wrong.handler) as srv:
        f = fetcher([(f"http://wiki.test:{srv.port}/", "digest", "bob", SECRET)])
        results = [await f.fetch(f"http://wiki.test:{srv.port}/p", "127.0.0.1", srv.port) for _ in range(3)]
        await f.close()
    # a refused digest is the server's 4xx, never an endless retry
    assert [(r.error, r.status) for r in results] == [("authRetry", 401), (None, 401), (None, 401)]


def test_rules_match_their_origin_only_and_the_longest_prefix_wins():
    rules = AuthRules([("https://a.test/", "basic", "u", "p"), ("https://a.test/docs/", "digest", "d", "p"),
                       ("http://b.test:8080", "basic", "b", "p")])
    assert rules.for_url("https://a.test/docs/x").scheme == "digest"
    assert rules.for_url("https://a.test/other").user == "u"
    assert rules.for_url("https://a.test.evil.test/") is None
    assert rules.for_url("http://a.test/") is None  # another scheme is another origin
    assert rules.for_url("http://b.test:8080/x").user == "b" and rules.for_url("http://b.test/x") is None
    assert "p" not in repr(rules.for_url("https://a.test/x")).split("basic")[1].replace("***", "")


@pytest.mark.parametrize("words, why", [
    (["https://a.test/", "ntlm", "u", "p"], "scheme among basic, bearer, digest"),
    (["ftp://a.test/", "basic", "u", "p"], "http"),
    (["https://a.test/", "basic", "u"], "USER PASSWORD"),
    (["https://a.test/", "bearer"], "one token file"),
])
def test_bad_auth_lines_say_what_is_wrong_without_the_password(words, why):
    with pytest.raises(ValueError, match=why):
        parse_rule(words)
    text = "startUrl http://a.test/\nauth\n  " + " ".join(words) + "\nend\n"
    from larbin_py.config import ConfigError
    with pytest.raises(ConfigError) as exc:
        parse_config_text(text)
    assert "auth:" in str(exc.value) and "\n" not in str(exc.value).strip()
