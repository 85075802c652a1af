"""Explicit state machines: transitions as data, applied by one function.

In h11's style, a protocol object's states change only through a table of
the allowed ``(state, event) -> new state`` and :func:`step`, which looks the
pair up and raises :class:`IllegalTransition` when the table does not have
it.  The tables are then the whole story of a state machine, readable (and
tested) in one place, and a wrong transition fails where it happens instead
of leaving a site or a connection in a state nothing will ever leave.

The tables: a site's DNS and robots.txt states
(:data:`larbin_py.frontier.sites.DNS_TRANSITIONS`, ``ROBOTS_TRANSITIONS``),
a fetcher connection's (:data:`larbin_py.net.http.CONN_TRANSITIONS`) and a
distributed worker's partitions
(:data:`larbin_py.distributed.ownership.OWNERSHIP_TRANSITIONS`).  An
illegal transition is a bug in the crawler, never the fault of a hostile
server: what the web sends is an event the tables allow or a value
(``FetchResult.error``), not an exception.
"""

from __future__ import annotations

from typing import Hashable, Mapping, TypeVar

__all__ = ["IllegalTransition", "step"]

S = TypeVar("S", bound=Hashable)


class IllegalTransition(RuntimeError):
    """A state machine was given an event its table does not allow in its state."""


def step(table: Mapping[tuple[S, str], S], state: S, event: str, machine: str) -> S:
    """The state ``event`` leads to from ``state`` in ``table``.

    Raises :class:`IllegalTransition` (naming ``machine``) when ``table`` has
    no such transition.  One dict look-up: it runs for every request.
    """
    new = table.get((state, event))
    if new is None:
        raise IllegalTransition(f"{machine}: no transition from {state!r} on {event!r}")
    return new
