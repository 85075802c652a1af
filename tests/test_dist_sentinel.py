"""High availability's building blocks (larbin_py/distributed/sentinel.py): the Redis URL forms,
their redaction, and discovery of the master through real sentinels
(tests/helpers/sentinel.py: a primary, a replica, three sentinels), across a
failover, dead, stopped and absent sentinels; and what ``WAIT`` answers,
which ``redisReplicas`` relies on."""

from __future__ import annotations

import re
import signal
import time
from urllib.parse import quote

import pytest
import redis
from redis.connection import parse_url

from larbin_py.distributed.sentinel import (
    RedisTarget,
    Sentinels,
    SentinelError,
    discover_master,
    is_sentinel_url,
    parse_redis_url,
    shown,
)
from helpers.sentinel import MASTER, PASSWORD, make_sentinel_cluster, sentinel_cluster  # noqa: F401 (fixtures)

SECRET = "hunter2"


# ---------------------------------------------------------------- URLs


def test_each_url_form_reads_into_its_target():
    t = parse_redis_url("redis+sentinel://alice:p%40ss@s1.example:26380,s2.example,[::1]:7/larbin.main/3"
                        "?sentinelPassword=s%2Fp")
    assert (t.scheme, t.is_sentinel, t.username, t.password, t.sentinel_password, t.master_name, t.db) == \
        ("redis+sentinel", True, "alice", "p@ss", "s/p", "larbin.main", 3)
    assert t.sentinels == (("s1.example", 26380), ("s2.example", 26379), ("::1", 7))
    assert t.sentinels_shown() == "s1.example:26380, s2.example:26379, [::1]:7"
    t = parse_redis_url("redis+sentinel://s1:1/m/")  # a trailing slash: database 0
    assert (t.sentinels, t.master_name, t.db, t.password) == ((("s1", 1),), "m", 0, None)
    t = parse_redis_url("redis+sentinel://:p@ss@s1/m")  # the last '@' ends the password, as in redis-py
    assert (t.password, t.sentinels) == ("p@ss", (("s1", 26379),))
    t = parse_redis_url("redis://:pw@h:7000/2")
    assert (t.scheme, t.host, t.port, t.db, t.password, t.is_sentinel) == ("redis", "h", 7000, 2, "pw", False)
    assert parse_redis_url("rediss://h").port == 6379
    t = parse_redis_url("unix:///run/r.sock?db=4")
    assert (t.scheme, t.path, t.db) == ("unix", "/run/r.sock", 4)
    assert is_sentinel_url("Redis+Sentinel://s/m") and not is_sentinel_url("redis://s/0")


@pytest.mark.parametrize("url,why", [
    (f"redis+sentinel://:{SECRET}@s1:26379,s2:0/m", "got 's2:0'"),
    (f"redis+sentinel://:{SECRET}@s1:26379,/m", "got ''"),
    (f"redis+sentinel://:{SECRET}@s1:/m", "got 's1:'"),
    (f"redis+sentinel://:{SECRET}@[::1/m", "Invalid IPv6 URL"),
    (f"redis+sentinel://:{SECRET}@[::1]x/m", "got '[::1]x'"),
    (f"redis+sentinel://:{SECRET}@s1,s1/m", "named twice"),
    (f"redis+sentinel://:{SECRET}@s1", "no master name"),
    (f"redis+sentinel://:{SECRET}@s1/my%20master", "got 'my master'"),
    (f"redis+sentinel://:{SECRET}@s1/m/x", "'/m/x' after the sentinels"),
    (f"redis+sentinel://:{SECRET}@s1/m/1/2", "'/m/1/2' after the sentinels"),
    (f"redis+sentinel://:{SECRET}@s1/m?sentinelPassword={SECRET}&ssl=true", "unknown parameter 'ssl'"),
    (f"redis+sentinel://:{SECRET}@s1/m#frag", "no '#' fragment"),
    (f"redis+sentinel://:{SECRET}/x@s1/m", "write '@' as %40, '/' as %2F"),
    (f"redis://:{SECRET}@h:65536/0", "expected a port in 1..65535"),
    (f"redis://:{SECRET}@h/zero", "expected a database number"),
    (f"unix://:{SECRET}@/run/r.sock?db=x", "expected db=N"),
    (f"unix://:{SECRET}@/", "expected unix:///path"),
    (f"redis+sentinel://:{SECRET}\t@s1/m", "without spaces or control characters"),
    (f"sentinel://:{SECRET}@s1/m", "expected redis://, rediss://, unix:// or redis+sentinel://"),
    (f":{SECRET}@s1/m", "expected redis://"),
])
def test_a_malformed_url_is_a_value_error_that_hides_its_password(url, why):
    with pytest.raises(ValueError) as exc:
        parse_redis_url(url)
    message = str(exc.value)
    assert SECRET[3:] not in message and "***" in message, message
    if why is not None:
        assert why in message, message


