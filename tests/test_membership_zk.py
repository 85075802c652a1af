"""ZkMembership on a real standalone ZooKeeper (tests/helpers/zookeeper.py): discovery,
a SIGKILLed worker detected by its session's end, a session expiry and the
rejoin, the server killed and restarted, an unreachable server, a duplicate
worker id; the factory and the dashboard snapshot."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from larbin_py.config import KEYS, Config, ConfigError, ZkAuth, format_config, parse_config_text
from larbin_py.distributed.membership import Membership, MembershipError
from larbin_py.distributed.membership_factory import make_membership, membership_snapshot
from larbin_py.distributed.membership_zk import ZkMembership
from helpers.zookeeper import free_port, own_zk_server, zk_server  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent
AUTH = ZkAuth("larbin", "zk-s3cret-password")
SESSION = 1.0  # seconds; the test server's tickTime is 200 ms (sessions of 0.4..4 s)


class Recorder:
    """A watcher: every call is kept with its thread; waiters wake at each call."""

    def __init__(self, m: ZkMembership) -> None:
        self.m = m
        self.calls: list[tuple[float, frozenset[str], int]] = []
        self.changed = asyncio.Event()
        m.watch(self)

    def __call__(self, members: frozenset[str]) -> None:
        self.calls.append((time.monotonic(), members, threading.get_ident()))
        self.changed.set()

    async def until(self, predicate, timeout: float, what: str) -> float:
        """Wait (on watcher calls) until ``predicate()``; the monotonic time it held."""
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; "
                                     f"members {sorted(self.m.members())}, alive {self.m.alive}, "
                                     f"last change {self.m.last_change}")
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        return time.monotonic()


def member(server, crawl: str, session: float = SESSION, auth: ZkAuth | None = None) -> ZkMembership:
    return ZkMembership(server.hosts, "/larbin_test", session, crawl=crawl, connect_timeout=5.0, auth=auth)


async def test_two_members_see_each_other_and_a_clean_leave(zk_server):
    a, b = member(zk_server, "two"), member(zk_server, "two")
    assert isinstance(a, Membership)
    seen = Recorder(a)
    await a.join("w1")
    await b.join("w2")
    assert b.members() == {"w1", "w2"}  # join returns with the view loaded
    await seen.until(lambda: a.members() == {"w1", "w2"}, 5, "w1 to see w2")
    assert a.alive and b.alive
    assert a.last_change[1] == "w2 joined"
    loop_thread = threading.get_ident()
    assert {thread for _, _, thread in seen.calls} == {loop_thread}
    snap = membership_snapshot(a)
    assert snap["source"] == "zookeeper" and snap["members"] == ["w1", "w2"] and snap["alive"] is True
    assert snap["last_change"]["what"] == "w2 joined"

    await b.leave()
    await seen.until(lambda: a.members() == {"w1"}, 5, "w1 to see w2 leave")
    assert a.last_change[1] == "w2 left (its session ended or it stopped)"
    assert not b.alive
    await a.leave()
    assert not a.alive and a.members() == frozenset()


CHILD = """
import asyncio, sys
from larbin_py.distributed.membership_zk import ZkMembership
async def main():
    m = ZkMembership(sys.argv[1], "/larbin_test", float(sys.argv[2]), crawl=sys.argv[3], connect_timeout=5.0)
    await m.join(sys.argv[4])
    print("joined", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


async def test_a_sigkilled_worker_leaves_the_view_within_the_session_timeout(zk_server):
    watcher = member(zk_server, "kill")
    seen = Recorder(watcher)
    await watcher.join("survivor")
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, zk_server.hosts, str(SESSION), "kill", "victim", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE)
    try:
        line = await asyncio.wait_for(child.stdout.readline(), 20)
        assert line == b"joined\n"
        await seen.until(lambda: "victim" in watcher.members(), 5, "the victim to appear")
        killed = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        gone = await seen.until(lambda: "victim" not in watcher.members(), SESSION + 3,
                                "the killed worker to vanish")
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()
    detection = gone - killed
    print(f"\nzookeeper: kill -9 to watcher call {detection:.2f} s (zkSessionTimeout {SESSION:g} s)")
    assert detection < SESSION + 2.0  # the server expires sessions on tickTime boundaries
    assert detection > SESSION * 0.5  # it was the session's end, not a clean close
    assert seen.calls[-1][1] == {"survivor"}
    assert seen.calls[-1][2] == threading.get_ident()  # called on the loop's thread
    assert watcher.last_change[1] == "victim left (its session ended or it stopped)"
    await watcher.leave()


