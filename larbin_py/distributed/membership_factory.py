"""Which :class:`Membership` a crawl uses (``membership`` in larbin.conf), and its dashboard view.

``make_membership`` is the one place that reads the membership keys:
``membership zookeeper`` gives a :class:`~larbin_py.distributed.membership_zk.ZkMembership`
on ``zkHosts``/``zkPath``/``zkSessionTimeout`` (kazoo, an optional extra, is
imported only then); ``membership redis`` (the default) gives what the
caller's ``redis_membership`` builds, since the Redis membership shares the
coordinator's Redis client and key names, which only the coordinator knows.

``membership_snapshot`` is what the dashboard and the cluster stats show
of any membership: its source, the live workers, whether this worker is
alive, the last change of the member set.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from .membership import Membership, MembershipError

__all__ = ["make_membership", "membership_snapshot"]


def make_membership(config: Any, *, crawl: str,
                    redis_membership: Callable[[], Membership] | None = None) -> Membership:
    """The membership ``config.membership`` names, not yet joined.

    Raises :class:`MembershipError` (the command line exits 2 with it) when
    kazoo is missing for ``membership zookeeper``.
    """
    kind = getattr(config, "membership", "redis")
    if kind == "zookeeper":
        try:
            importlib.import_module("kazoo.client")
        except ImportError:
            from .membership_zk import ZK_INSTALL_HINT

            raise MembershipError(ZK_INSTALL_HINT) from None
        from .membership_zk import ZkMembership

        return ZkMembership(config.zk_hosts, config.zk_path, config.zk_session_timeout, crawl=crawl,
                            auth=getattr(config, "zk_auth", None))
    if kind == "redis":
        if redis_membership is None:
            raise ValueError("membership redis: the coordinator must pass redis_membership")
        return redis_membership()
    raise ValueError(f"unknown membership {kind!r}")


def membership_snapshot(m: Membership) -> dict[str, Any]:
    """A JSON-ready view for the dashboard: source, members, alive, last_change.

    ``last_change`` is ``{"at": wall time, "what": sentence}`` or None.
    """
    change = m.last_change
    return {
        "source": m.source,
        "members": sorted(m.members()),
        "alive": bool(m.alive),
        "last_change": None if change is None else {"at": round(change[0], 3), "what": change[1]},
    }
