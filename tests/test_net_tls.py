"""TLS choices against Debian's nginx with the test's own CA (larbin_py.net.tls).

One nginx serves three certificates for ``secure.test`` on three ports --
good, for another name, expired -- all signed by a CA that only the test
knows.  The fetcher trusts it through ``tlsCaFile`` (alone, or besides the
system's CAs), refuses the two bad ones as ``tlsError`` with the reason,
skips the check for a ``tlsVerify off`` host only, and counts the TLS
version negotiated.  A crawl whose robots.txt fails its handshake forgets
its URLs as ``tlsError``, never as ``forbiddenRobots``.
"""

from __future__ import annotations

import os

import pytest

from larbin_py.config import ConfigError, parse_config_text
from larbin_py.net.http import Fetcher
from larbin_py.net.tls import TlsPolicy
from larbin_py.sim.dns import SimDNSServer
from helpers.crawl import crawl
from helpers.nginx import Nginx, free_port
from helpers.tls import make_pki


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    pki = make_pki(str(tmp_path_factory.mktemp("pki")), "secure.test", "127.0.0.1")
    ports = {case: free_port() for case in ("good", "other", "expired")}
    blocks = "".join(f"""
    server {{
        listen 127.0.0.1:{ports[case]} ssl;
        ssl_certificate {pair[0]};
        ssl_certificate_key {pair[1]};
        root {{root}}/www;
        location / {{ }}
    }}""" for case, pair in (("good", pki.good), ("other", pki.other), ("expired", pki.expired)))
    nginx = Nginx(blocks, ports=[("127.0.0.1", p) for p in ports.values()])
    nginx.write("www/index.html", b"<html>secure</html>")
    nginx.write("www/robots.txt", b"User-agent: *\nDisallow:\n")
    with nginx.start():
        yield pki, ports, nginx


def fetcher(**kw) -> Fetcher:
    return Fetcher(user_agent="larbin_py/test", connect_timeout=3.0, timeout_page=3.0, **kw)


async def get(f: Fetcher, port: int, host: str = "secure.test"):
    res = await f.fetch(f"https://{host}:{port}/", "127.0.0.1", port)
    await f.close()
    return res


@pytest.mark.parametrize("mode", ["add", "only"])
async def test_a_ca_file_added_or_alone_trusts_the_test_ca(servers, mode):
    pki, ports, _ = servers
    f = fetcher(tls=TlsPolicy(ca_file=pki.ca, ca_mode=mode))
    res = await get(f, ports["good"])
    assert res.error is None and res.status == 200 and res.body == b"<html>secure</html>"
    assert sum(f.stats["tls_versions"].values()) == 1 and set(f.stats["tls_versions"]) <= {"TLSv1.2", "TLSv1.3"}


async def test_without_the_ca_the_certificate_is_refused_as_tls_error(servers):
    _, ports, _ = servers
    res = await get(fetcher(), ports["good"])
    assert res.error == "tlsError" and res.status is None
    assert "unable to get local issuer certificate" in res.error_detail


def test_only_mode_trusts_the_file_alone_and_add_keeps_the_system_cas(servers):
    pki, _, _ = servers
    only = TlsPolicy(ca_file=pki.ca, ca_mode="only").context("secure.test").cert_store_stats()["x509_ca"]
    added = TlsPolicy(ca_file=pki.ca, ca_mode="add").context("secure.test").cert_store_stats()["x509_ca"]
    assert only == 1 and added > 1


def test_without_a_ca_file_the_system_cas_load_at_the_first_https_connection():
    """Issue 37: loading the system's CAs cost 15-25 ms of every crawl's start,
    http-only crawls included; the policy makes its first context when a
    connection asks for it (a CA file is still loaded, and checked, at once)."""
    import ssl

    policy = TlsPolicy()
    assert policy._contexts == {}
    ctx = policy.context("secure.test")
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.cert_store_stats()["x509_ca"] > 0
    assert policy.context("secure.test") is ctx and len(policy._contexts) == 1


async def test_a_certificate_for_another_name_is_refused(servers):
    pki, ports, _ = servers
    res = await get(fetcher(tls=TlsPolicy(ca_file=pki.ca)), ports["other"])
    assert res.error == "tlsError" and "Hostname mismatch" in res.error_detail