async def test_a_worker_restarted_with_the_id_of_its_killed_self_waits_for_the_old_session(zk_server):
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, zk_server.hosts, str(SESSION), "phoenix", "w1", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE)
    try:
        assert await asyncio.wait_for(child.stdout.readline(), 20) == b"joined\n"
    finally:
        child.kill()
        await child.wait()
    killed = time.monotonic()
    again = member(zk_server, "phoenix")
    await again.join("w1")  # the holder's pid is gone from this machine: wait, then take the id
    waited = time.monotonic() - killed
    assert again.alive and again.members() == {"w1"}
    assert SESSION * 0.5 < waited < SESSION + 3
    await again.leave()


async def test_a_node_deleted_by_hand_is_created_again_at_the_heartbeat(zk_server):
    m = member(zk_server, "byhand")
    seen = Recorder(m)
    await m.join("w1")
    from kazoo.client import KazooClient

    def delete() -> None:
        admin = KazooClient(hosts=zk_server.hosts)
        admin.start(5)
        admin.delete(m.node_path)
        admin.stop()
        admin.close()

    await asyncio.to_thread(delete)
    await seen.until(lambda: "w1" not in m._view, 5, "the view without w1")
    await m.heartbeat()
    assert m.alive and m.last_change[1].startswith("w1 (this worker) rejoined")
    await seen.until(lambda: "w1" in m._view, 5, "the view with w1 again")
    await m.leave()


async def test_a_silent_server_makes_alive_false_before_the_session_could_expire(own_zk_server):
    server = own_zk_server
    m = member(server, "silent", 2.0)
    seen = Recorder(m)
    await m.join("w1")
    os.kill(server.process.pid, signal.SIGSTOP)  # no RST: only the missing pings tell
    stopped = time.monotonic()
    try:
        await seen.until(lambda: "w1" not in seen.calls[-1][1], 4, "w1 told it is suspended")
        suspended = time.monotonic() - stopped
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    assert suspended < 2.0  # kazoo gives up after ~2/3 of it; the server expires at 1x
    await seen.until(lambda: m.alive, 10, "w1 alive again")
    await m.leave()


def expire_session(hosts: str, client_id) -> None:
    """Expire a session the way ZooKeeper's own tests do: a second client on the
    same session id and password closes it (blocking; run in a thread)."""
    from kazoo.client import KazooClient

    other = KazooClient(hosts=hosts, client_id=client_id, timeout=SESSION)
    other.start(5)
    other.stop()
    other.close()


@pytest.mark.parametrize("auth", [None, "zkAuth"])
async def test_a_session_expiry_makes_alive_false_then_the_worker_rejoins(zk_server, auth):
    """(With zkAuth, the rejoined node's mark names the new session: the others count it.)"""
    auth = AUTH if auth else None
    crawl = "expiry-auth" if auth else "expiry"
    a, b = member(zk_server, crawl, auth=auth), member(zk_server, crawl, auth=auth)
    seen, other = Recorder(a), Recorder(b)
    await a.join("w1")
    await b.join("w2")
    await other.until(lambda: b.members() == {"w1", "w2"}, 5, "w2 to see w1")
    first_session = a.session_id
    await asyncio.to_thread(expire_session, zk_server.hosts, a._client.client_id)
    await seen.until(lambda: not a.alive, 5, "w1 to notice the expiry")
    assert "w1" not in a.members()  # not alive: not a member in its own view either
    await seen.until(lambda: a.alive, 10, "w1 to rejoin")
    assert a.session_id != first_session
    assert a.last_change[1].startswith("w1 (this worker) rejoined (session ")
    await seen.until(lambda: a.members() == {"w1", "w2"}, 5, "w1's view after its rejoin")
    await other.until(lambda: b.members() == {"w1", "w2"}, 5, "w2 to see w1 back")
    # w2 saw w1 leave (the expired session's node deleted) before it came back
    assert any(members == {"w2"} for _, members, _ in other.calls)
    await a.heartbeat()  # nothing to do when registered
    assert a.alive
    assert a.ignored == b.ignored == frozenset()
    await a.leave()
    await b.leave()