@pytest.mark.parametrize("url,expected", [
    ("redis://alice:hunter2@h:6379/0", "redis://alice:***@h:6379/0"),
    ("redis://:hunter2@h", "redis://:***@h"),
    ("redis://hunter2@h", "redis://***@h"),  # a userinfo without ':' may be a password: all of it hidden
    ("redis://:hun@ter2@h", "redis://:***@h"),  # the last '@' ends the userinfo
    ("redis://:hun/ter2@h/0", "redis://:***@h/0"),  # malformed, yet hidden
    ("redis+sentinel://:hunter2@s1,s2/m?sentinelPassword=hunter2x", "redis+sentinel://:***@s1,s2/m?sentinelPassword=***"),
    ("redis://h/0?password=hunter2&db=1", "redis://h/0?password=***&db=1"),
    ("unix://:hunter2@/run/r.sock", "unix://:***@/run/r.sock"),
    ("garbage:hunter2@h", "garbage:***@h"),
    ("redis://h:6379/0", "redis://h:6379/0"),
])
def test_shown_hides_passwords_of_well_and_malformed_urls(url, expected):
    assert shown(url) == expected


def test_a_target_does_not_show_its_passwords():
    t = parse_redis_url(f"redis+sentinel://bob:{SECRET}@s1/m?sentinelPassword={SECRET}x")
    assert SECRET not in repr(t) and SECRET not in t.shown and "bob" in t.shown
    assert isinstance(t, RedisTarget)


def test_the_data_url_of_a_discovered_master_reads_back_in_redis_py():
    pw = PASSWORD  # a space, a slash and an '@'
    t = parse_redis_url(f"redis+sentinel://bob:{quote(pw, safe='')}@s1/m/5")
    url = t.data_url(("10.0.0.7", 7001))
    params = parse_url(url)
    assert (params["host"], params["port"], params["db"], params["username"], params["password"]) == \
        ("10.0.0.7", 7001, 5, "bob", pw)
    assert parse_url(parse_redis_url("redis+sentinel://s1/m").data_url(("::1", 7))).get("password") is None
    plain = "redis://:x@h:1/0"
    assert parse_redis_url(plain).data_url() == plain
    with pytest.raises(ValueError, match="needs the master's address"):
        t.data_url()
    with pytest.raises(ValueError, match="is not a redis\\+sentinel:// URL"):
        Sentinels(parse_redis_url(plain))


# ---------------------------------------------------------------- discovery


def role(address: tuple[str, int]) -> str:
    c = redis.Redis(*address, password=PASSWORD, socket_timeout=2, decode_responses=True)
    return c.execute_command("ROLE")[0]


