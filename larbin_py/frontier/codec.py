"""The frontier's checkpoint state, to and from JSON, and the sites' waits in wall-clock time.

A checkpoint (``stateDir/checkpoint.json``, section ``frontier``) holds
what a restart needs of the frontier besides the records it carries (those
go to a carry file, larbin_py.state):

``stores``
    each lane's read position ``[segment, offset]`` (``main``,
    ``priority``, ``wait``) and ``wait_end``, the wait lane's write position;
``fetched``, ``forgotten``, ``retried``
    the outcome counters (``forgotten`` and ``retried`` by reason);
``waits``
    ``{site key: wall time}``: when each site's next request may start, for
    the sites still held back (a Crawl-delay, a Retry-After).

:func:`snapshot` takes a frontier's :class:`FrontierState` and the records
it must carry (flushing its lanes first); :func:`restore` puts them back
into a frontier built on the lanes reopened at those positions.
:func:`encode` writes a :class:`FrontierState` as that JSON object;
:func:`decode` reads one back and checks it: a damaged or hand-edited
section is a :class:`CheckpointError` whose one line names the field and
what is wrong with it (the crawl state reports it with the file's path),
never a ``KeyError`` from deep in a restart.

Waits cross a restart as wall-clock times (the loop's clock starts anew in
each process), as they cross a hand-over to another worker: the frontier's
``site_waits`` and ``restore_waits`` convert them.  No I/O but the lanes'
flush, no clock (``now`` and ``wall`` come in).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .store import UrlRecord

if TYPE_CHECKING:
    from .protocol import Scheduler

__all__ = ["FrontierState", "CheckpointError", "snapshot", "restore", "encode", "decode"]

#: The lanes whose read positions a checkpoint holds.
LANES = ("main", "priority", "wait")


class CheckpointError(ValueError):
    """The frontier's section of a checkpoint cannot be used (the message names the field)."""


@dataclass(slots=True)
class FrontierState:
    """What a restart needs of the frontier (see the module docstring)."""

    stores: dict[str, list[int]]
    fetched: int = 0
    forgotten: dict[str, int] = field(default_factory=dict)
    retried: dict[str, int] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)
    #: The sites' budget counts (larbin_py.frontier.budget): ``{site key: [pages, bytes]}``.
    budgets: dict[str, list[int]] = field(default_factory=dict)


def snapshot(fr: "Scheduler", now: float, wall: float, *, sync: bool = True) -> tuple[FrontierState, list[UrlRecord]]:
    """What a restart needs of ``fr``: ``(state, carry)``; flushes its lanes first.

    ``carry`` lists every record held in memory and not done: the lanes'
    RAM windows, the site FIFOs and parks, and the pages in flight (a page counts as
    done only once its outcome is recorded).  ``state`` holds the lanes'
    read positions (the first record not in a RAM window), the counters,
    and the waits of the sites held back more than a second, as wall-clock
    times.  ``sync=False`` leaves the fsync of the lanes to the caller (the
    engine's writer thread).
    """
    lanes = fr.lanes
    lanes.flush(sync=sync)
    carry = lanes.ram_records()
    carry.extend(req.record for req in fr.running_requests() if req.record is not None)
    for site in fr.sites.values():
        carry.extend(site.fifo)
        carry.extend(site.parked)
    state = FrontierState(stores=lanes.positions(), fetched=fr.fetched, forgotten=dict(fr.forgotten),
                          retried=dict(fr.retried), waits=fr.site_waits(None, now, wall, ahead=1.0),
                          budgets=fr.budget.to_state())
    return state, carry


def restore(fr: "Scheduler", state: FrontierState, carry: list[UrlRecord], now: float, wall: float) -> None:
    """Continue ``fr`` from a checkpoint: counters, carried records, site waits.

    ``fr``'s lanes must have been reopened from ``state.stores``.  Carried
    records go to the priority lane (they were already being worked on);
    ``taken`` is recounted (:meth:`~larbin_py.frontier.scheduler.Frontier.recount`)
    so that conservation holds over what is really on disk, records queued
    after the checkpoint included.
    """
    for rec in carry:
        fr.lanes.prio.push(rec)
    fr.restore_waits(state.waits, now, wall)
    fr.budget.restore(state.budgets)
    fr.recount(state.fetched, state.forgotten, state.retried)


def encode(state: FrontierState) -> dict:
    """``state`` as a JSON-ready object."""
    return {"stores": {name: list(pos) for name, pos in state.stores.items()},
            "fetched": state.fetched, "forgotten": dict(state.forgotten), "retried": dict(state.retried),
            "waits": dict(state.waits), **({"budgets": state.budgets} if state.budgets else {})}


def _count(value, where: str) -> int:
    if type(value) is not int or value < 0:
        raise CheckpointError(f"frontier.{where}: expected a count (an integer >= 0), got {value!r:.40}")
    return value


def _position(value, where: str) -> list[int]:
    if not isinstance(value, list) or len(value) != 2:
        raise CheckpointError(f"frontier.{where}: expected [segment, offset], got {value!r:.40}")
    return [_count(value[0], where + "[0]"), _count(value[1], where + "[1]")]


def _counts(value, where: str) -> dict[str, int]:
    if not isinstance(value, dict):
        raise CheckpointError(f"frontier.{where}: expected an object of counts, got {value!r:.40}")
    return {str(k): _count(v, f"{where}.{k}") for k, v in value.items()}


def decode(doc) -> FrontierState:
    """The :class:`FrontierState` of a checkpoint's ``frontier`` object; CheckpointError if unusable.

    ``wait_end`` and ``waits`` may be missing (checkpoints written before
    them); a wait that is not a number is dropped (a site then starts as if
    it had none: politeness within this run holds regardless).
    """
    if not isinstance(doc, dict):
        raise CheckpointError(f"frontier: expected an object, got {doc!r:.40}")
    stores = doc.get("stores")
    if not isinstance(stores, dict):
        raise CheckpointError(f"frontier.stores: expected an object, got {stores!r:.40}")
    positions = {}
    for name in LANES:
        if name not in stores:
            raise CheckpointError(f"frontier.stores.{name}: missing")
        positions[name] = _position(stores[name], f"stores.{name}")
    if stores.get("wait_end") is not None:
        positions["wait_end"] = _position(stores["wait_end"], "stores.wait_end")
    if "fetched" not in doc:
        raise CheckpointError("frontier.fetched: missing")
    waits = doc.get("waits", {})
    if not isinstance(waits, dict):
        raise CheckpointError(f"frontier.waits: expected an object, got {waits!r:.40}")
    budgets = doc.get("budgets", {})
    if not isinstance(budgets, dict) or not all(
            isinstance(v, list) and len(v) == 2 and all(type(n) is int and n >= 0 for n in v)
            for v in budgets.values()):
        raise CheckpointError(f"frontier.budgets: expected {{site: [pages, bytes]}}, got {budgets!r:.40}")
    return FrontierState(
        stores=positions,
        fetched=_count(doc["fetched"], "fetched"),
        forgotten=_counts(doc.get("forgotten", {}), "forgotten"),
        retried=_counts(doc.get("retried", {}), "retried"),
        waits={str(k): float(v) for k, v in waits.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)},
        budgets={str(k): list(v) for k, v in budgets.items()},
    )