async def test_the_server_killed_and_restarted_loses_no_member(own_zk_server):
    server = own_zk_server
    a, b = member(server, "restart", 4.0), member(server, "restart", 4.0)
    seen_a, seen_b = Recorder(a), Recorder(b)
    await a.join("w1")
    await b.join("w2")
    await seen_a.until(lambda: a.members() == {"w1", "w2"}, 5, "w1 to see w2")
    sessions = a.session_id, b.session_id
    server.kill()
    # alive drops on kazoo's thread at once; the watchers hear of it on the loop
    await seen_a.until(lambda: "w1" not in seen_a.calls[-1][1], 5, "w1 told it is suspended")
    await seen_b.until(lambda: "w2" not in seen_b.calls[-1][1], 5, "w2 told it is suspended")
    assert not a.alive and not b.alive
    assert a.last_change[1] == "w1 (this worker) suspended: connection to ZooKeeper lost"
    await asyncio.to_thread(server.start)  # same port, same dataDir
    await seen_a.until(lambda: a.alive and a.members() == {"w1", "w2"}, 15, "w1 back with w2")
    await seen_b.until(lambda: b.alive and b.members() == {"w1", "w2"}, 15, "w2 back with w1")
    # the server restores the sessions from its dataDir: a worker back within the
    # session timeout keeps its session and node (the usual case here); one whose
    # session expired meanwhile (a slow restart) joined again under a new one
    kept = (a.session_id, b.session_id) == sessions
    # the server's own view agrees: both nodes there, owned by live sessions
    from kazoo.client import KazooClient

    def children() -> list[str]:
        probe = KazooClient(hosts=server.hosts)
        probe.start(5)
        try:
            return sorted(probe.get_children(a.members_path))
        finally:
            probe.stop()
            probe.close()

    assert await asyncio.to_thread(children) == ["w1", "w2"]
    if kept:  # the other worker was never dropped from a view while the server was away
        assert all("w2" in members for _, members, _ in seen_a.calls[1:] if "w1" in members)
    await a.leave()
    await b.leave()


async def test_unreachable_at_start_names_zkhosts():
    hosts = f"127.0.0.1:{free_port()}"
    m = ZkMembership(hosts, "/larbin_test", SESSION, crawl="none", connect_timeout=1.0)
    with pytest.raises(MembershipError) as caught:
        await m.join("w1")
    assert str(caught.value) == f"zkHosts {hosts}: ZooKeeper unreachable (no session within 1 s)"
    assert not m.alive


async def test_a_worker_id_held_by_a_live_session_is_refused(zk_server):
    a, b = member(zk_server, "dup"), member(zk_server, "dup")
    await a.join("w1")
    with pytest.raises(MembershipError, match=r"worker id 'w1' is held by a live ZooKeeper session "
                                              r"\(0x[0-9a-f]+\) at /larbin_test/dup/members/w1"):
        await b.join("w1")
    assert not b.alive
    assert a.alive and a.members() == {"w1"}
    await a.heartbeat()
    assert a.alive  # the refused worker's cleanup did not delete the holder's node
    await a.leave()


# ------------------------------------------------------------------ zkAuth


def zk_client(server, auth: ZkAuth | None = None, *, user: str | None = None):
    """A started kazoo client: anonymous, with ``auth``, or as another digest ``user``."""
    from kazoo.client import KazooClient

    data = []
    if auth is not None:
        data = [("digest", auth.credential)]
    elif user is not None:
        data = [("digest", f"{user}:not-the-password")]
    client = KazooClient(hosts=server.hosts, auth_data=data)
    client.start(5)
    return client


def closing(client) -> None:
    client.stop()
    client.close()