@pytest.mark.async_timeout(90)
async def test_discovery_finds_the_master_and_follows_a_failover(sentinel_cluster):
    cluster = sentinel_cluster
    target = parse_redis_url(cluster.url)
    sentinels = Sentinels(target, try_timeout=0.5)
    assert await sentinels.master(5) == cluster.primary.address
    assert role(cluster.primary.address) == "master"
    primary = redis.Redis(*cluster.primary.address, password=PASSWORD, socket_timeout=5)
    primary.set("acked", "1")
    assert primary.execute_command("WAIT", 1, 2000) == 1  # on the replica before the kill

    started = time.monotonic()
    cluster.kill_primary()
    # Discovery itself waits through the failover: the sentinels name the
    # dead primary (refused) until they have promoted the replica.
    found = await sentinels.master(20)
    took = time.monotonic() - started
    assert found == cluster.replica.address, found
    assert role(found) == "master"
    assert cluster.wait_failover(10) == found  # every sentinel names it
    new = redis.Redis(*found, password=PASSWORD, socket_timeout=5)
    assert new.get("acked") == b"1"  # what WAIT confirmed survived
    assert took < 15, took
    assert await discover_master(target, 2) == found

    # The promoted replica has no replica: WAIT 1 answers 0 until one is back.
    new.set("after", "1")
    assert new.execute_command("WAIT", 1, 200) == 0
    back = cluster.restart_as_replica()
    assert back is cluster.primary and role(back.address) == "slave"
    assert new.execute_command("WAIT", 1, 2000) == 1
    assert await discover_master(target, 2) == found  # the old primary is not named again


@pytest.mark.async_timeout(60)
async def test_a_dead_or_stopped_sentinel_is_passed_over(make_sentinel_cluster):
    cluster = make_sentinel_cluster()
    s1, s2, s3 = (s.address for s in cluster.sentinels)
    sentinels = Sentinels(parse_redis_url(cluster.url), try_timeout=0.3)
    assert await sentinels.master(3) == cluster.primary.address
    assert sentinels.order == [s1, s2, s3]

    cluster.sentinels[0].kill()
    assert await sentinels.master(3) == cluster.primary.address
    assert sentinels.order == [s2, s1, s3]  # the one that answered is asked first next time

    cluster.sentinels[1].signal(signal.SIGSTOP)  # accepts connections, never answers
    started = time.monotonic()
    assert await sentinels.master(3) == cluster.primary.address
    assert time.monotonic() - started < 1.5  # one try_timeout on s2, a refusal from s1, then s3
    assert sentinels.order == [s3, s2, s1]
    started = time.monotonic()
    assert await sentinels.master(3) == cluster.primary.address  # s3 first: no wait at all
    assert time.monotonic() - started < 0.3


