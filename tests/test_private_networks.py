"""privateNetworks: which resolved addresses may be fetched (sans-I/O, fake clock)."""

from __future__ import annotations

import pytest

from larbin_py.frontier.addresses import is_loopback, is_private_address
from test_frontier import Sim, make

PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255", "100.128.0.1", "172.32.0.1",
          "2606:4700:4700::1111", "2a00:1450:4007:80b::200e", "::ffff:8.8.8.8", "2002:808:808::1",
          "64:ff9b::808:808"]
PRIVATE = ["127.0.0.1", "127.255.255.254", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
           "169.254.169.254", "100.64.0.1", "100.127.255.254", "0.0.0.0", "0.1.2.3", "224.0.0.1",
           "239.255.255.250", "255.255.255.255", "240.0.0.1", "::1", "::", "fe80::1", "fe80::1%eth0",
           "fd00::1", "fc00::1", "fec0::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
           "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "2002:c0a8:101::1", "[::1]",
           "not an address", ""]


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_addresses(ip):
    assert not is_private_address(ip)


@pytest.mark.parametrize("ip", PRIVATE)
def test_private_loopback_link_local_and_their_mapped_forms(ip):
    assert is_private_address(ip)


def run(tmp_path, policy, ips, urls, *, seeds=(), **kw):
    f = make(tmp_path, wait_duration=0.01, private_networks=policy, **kw)
    for host in seeds:
        f.dns.addresses.allow_host(host)
    for url in urls:
        f.admission.push(url, 3, 2)
    sim = Sim(f, ips={}, latency=0.01)
    sim.dns_answer = lambda site: f.dns_resolved(site, ips[site.host], 300.0, sim.now)
    sim.run(until=100.0)
    assert f.idle()
    taken, accounted = f.conservation()
    assert taken == accounted == len(urls)
    return f, sim


IPS = {"pub.test": ("8.8.8.8",), "meta.test": ("169.254.169.254",), "lan.test": ("192.168.1.10",),
       "both.test": ("10.0.0.1", "2606:4700::1", "127.0.0.1"), "seed.test": ("127.0.0.1",)}
URLS = [f"http://{h}/{i}" for h in IPS for i in range(3)]


@pytest.mark.parametrize("host, loopback", [
    ("localhost", True), ("LocalHost", True), ("127.0.0.1", True), ("127.9.9.9", True), ("::1", True),
    ("[::1]", True), ("0.0.0.0", False), ("::", False), ("192.168.1.1", False), ("localhost.", False),
    ("example.test", False), ("", False),
])
def test_is_loopback_the_one_used_by_the_config_and_the_servers(host, loopback):
    assert is_loopback(host) is loopback


def test_deny_refuses_every_private_address_and_keeps_the_public_ones(tmp_path):
    f, sim = run(tmp_path, "deny", IPS, URLS, seeds=("seed.test",))
    fetched = {u.split("/")[2] for u in sim.fetched}
    assert fetched == {"pub.test", "both.test"}
    assert f.forgotten["privateAddress"] == 9
    # a name with public and private addresses is reached on a public one only
    assert {ip for _t, _k, host, ip in sim.starts if host == "both.test"} == {"2606:4700::1"}


def test_seeds_lets_only_the_start_hosts_through(tmp_path):
    f, sim = run(tmp_path, "seeds", IPS, URLS, seeds=("SEED.test",))
    assert {u.split("/")[2] for u in sim.fetched} == {"pub.test", "both.test", "seed.test"}
    assert f.forgotten["privateAddress"] == 6
    assert {ip for _t, _k, host, ip in sim.starts if host == "seed.test"} == {"127.0.0.1"}


def test_allow_fetches_everything(tmp_path):
    f, sim = run(tmp_path, "allow", IPS, URLS)
    assert len(sim.fetched) == len(URLS) and not f.forgotten


def test_a_name_that_moves_to_a_private_address_is_refused_then_asked_again(tmp_path):
    # evil.test resolves to a public address first; when its answer expires
    # it resolves to the metadata address: the URLs left are forgotten, and a
    # URL queued after the refused answer expired asks DNS again.
    f = make(tmp_path, wait_duration=1.0, private_networks="seeds")
    for i in range(4):
        f.admission.push(f"http://evil.test/{i}", 3, 2)
    sim = Sim(f, ips={}, latency=0.01)
    answers = iter([(("8.8.4.4",), 1.5), (("169.254.169.254",), 5.0), (("8.8.4.4",), 300.0)])

    def dns_answer(site):
        ips, ttl = next(answers)
        f.dns_resolved(site, ips, ttl, sim.now)

    sim.dns_answer = dns_answer
    sim.run(until=4.0)
    assert [u for u in sim.fetched] == ["http://evil.test/0"]  # robots.txt at 0, page 0 at 1
    assert f.forgotten["privateAddress"] == 3
    assert all(ip == "8.8.4.4" for *_r, ip in sim.starts)
    # while the refusal holds, a new URL of the site is forgotten at once
    f.admission.push("http://evil.test/late", 3, 2)
    sim.run(until=6.0)
    assert f.forgotten["privateAddress"] == 4
    # once it expired, the name is asked again (public now): fetched
    sim.now = 10.0
    f.admission.push("http://evil.test/later", 3, 2)
    sim.run(until=30.0)
    assert sim.fetched[-1] == "http://evil.test/later"
    assert f.idle() and f.conservation()[0] == f.conservation()[1] == 6


def test_a_retry_while_the_name_is_refused_is_forgotten(tmp_path):
    # A page times out while its name's new answer is private: its retry
    # must not wait in a FIFO nothing will ever send.
    f = make(tmp_path, wait_duration=0.0, private_networks="deny")
    f.admission.push("http://moved.test/a", 3, 2)
    f.load(0.0)
    site, = f.dns.take()
    f.dns_resolved(site, ("8.8.8.8",), 300.0, 0.0)
    robots = f.next_request(0.0)
    f.robots_known(robots, None, 3600.0, 0.0)
    req = f.next_request(0.0)
    assert req is not None and req.url == "http://moved.test/a"
    site.dns_event("ask")  # asked again meanwhile (its answer expired)
    f.dns.pending += 1
    f.dns_resolved(site, ("10.0.0.8",), 300.0, 0.5)
    assert f.retry(req, "timeout", 1.0) is True
    assert f.forgotten["privateAddress"] == 1 and f.in_sites == 0
    assert f.idle() and f.conservation() == (1, 1)


def test_the_policy_is_checked(tmp_path):
    with pytest.raises(ValueError, match="private_networks"):
        make(tmp_path, private_networks="sometimes")
