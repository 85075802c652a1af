"""Membership on ZooKeeper: an ephemeral znode per worker, a children watch.

``membership zookeeper`` (larbin.conf) makes each worker hold the ephemeral
node ``<zkPath>/<crawl>/members/<workerId>``; the node lives exactly as long
as the worker's ZooKeeper session, so a worker killed with SIGKILL leaves
the others' :meth:`ZkMembership.members` when the server expires its session
(``zkSessionTimeout`` after it was last heard) — no polling.  A children
watch keeps the member view; leases and their fencing tokens stay in Redis
(docs/distributed-design.md, "Membership, leases and fencing"; docs/membership.md), this module only answers "who is alive".

Threads.  kazoo runs its own connection thread and calls back on a worker
thread of its own: the state listener and the children watch never touch
the member view themselves, they hop to the event loop with
``loop.call_soon_threadsafe``, so watchers run on the loop.  Blocking kazoo
calls (connect, create, delete) run in ``asyncio.to_thread``, never on the
loop.  One exception, on purpose: the listener clears :attr:`alive`'s
connection flag on its own thread (a plain attribute store), so a worker
whose loop is busy sees ``alive`` False at once, not one loop turn later.

Margins.  kazoo reports SUSPENDED when it has not heard the server for
about two thirds of the negotiated session timeout (or at once when the
connection breaks); the server expires the session only after the full
timeout, and only then can the others see this worker leave.  ``alive``
turns False at SUSPENDED, so a worker stops starting requests before the
others even learn it is gone; its partitions' leases in Redis last
``leaseTtl`` from their last renewal, so keep ``zkSessionTimeout`` below
``leaseTtl`` (defaults 6 s and 10 s): the map the others compute from the
ZooKeeper view then never hands out a partition whose lease is still held,
and the Redis fence (``own:{p}``) stays the last word either way.

Authentication (``zkAuth digest USER:PASSWORD``).  The session carries
the digest identity (kazoo's ``auth_data``; kazoo sends it again on every
new connection), and every znode the crawl creates -- the parts of zkPath
it has to make, ``<zkPath>/<crawl>``, ``.../members`` and each member --
has one ACL entry, that identity with every permission: a client without
the password cannot list, add or delete members.  ``<zkPath>/<crawl>`` and
``members`` already there with another ACL (made by a crawl without
zkAuth) are set to it at join (a warning line), or the join fails naming
the node when ZooKeeper refuses that.  A member's data carries a mark:
blake2b keyed with the password, over the node's path and the session
that owns it (:func:`member_mark`); a child of ``members`` without a valid
mark -- made while the node was open, by another identity, by hand, or a
persistent node -- is left out of :meth:`ZkMembership.members`, with one
warning line per znode.  The marks are checked on kazoo's callback
thread, one pipelined read of every child per change of the children, under
a lock, always on the latest list; a check that failed (the connection
lost meanwhile) is done again at the next :meth:`ZkMembership.heartbeat`.
Without zkAuth the nodes are open (world:anyone) and every child counts:
docs/membership.md, *Threat model*, says what that leaves unprotected.

Reconnection.  The client retries forever.  The same session back (a short
network blip, or a server restarted on its own dataDir within the timeout:
ZooKeeper persists sessions) keeps the node: ``alive`` is True again.  A
new session (the old one expired) means the node is gone: the worker
creates it again (rejoins), and ``alive`` turns True once it is there.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import socket
import threading
import time
from typing import Any, Callable

from ..config import ZkAuth, check_zk_hosts, check_zk_path
from .membership import MembershipChange, MembershipError

__all__ = ["ZkMembership", "ZK_INSTALL_HINT", "mark_key", "member_mark"]

log = logging.getLogger(__name__)
#: kazoo's own logger: its connection retries log a WARNING each ("Connection dropped"...),
#: which a crawl with no logging set up would print to stderr many times a second while
#: ZooKeeper is away; the membership's own sentences (last_change, the worker's lines) say it.
kazoo_log = logging.getLogger(__name__ + ".kazoo")
kazoo_log.setLevel(logging.ERROR)

#: Said when kazoo is missing (it is an optional extra).
ZK_INSTALL_HINT = "membership zookeeper needs kazoo: pip install larbin_py[zk]"


def mark_key(auth: ZkAuth) -> bytes:
    """The key of the members' marks, derived from the zkAuth identity (32 bytes)."""
    return hashlib.blake2b(auth.credential.encode(), digest_size=32, person=b"larbin_py zkAuth").digest()