async def condition(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` (every 10 ms) until it holds: the marks are checked on
    kazoo's thread and an ignored node changes no member set, so no watcher wakes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        await asyncio.sleep(0.01)


def foreign_lines(caplog, path: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.getMessage().startswith(f"membership: ignoring {path}:")]


async def test_zkauth_nodes_have_the_digest_acl_only_and_strangers_can_neither_add_nor_delete(zk_server):
    from kazoo.exceptions import NoAuthError
    from kazoo.security import make_digest_acl

    base = f"/secured-{uuid.uuid4().hex[:8]}/crawls"  # nothing of it exists: the crawl makes it all
    m = ZkMembership(zk_server.hosts, base, SESSION, crawl="acl", connect_timeout=5.0, auth=AUTH)
    await m.join("w1")
    ours = [make_digest_acl(AUTH.user, AUTH.password, all=True)]
    admin = await asyncio.to_thread(zk_client, zk_server, AUTH)
    anonymous = await asyncio.to_thread(zk_client, zk_server)
    mallory = await asyncio.to_thread(zk_client, zk_server, user="mallory")
    try:
        parts = base.strip("/").split("/") + ["acl", "members", "w1"]
        made = ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        for path in made:  # every node the crawl created: zkAuth's identity alone, all rights
            acls, _ = admin.get_acls(path)
            assert list(acls) == ours, (path, acls)
        member_path = f"{m.members_path}/w2"
        for stranger in (anonymous, mallory):
            with pytest.raises(NoAuthError):
                stranger.create(member_path, b"{}", ephemeral=True)
            with pytest.raises(NoAuthError):
                stranger.delete(m.node_path)
            with pytest.raises(NoAuthError):
                stranger.get_children(m.members_path)
        assert admin.get_children(m.members_path) == ["w1"]
        assert m.alive and m.members() == {"w1"}
    finally:
        for client in (admin, anonymous, mallory):
            closing(client)
        await m.leave()


async def test_members_without_the_crawls_mark_are_ignored_and_logged_once(zk_server, caplog):
    """A crawl without zkAuth left ``members`` open and a stranger added a member
    there; then the crawl runs with zkAuth: the ACL is closed (a warning), the
    stranger's node is ignored; a node made with the right identity but without
    the mark, and a member's data copied to another name, are ignored too; each
    is said once, however often the view changes."""
    caplog.set_level(logging.WARNING, logger="larbin_py.distributed.membership_zk")
    old = member(zk_server, "marks")  # the same crawl, earlier, without zkAuth
    await old.join("w0")
    stranger = await asyncio.to_thread(zk_client, zk_server)
    admin = await asyncio.to_thread(zk_client, zk_server, AUTH)
    a = ZkMembership(zk_server.hosts, "/larbin_test", SESSION, crawl="marks", connect_timeout=5.0, auth=AUTH)
    b = ZkMembership(zk_server.hosts, "/larbin_test", SESSION, crawl="marks", connect_timeout=5.0, auth=AUTH)
    seen = Recorder(a)
    try:
        ghost = f"{a.members_path}/ghost"
        await asyncio.to_thread(stranger.create, ghost, b'{"pid": 1}')  # persistent: it outlives the stranger
        await old.leave()
        await a.join("w1")
        assert a.members() == {"w1"} and a.ignored == {"ghost"}
        assert foreign_lines(caplog, ghost) == [
            f"membership: ignoring {ghost}: not made by this crawl (no valid zkAuth mark; a persistent node)"]
        closed = [r.getMessage() for r in caplog.records if "had the ACL" in r.getMessage()]
        assert closed == [f"membership: {path} had the ACL world:anyone: set to zkAuth's identity (larbin) only"
                          for path in (a.crawl_path, a.members_path)]
        from kazoo.exceptions import NoAuthError

        with pytest.raises(NoAuthError):  # closed now
            await asyncio.to_thread(stranger.create, f"{a.members_path}/ghost2", b"{}")
        # the right identity, no mark (a node made by hand with the password)
        forged = f"{a.members_path}/forged"
        await asyncio.to_thread(admin.create, forged, b'{"pid": 2}', ephemeral=True)
        await condition(lambda: a.ignored == {"ghost", "forged"}, 5, "the forged node to be ignored")
        await b.join("w2")
        await seen.until(lambda: a.members() == {"w1", "w2"}, 5, "w1 to see w2")
        assert b.members() == {"w1", "w2"} and b.ignored == {"ghost", "forged"}
        # w2's mark copied to another name: it names w2's path, not this one
        data, _ = await asyncio.to_thread(admin.get, b.node_path)
        copy = f"{a.members_path}/copy"
        await asyncio.to_thread(admin.create, copy, data, ephemeral=True)
        await condition(lambda: a.ignored == b.ignored == {"ghost", "forged", "copy"}, 5, "the copy to be ignored")
        await b.leave()
        await seen.until(lambda: a.members() == {"w1"}, 5, "w1 to see w2 leave")
        assert a.ignored == {"ghost", "forged", "copy"}
        for path in (ghost, forged, copy):  # once per znode: a's and b's line for each, no more
            assert len(foreign_lines(caplog, path)) == 2, foreign_lines(caplog, path)
        assert all(AUTH.password not in r.getMessage() for r in caplog.records)
    finally:
        closing(stranger)
        closing(admin)
        await a.leave()
        await b.leave()


async def test_a_wrong_zkauth_password_is_refused_naming_the_node_not_the_password(zk_server):
    right = ZkMembership(zk_server.hosts, "/larbin_test", SESSION, crawl="wrong", connect_timeout=5.0, auth=AUTH)
    await right.join("w1")
    wrong = ZkMembership(zk_server.hosts, "/larbin_test", SESSION, crawl="wrong", connect_timeout=5.0,
                         auth=ZkAuth(AUTH.user, "another-password"))
    none = member(zk_server, "wrong")
    try:
        with pytest.raises(MembershipError) as caught:
            await wrong.join("w2")
        message = str(caught.value)
        assert message.startswith(f"zkHosts {zk_server.hosts}: ZooKeeper refused user 'larbin' access to "
                                  f"/larbin_test/wrong (NoAuth): a node on the path belongs to another identity")
        assert "another-password" not in message and "\n" not in message
        with pytest.raises(MembershipError, match=r"refused access to /larbin_test/wrong/members \(NoAuth\): "
                                                  r"the crawl's nodes have an ACL: set zkAuth"):
            await none.join("w3")
        assert right.alive and right.members() == {"w1"}
    finally:
        await right.leave()


@pytest.mark.slow
@pytest.mark.async_timeout(150)
async def test_a_crawl_with_zkauth_ends_despite_a_fake_member(tmp_path, redis_server, zk_server):
    """The issue's attack, end to end: a stranger added a member to the crawl's
    open members node (left by a run without zkAuth); without the check, the
    partitions the map gives it are never crawled and the crawl never ends.
    Two workers with zkAuth close the node, ignore the fake member (one line
    each on stderr), and crawl everything (tests/helpers/distributed.py's checks:
    exact coverage, politeness, conservation, both workers in the view)."""
    from helpers.distributed import CRAWL, ZK_SESSION, crawl_with

    zk_path = f"/e2e-auth-{uuid.uuid4().hex[:8]}"
    ghost = f"{zk_path}/{CRAWL}/members/ghost"
    stranger = await asyncio.to_thread(zk_client, zk_server)
    try:
        await asyncio.to_thread(stranger.create, ghost, b'{"pid": 1}', makepath=True)
    finally:
        closing(stranger)
    await crawl_with(tmp_path, redis_server, 2, membership="zookeeper", zk_hosts=zk_server.hosts,
                     zk_path=zk_path, zk_session_timeout=ZK_SESSION, zk_auth=AUTH)
    for name in ("w0", "w1"):
        log = (tmp_path / f"{name}.err").read_text()
        said = [line for line in log.splitlines() if "ghost" in line]
        assert said == [f"membership: ignoring {ghost}: not made by this crawl (no valid zkAuth mark; "
                        "a persistent node)"], log[-2000:]
        assert AUTH.password not in log


# ------------------------------------------------------------------ no server


class FixedMembership:
    """A membership whose answers are given (the snapshot reads only the Protocol)."""

    source = "redis"
    alive = False
    last_change = (1764063000.2345, "w2 left (key expired)")

    def members(self) -> frozenset[str]:
        return frozenset({"w3", "w1"})


def test_membership_snapshot_is_the_dashboard_view():
    assert membership_snapshot(FixedMembership()) == {
        "source": "redis", "members": ["w1", "w3"], "alive": False,
        "last_change": {"at": 1764063000.234, "what": "w2 left (key expired)"}}


class ZkConfig:
    membership = "zookeeper"
    zk_hosts = "zk1:2181,zk2:2182"
    zk_path = "/crawls"
    zk_session_timeout = 5.0


def test_the_factory_builds_the_named_membership(monkeypatch):
    m = make_membership(ZkConfig(), crawl="c1")
    assert isinstance(m, ZkMembership)
    assert (m.hosts, m.members_path, m.session_timeout) == ("zk1:2181,zk2:2182", "/crawls/c1/members", 5.0)
    assert m.auth is None

    class ZkAuthConfig(ZkConfig):
        zk_auth = AUTH

    assert make_membership(ZkAuthConfig(), crawl="c1").auth is AUTH

    class RedisConfig:
        membership = "redis"

    made = FixedMembership()
    assert make_membership(RedisConfig(), crawl="c1", redis_membership=lambda: made) is made
    monkeypatch.setitem(sys.modules, "kazoo.client", None)  # kazoo not installed
    with pytest.raises(MembershipError, match=r"^membership zookeeper needs kazoo: pip install larbin_py\[zk\]$"):
        make_membership(ZkConfig(), crawl="c1")


def test_bad_names_are_refused_before_connecting():
    with pytest.raises(ValueError, match="host:port"):
        ZkMembership("zk1", "/x", 1.0)
    with pytest.raises(ValueError, match="absolute znode path"):
        ZkMembership("zk1:2181", "x", 1.0)
    with pytest.raises(MembershipError, match="crawl name 'a/b' cannot name a znode"):
        ZkMembership("zk1:2181", "/x", 1.0, crawl="a/b")


# ------------------------------------------------------------------ the zkAuth key

SEED = "startUrl http://a.example/\n"


def test_zkauth_is_read_round_trips_and_is_shown_without_its_password():
    config = parse_config_text(SEED + "membership zookeeper\nzkAuth digest larbin:zk-s3cret:pass # the crawl's\n")
    assert config.zk_auth == ZkAuth("larbin", "zk-s3cret:pass")  # the password may hold ':'
    assert config.zk_auth.credential == "larbin:zk-s3cret:pass"
    assert parse_config_text(SEED).zk_auth is None
    # format_config writes it (the launcher's workers read their config from that text) ...
    text = format_config(config)
    assert "zkAuth digest larbin:zk-s3cret:pass" in text.splitlines()
    assert parse_config_text(text) == config
    # ... and every form meant for a person hides it
    key = next(k for k in KEYS if k.name == "zkAuth")
    assert key.shown(config.zk_auth) == ["zkAuth digest larbin:***"]
    assert str(config.zk_auth) == "digest larbin:***"
    for shown in (repr(config), str(config), repr(config.zk_auth)):
        assert "zk-s3cret" not in shown
    assert config.replace(zk_auth="digest other:another-secret").zk_auth.user == "other"
    assert config.replace(zk_auth=None).zk_auth is None


@pytest.mark.parametrize("value,message", [
    ("", "expected 'digest USER:PASSWORD' (2 words), got 0 words (not shown: one may be the password)"),
    ("larbin:zk-s3cret-password", "expected 'digest USER:PASSWORD' (2 words), got 1 word (not shown: "
                                  "one may be the password)"),
    ("digest larbin: zk-s3cret-password", "expected 'digest USER:PASSWORD' (2 words), got 3 words (not shown: "
                                          "one may be the password)"),
    ("sasl larbin:zk-s3cret-password", "expected 'digest USER:PASSWORD': the first word must be digest "
                                       "(ZooKeeper's user:password scheme, the only one supported)"),
    ("digest zk-s3cret-password", "expected 'digest USER:PASSWORD': the second word must be a user name, "
                                  "':' and the password"),
    ("digest :zk-s3cret-password", "expected 'digest USER:PASSWORD': the second word must be a user name, "
                                   "':' and the password"),
    ("digest lar/bin:zk-s3cret-password", "expected a user name of letters, digits, '.', '_', '@' or '-' "
                                          "(at most 64) before the ':'"),
    ("digest larbin:zk-s3cr", "the password is too short (7 characters): at least 8"),
])
def test_a_malformed_zkauth_is_one_line_naming_file_line_and_key_never_the_password(value, message):
    with pytest.raises(ConfigError) as caught:
        parse_config_text(SEED + f"zkAuth {value}\n", "crawl.conf")
    assert str(caught.value) == f"crawl.conf:2: zkAuth: {message}"
    assert "zk-s3cr" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:  # --set is checked alike
        parse_config_text(SEED, "crawl.conf", [("zkAuth", value)])
    assert str(caught.value) == f"--set:1: zkAuth: {message}"
    with pytest.raises(ConfigError) as caught:  # and a Config built in code
        Config(zk_auth="digest larbin:zk-s3cr")
    assert str(caught.value) == "zkAuth: the password is too short (7 characters): at least 8"