async def test_an_expired_certificate_is_refused(servers):
    pki, ports, _ = servers
    res = await get(fetcher(tls=TlsPolicy(ca_file=pki.ca)), ports["expired"])
    assert res.error == "tlsError" and "certificate has expired" in res.error_detail


async def test_tls_verify_off_applies_to_the_named_hosts_only(servers):
    pki, ports, _ = servers
    policy = TlsPolicy(insecure_hosts=("secure.test",))
    assert "secure.test" in policy.warning() and "NOT verified" in policy.warning()
    res = await get(fetcher(tls=policy), ports["expired"])
    assert res.error is None and res.status == 200
    other_host = await get(fetcher(tls=policy), ports["expired"], host="127.0.0.1")
    assert other_host.error == "tlsError"
    assert TlsPolicy().warning() is None


def test_tls_verify_off_needs_its_hosts_and_a_ca_file_must_load(tmp_path):
    seed = "startUrl http://a.example/\n"
    with pytest.raises(ConfigError, match=r"tlsVerify: 'off' needs the hosts it applies to"):
        parse_config_text(seed + "tlsVerify off\n")
    assert parse_config_text(seed + "tlsVerify off staging.test 10.0.0.0/8\n").tls_verify == \
        ("staging.test", "10.0.0.0/8")
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=r"tlsCaFile: no CA certificate in"):
        parse_config_text(seed + f"tlsCaFile {bad}\n")
    with pytest.raises(ConfigError, match=r"tlsCaFile: cannot read"):
        parse_config_text(seed + f"tlsCaFile {tmp_path / 'missing.pem'}\n")
    with pytest.raises(ConfigError, match=r"tlsCaMode: only needs a tlsCaFile"):
        parse_config_text(seed + "tlsCaMode only\n")


@pytest.mark.async_timeout(60)
async def test_a_robots_txt_behind_an_expired_certificate_is_tls_error_not_forbidden_robots(servers, tmp_path):
    pki, ports, nginx = servers
    async with SimDNSServer({"secure.test": ["127.0.0.1"]}) as dns:
        config = parse_config_text("", require_start_urls=False).replace(
            start_urls=(f"https://secure.test:{ports['expired']}/", f"https://secure.test:{ports['expired']}/a"),
            dns_servers=(dns.address,), private_networks="allow", state_dir=str(tmp_path / "state"),
            save_dir=str(tmp_path / "save"), http_port=0, output_mode="stats", wait_duration=0.05,
            tls_ca_file=pki.ca, connect_timeout=2.0, timeout_page=2.0, ip_version="4")
        engine, summary = await crawl(config)
    assert summary.forgotten.get("tlsError") == 2, summary.forgotten
    assert "forbiddenRobots" not in summary.forgotten


@pytest.mark.async_timeout(60)
async def test_the_crawl_warns_at_start_when_a_host_goes_unverified_and_counts_tls(servers, tmp_path):
    import asyncio
    import sys

    pki, ports, _ = servers
    async with SimDNSServer({"secure.test": ["127.0.0.1"]}) as dns:
        conf = tmp_path / "larbin.conf"
        conf.write_text(f"startUrl https://secure.test:{ports['expired']}/\ndnsServers 127.0.0.1:{dns.address[1]}\n"
                        f"privateNetworks allow\nstateDir {tmp_path / 'state'}\nsaveDir {tmp_path / 'save'}\n"
                        "httpPort 0\noutputMode stats\nwaitDuration 0.05\nipVersion 4\n"
                        "tlsVerify off secure.test\n")
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "larbin_py", "-c", str(conf),
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
    err = err.decode()
    assert proc.returncode == 0, err
    assert "warning: tlsVerify off: TLS certificates are NOT verified for secure.test" in err
    assert "pages fetched   1 " in err and "TLS             TLSv1." in err and "ALPN http/1.1" in err


def test_the_nginx_helper_leaves_no_server_running():
    """``with nginx.start():`` (the tests' idiom) starts one nginx and stops it: it started a
    second that could not bind, stopped only that one, and left the first running for good."""
    port = free_port()
    nginx = Nginx(f"server {{ listen 127.0.0.1:{port}; root {{root}}/www; }}", ports=[("127.0.0.1", port)])
    with nginx.start():
        with open(nginx.path("nginx.pid")) as f:
            master = int(f.read())
    assert master == nginx.proc.pid and nginx.proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(master, 0)