def member_mark(key: bytes, path: str, owner: int) -> str:
    """The mark of the member node at ``path`` owned by session ``owner`` (hex):
    only a holder of the zkAuth password can make it, and it holds for that
    path and that session only (copied to another name, or kept by a
    persistent node whose owner is 0, it does not match)."""
    message = f"{path}\n{owner:x}".encode()
    return hashlib.blake2b(message, key=key, digest_size=32, person=b"larbin_py member").hexdigest()


def is_marked(key: bytes, path: str, data: bytes, owner: int) -> bool:
    """Does the member node at ``path`` (its ``data``, its session ``owner``) carry our mark?"""
    try:
        mark = json.loads(data)["mark"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(mark, str) and owner != 0 and hmac.compare_digest(mark, member_mark(key, path, owner))


def _describe_acl(acls: Any) -> str:
    """An ACL for a message: scheme and user (a digest's hash is left out)."""
    out = []
    for acl in acls or ():
        ident = acl.id.id.split(":", 1)[0] if acl.id.scheme == "digest" else acl.id.id
        out.append(f"{acl.id.scheme}:{ident}")
    return ",".join(out) or "none"


def _check_name(what: str, name: str) -> str:
    if not name or "/" in name or name in (".", "..") or any(c.isspace() or ord(c) < 32 for c in name):
        raise MembershipError(f"{what} {name!r} cannot name a znode (no '/', spaces or control characters)")
    return name


class ZkMembership:
    """The :class:`~larbin_py.distributed.membership.Membership` of one worker, on ZooKeeper.

    ``hosts`` is zkHosts (``host:port,...``), ``path`` zkPath, ``crawl`` the
    crawl's name (workers of one crawl share it), ``session_timeout`` the
    ZooKeeper session timeout in seconds (the server clamps it to
    [2, 20] × its tickTime), ``connect_timeout`` how long :meth:`join`
    waits for a first connection (default: the session timeout, at least
    2 s), ``auth`` zkAuth (None: open nodes, every child a member).
    """

    source = "zookeeper"

    def __init__(self, hosts: str, path: str = "/larbin_py", session_timeout: float = 6.0, *,
                 crawl: str = "default", connect_timeout: float | None = None,
                 auth: ZkAuth | None = None) -> None:
        self.hosts = check_zk_hosts(hosts)
        self.base = check_zk_path(path)
        self.crawl = _check_name("crawl name", crawl)
        self.session_timeout = float(session_timeout)
        self.connect_timeout = connect_timeout if connect_timeout is not None else max(2.0, self.session_timeout)
        self.crawl_path = f"{self.base.rstrip('/')}/{self.crawl}"
        self.members_path = f"{self.crawl_path}/members"
        self.auth = auth
        self._mark_key = mark_key(auth) if auth is not None else None
        #: Children of ``members`` left out for want of a valid mark (zkAuth only).
        self.ignored: frozenset[str] = frozenset()
        self._logged: set[tuple[str, int]] = set()  # (name, czxid) of the foreign nodes said
        self._verify_lock = threading.Lock()
        self._children: frozenset[str] = frozenset()  # the latest children list (zkAuth only)
        self._verify_failed = False
        self.worker_id: str | None = None
        self.node_path: str | None = None
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._view: frozenset[str] = frozenset()
        self._reported: frozenset[str] | None = None
        self._watchers: list[Callable[[frozenset[str]], None]] = []
        self._last_change: MembershipChange | None = None
        # written by kazoo's threads (plain stores), read on the loop
        self._connected = False
        self._node_session: int | None = None
        self._joined = False
        self._closed = False
        self._rejoining: asyncio.Task | None = None
        self._visible = asyncio.Event()

    # ------------------------------------------------------------ the Protocol

    async def join(self, worker_id: str) -> None:
        try:
            from kazoo.client import KazooClient
            from kazoo.handlers.threading import KazooTimeoutError
            from kazoo.recipe.watchers import ChildrenWatch
        except ImportError:
            raise MembershipError(ZK_INSTALL_HINT) from None
        self.worker_id = _check_name("worker id", worker_id)
        self.node_path = f"{self.members_path}/{worker_id}"
        self._loop = asyncio.get_running_loop()
        auth = {}
        if self.auth is not None:
            from kazoo.security import make_digest_acl

            auth = dict(auth_data=[(self.auth.scheme, self.auth.credential)],
                        default_acl=[make_digest_acl(self.auth.user, self.auth.password, all=True)])
        self._client = KazooClient(
            hosts=self.hosts, timeout=self.session_timeout, logger=kazoo_log,
            # retry for ever, quickly: a restarted server is found within a second
            connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 2, "max_delay": 1.0},
            command_retry={"max_tries": 3, "delay": 0.05, "backoff": 2, "max_delay": 1.0}, **auth)
        self._client.add_listener(self._on_state)
        try:
            await asyncio.to_thread(self._client.start, self.connect_timeout)
        except KazooTimeoutError:
            raise MembershipError(f"zkHosts {self.hosts}: ZooKeeper unreachable (no session within "
                                  f"{self.connect_timeout:g} s)") from None
        from kazoo.exceptions import NoAuthError

        try:
            await asyncio.to_thread(self._client.ensure_path, self.members_path)
            if self.auth is not None:
                await asyncio.to_thread(self._secure)
            await self._register()
            self._joined = True
            await asyncio.to_thread(ChildrenWatch, self._client, self.members_path, self._on_children)
            await asyncio.wait_for(self._visible.wait(), self.connect_timeout + self.session_timeout)
        except BaseException as exc:
            await self._shutdown(delete=True)
            if isinstance(exc, (MembershipError, asyncio.CancelledError)):
                raise
            if isinstance(exc, NoAuthError):
                raise MembershipError(self._refused(self.members_path)) from None
            raise MembershipError(f"zkHosts {self.hosts}: cannot join {self.members_path}: "
                                  f"{type(exc).__name__} {exc}".rstrip()) from None
        self._note(f"{worker_id} joined (session {self._node_session:#x})")

    async def heartbeat(self) -> None:
        """kazoo pings the server itself; here a rejoin that failed is tried again,
        and a node of ours missing from the view (deleted by hand) is checked
        and created again."""
        if not self._joined or self._closed or not self._connected:
            return
        if self._verify_failed:
            await asyncio.to_thread(self._verify_again)
        if self._registered() and self.worker_id not in self._view:
            stat = await asyncio.to_thread(self._client.exists, self.node_path)
            if stat is None or stat.ephemeralOwner != self._node_session:
                self._node_session = None
                self._note(f"{self.worker_id} (this worker) left: its node was deleted")
                self._refresh()
        if not self._registered():
            await self._rejoin()

    def members(self) -> frozenset[str]:
        if self.worker_id is None:
            return frozenset()
        if self.alive:
            return self._view | {self.worker_id}
        return self._view - {self.worker_id}

    def watch(self, callback: Callable[[frozenset[str]], None]) -> None:
        self._watchers.append(callback)

    @property
    def alive(self) -> bool:
        return self._joined and not self._closed and self._connected and self._registered()

    @property
    def session_lost(self) -> bool:
        """True once this worker's node is known gone (its session expired, or the node was
        deleted) and not yet created again: the others see it gone.  False while merely
        disconnected (SUSPENDED), when the same session may come back."""
        return self._joined and not self._closed and self._node_session is None

    @property
    def last_change(self) -> MembershipChange | None:
        return self._last_change

    @property
    def session_id(self) -> int | None:
        """The current ZooKeeper session (None while disconnected): tests expire it by id."""
        cid = self._client.client_id if self._client is not None else None
        return cid[0] if cid else None

    async def leave(self) -> None:
        if self._closed:
            return
        was_alive = self.alive
        await self._shutdown(delete=True)
        if was_alive:
            self._note(f"{self.worker_id} left (clean stop)")

    # ------------------------------------------------------------ kazoo's threads

    def _on_state(self, state: str) -> None:
        """kazoo's state listener (its thread; must not block): flag, then hop."""
        if state == "CONNECTED":
            self._connected = True
        else:  # SUSPENDED or LOST: from now on alive is False
            self._connected = False
            if state == "LOST":
                self._node_session = None
        self._hop(self._after_state, state)

    def _on_children(self, children: list[str]) -> bool | None:
        """The children watch (kazoo's thread): hop with a copy (with zkAuth, of the
        children that carry our mark); False ends the watch."""
        if self._closed:
            return False
        if self._mark_key is None:
            self._hop(self._apply_view, frozenset(children))
            return None
        with self._verify_lock:
            self._children = frozenset(children)
            self._verify_latest()
        return None

    def _verify_again(self) -> None:
        """(A thread.) The heartbeat's retry of a check that failed."""
        with self._verify_lock:
            if self._verify_failed and not self._closed:
                self._verify_latest()

    def _verify_latest(self) -> None:
        """(Under the lock, a thread.) Check the latest children list's marks and hop
        the marked ones to the loop; on a lost connection, leave it for the heartbeat."""
        try:
            view = self._marked(self._children)
        except Exception as exc:
            self._verify_failed = True
            log.info("membership: checking the members' marks failed (%s); retrying at the heartbeat",
                     type(exc).__name__)
            return
        self._verify_failed = False
        self._hop(self._apply_view, view)

    def _marked(self, children: frozenset[str]) -> frozenset[str]:
        """The children whose node carries a valid mark; the others are logged once a znode."""
        from kazoo.exceptions import NoAuthError, NoNodeError

        client, key = self._client, self._mark_key
        timeout = self.connect_timeout + self.session_timeout
        reads = {name: client.get_async(f"{self.members_path}/{name}") for name in sorted(children)}
        good, foreign = set(), set()
        for name, read in reads.items():
            path = f"{self.members_path}/{name}"
            try:
                data, stat = read.get(timeout=timeout)
            except NoNodeError:  # gone since the list was read: the next event drops it
                continue
            except NoAuthError:  # its ACL shuts our identity out: not one of ours
                data, stat = None, None
            if stat is not None and is_marked(key, path, data, stat.ephemeralOwner):
                good.add(name)
                continue
            foreign.add(name)
            said = (name, stat.czxid if stat is not None else -1)
            if said not in self._logged:
                self._logged.add(said)
                what = ("unreadable to zkAuth's identity" if stat is None else
                        "a persistent node" if not stat.ephemeralOwner else
                        f"owned by session {stat.ephemeralOwner:#x}")
                log.warning("membership: ignoring %s: not made by this crawl (no valid zkAuth mark; %s)",
                            path, what)
        self.ignored = frozenset(foreign)
        return frozenset(good)

    def _hop(self, fn: Callable[..., Any], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed meanwhile: nobody left to tell
            pass

    # ------------------------------------------------------------ the loop

    def _after_state(self, state: str) -> None:
        if self._closed or not self._joined:
            return
        me = self.worker_id
        if state == "SUSPENDED":
            self._note(f"{me} (this worker) suspended: connection to ZooKeeper lost")
        elif state == "LOST":
            self._note(f"{me} (this worker) left: its ZooKeeper session expired")
        elif state == "CONNECTED":
            if self._registered():
                self._note(f"{me} (this worker) reconnected (session {self._node_session:#x} kept)")
            elif self._rejoining is None or self._rejoining.done():
                self._rejoining = asyncio.ensure_future(self._rejoin())
        self._refresh()

    def _apply_view(self, view: frozenset[str]) -> None:
        if self._closed:
            return
        old, self._view = self._view, view
        for worker in sorted(view - old):
            if worker != self.worker_id:
                self._note(f"{worker} joined")
        for worker in sorted(old - view):
            if worker != self.worker_id:
                self._note(f"{worker} left (its session ended or it stopped)")
        if self.worker_id in view:
            self._visible.set()
        self._refresh()

    def _refresh(self) -> None:
        """Call the watchers when the member set (as :meth:`members` answers) changed."""
        if not self._joined or self._closed:
            return
        now = self.members()
        if now == self._reported:
            return
        self._reported = now
        for callback in list(self._watchers):
            try:
                callback(now)
            except Exception:  # one bad watcher must not silence the others
                log.exception("membership watcher %r failed", callback)

    def _note(self, what: str) -> None:
        self._last_change = (time.time(), what)
        log.info("membership: %s", what)

    def _registered(self) -> bool:
        session = self._node_session
        return session is not None and session == self.session_id

    async def _rejoin(self) -> None:
        try:
            await self._register()
        except MembershipError as exc:
            self._note(f"{self.worker_id} (this worker) could not rejoin: {exc}")
            return
        except Exception as exc:  # connection lost again: the next CONNECTED or heartbeat retries
            log.info("membership: rejoin of %s failed (%s); retrying later", self.worker_id, exc)
            return
        if self._registered():
            self._note(f"{self.worker_id} (this worker) rejoined (session {self._node_session:#x})")
        self._refresh()

    def _secure(self) -> None:
        """(A thread.) The crawl's own nodes (``<zkPath>/<crawl>`` and ``members``) get
        zkAuth's ACL when they have another (made by a crawl without zkAuth)."""
        from kazoo.exceptions import NoAuthError

        client, ours = self._client, list(self._client.default_acl)
        for path in (self.crawl_path, self.members_path):
            try:
                acls, _stat = client.get_acls(path)
                if list(acls) == ours:
                    continue
                client.set_acls(path, ours)
            except NoAuthError:
                raise MembershipError(self._refused(path)) from None
            log.warning("membership: %s had the ACL %s: set to zkAuth's identity (%s) only",
                        path, _describe_acl(acls), self.auth.user)

    def _refused(self, path: str) -> str:
        """The sentence for ZooKeeper's NoAuth at ``path`` (never the password)."""
        if self.auth is None:
            return (f"zkHosts {self.hosts}: ZooKeeper refused access to {path} (NoAuth): the crawl's "
                    "nodes have an ACL: set zkAuth to the crawl's identity")
        return (f"zkHosts {self.hosts}: ZooKeeper refused user {self.auth.user!r} access to {path} (NoAuth): "
                "a node on the path belongs to another identity (a wrong zkAuth password, another "
                "crawl's zkAuth, or made by hand): use the crawl's zkAuth, another zkPath, or delete the node")

    async def _register(self) -> None:
        self._node_session = await asyncio.to_thread(self._create_node)

    def _create_node(self) -> int:
        """Create our ephemeral node (a thread: blocking); the owning session's id.

        A node already there is ours when its ephemeral owner is our session
        (a create whose answer was lost); any other owner is a live worker
        with the same id.
        """
        from kazoo.exceptions import NodeExistsError

        client, path = self._client, self.node_path
        timeout = self.connect_timeout + self.session_timeout
        waited = False
        for _ in range(3):
            marked_for = self.session_id
            holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
            if self._mark_key is not None and marked_for is not None:
                holder["mark"] = member_mark(self._mark_key, path, marked_for)
            try:
                client.create_async(path, json.dumps(holder).encode(), ephemeral=True).get(timeout=timeout)
            except NodeExistsError:
                pass
            gone = threading.Event()
            stat = client.exists_async(path, watch=lambda event: gone.set()).get(timeout=timeout)
            if stat is None:  # its owner's session ended just now: try again
                continue
            session = self.session_id
            if session is not None and stat.ephemeralOwner == session:
                if self._mark_key is not None and session != marked_for:
                    # a new session between the mark and the create: the mark names the old one
                    client.delete_async(path, version=stat.version).get(timeout=timeout)
                    continue
                return session
            if not waited and self._holder_is_dead(client.get_async(path).get(timeout=timeout)[0]):
                # a worker of this id killed on this machine: its session ends
                # within the session timeout, then the id is free
                log.info("membership: %s is held by a dead process here; waiting for its session to end",
                         path)
                waited = True
                if gone.wait(self.session_timeout * 2 + 2):
                    continue
            raise MembershipError(
                f"zkHosts {self.hosts}: worker id {self.worker_id!r} is held by a live ZooKeeper session "
                f"({stat.ephemeralOwner:#x}) at {path}: another worker runs with this id (or one killed "
                f"on another machine less than zkSessionTimeout ago)")
        raise MembershipError(f"zkHosts {self.hosts}: could not create {path}")

    @staticmethod
    def _holder_is_dead(data: bytes) -> bool:
        """True when the node's data names a process of this machine that is gone."""
        try:
            holder = json.loads(data)
            pid, host = int(holder["pid"]), holder["host"]
        except (ValueError, KeyError, TypeError):
            return False
        if host != socket.gethostname() or pid == os.getpid() or pid <= 0:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:  # exists, another user's
            return False
        return False

    async def _shutdown(self, *, delete: bool) -> None:
        self._closed = True
        client = self._client
        if client is None:
            return
        if self._rejoining is not None and not self._rejoining.done():
            self._rejoining.cancel()
        session = self._node_session if delete else None
        self._node_session = None
        await asyncio.to_thread(self._close_client, client, self.node_path if session else None, session)

    @staticmethod
    def _close_client(client: Any, path: str | None, session: int | None) -> None:
        """Delete our node if still ours, then stop kazoo's threads (blocking)."""
        try:
            if path is not None and client.connected:
                stat = client.exists(path)
                if stat is not None and stat.ephemeralOwner == session:
                    client.delete(path, version=stat.version)
        except Exception as exc:  # the session ends with stop() anyway: the node goes with it
            log.info("membership: delete of %s failed (%s)", path, exc)
        finally:
            client.stop()
            client.close()