@pytest.mark.async_timeout(60)
async def test_no_sentinel_answering_is_one_clear_error_within_the_timeout(make_sentinel_cluster):
    cluster = make_sentinel_cluster()
    target = parse_redis_url(cluster.url)
    for s in cluster.sentinels:
        s.signal(signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(SentinelError) as exc:
        await Sentinels(target, try_timeout=0.4).master(1.5)
    took = time.monotonic() - started
    assert 1.3 <= took < 2.5, took
    message = str(exc.value)
    addresses = [f"127.0.0.1:{s.port}" for s in cluster.sentinels]
    assert message.startswith(f"no Redis master {MASTER!r} found through the sentinels of redisUrl "
                              f"redis+sentinel://:***@{','.join(addresses)}/{MASTER} within 1.5 s ("), message
    for a in addresses:
        assert re.search(rf"{a}: (no answer within [0-9.]+ s|not asked in time)(;|\)$)", message), message
    assert quote(PASSWORD, safe="") not in message and PASSWORD not in message

    for s in cluster.sentinels:
        s.kill()
    started = time.monotonic()
    with pytest.raises(SentinelError) as exc:
        await discover_master(target, 1.0)
    took = time.monotonic() - started
    assert 0.85 <= took < 2.0, took  # it kept asking until the timeout
    assert str(exc.value).endswith("within 1 s (" + "; ".join(f"{a}: connection refused" for a in addresses) + ")")


@pytest.mark.async_timeout(60)
async def test_a_hung_master_is_not_waited_on_beyond_the_timeout(make_sentinel_cluster):
    cluster = make_sentinel_cluster(down_after_ms=60_000)  # no failover during this test
    cluster.primary.signal(signal.SIGSTOP)  # it accepts connections and never answers
    started = time.monotonic()
    with pytest.raises(SentinelError) as exc:
        await Sentinels(parse_redis_url(cluster.url), try_timeout=0.3).master(1.0)
    assert time.monotonic() - started < 2.0
    assert f"named 127.0.0.1:{cluster.primary.port}: unreachable (no answer within 0.3 s)" in str(exc.value)


@pytest.mark.async_timeout(60)
async def test_wrong_names_and_passwords_are_told_apart(make_sentinel_cluster):
    cluster = make_sentinel_cluster(sentinels=2, sentinel_password="sentinel-pw")
    good = cluster.url_with(query="?sentinelPassword=sentinel-pw")
    assert await discover_master(parse_redis_url(good), 3) == cluster.primary.address

    # The sentinels need their password: each refuses, until the timeout.
    with pytest.raises(SentinelError, match=r"answered NOAUTH Authentication required.*answered NOAUTH"):
        await discover_master(parse_redis_url(cluster.url), 0.5)
    # A name no sentinel monitors.
    with pytest.raises(SentinelError, match=r"no Redis master 'other' .*: does not know 'other'; "):
        await discover_master(parse_redis_url(cluster.url_with(master="other",
                                                               query="?sentinelPassword=sentinel-pw")), 0.5)
    # The master refuses the URL's password, or needs one: at once, not after the timeout.
    for url, why in ((cluster.url_with(password=SECRET, query="?sentinelPassword=sentinel-pw"), "WRONGPASS"),
                     (cluster.url_with(password="", query="?sentinelPassword=sentinel-pw"), "NOAUTH")):
        started = time.monotonic()
        with pytest.raises(SentinelError) as exc:
            await discover_master(parse_redis_url(url), 10)
        assert time.monotonic() - started < 2
        message = str(exc.value)
        assert message.startswith(f"the Redis master 127.0.0.1:{cluster.primary.port} of {MASTER!r} "
                                  "(redisUrl redis+sentinel://"), message
        assert why in message and SECRET not in message and "sentinel-pw" not in message, message


# ---------------------------------------------------------------- WAIT


def test_wait_counts_the_replicas_that_hold_the_writes(make_sentinel_cluster):
    """What redisReplicas relies on: ``WAIT 1 T`` after a write answers 1 once the
    replica holds it, and 0 after T ms when the replica cannot answer."""
    cluster = make_sentinel_cluster(sentinels=0)
    primary = redis.Redis(*cluster.primary.address, password=PASSWORD, socket_timeout=5)
    replica = redis.Redis(*cluster.replica.address, password=PASSWORD, socket_timeout=5)
    primary.set("a", "1")
    started = time.monotonic()
    assert primary.execute_command("WAIT", 1, 1000) == 1
    assert time.monotonic() - started < 0.5  # the replica is asked at once, not at its 1 s ACK
    assert replica.get("a") == b"1"

    cluster.replica.signal(signal.SIGSTOP)
    try:
        primary.set("b", "2")
        started = time.monotonic()
        assert primary.execute_command("WAIT", 1, 500) == 0
        assert 0.45 <= time.monotonic() - started < 2
    finally:
        cluster.replica.signal(signal.SIGCONT)
    assert primary.execute_command("WAIT", 1, 2000) == 1  # caught up
    assert replica.get("b") == b"2"

    cluster.replica.kill()
    primary.set("c", "3")
    started = time.monotonic()
    assert primary.execute_command("WAIT", 1, 300) == 0
    assert 0.25 <= time.monotonic() - started < 2
