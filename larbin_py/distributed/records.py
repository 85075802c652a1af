"""The records of a distributed crawl, and its recrawl (``--workers N --recrawl``).

A crawl started by the launcher keeps, as a single process does
(larbin_py.records), one record per page fetched and the page's links, for
the next crawl to ask again cheaply.  Here:

**Where.**  Each worker writes its own pair of files, in its own folder
``stateDir/.workers/<workerId>/records/`` (``records-GGGGGGGG.log``,
``links-GGGGGGGG.log``), from its writer thread, with the sync that makes
its output durable before its acks (larbin_py.distributed.crawl_worker): a
page is acked only once its record is on disk.  The position of both files
goes with the output's in ``outpos:<w>``; a worker started again (a
respawn, ``--reload``) cuts them back to it, so a record of a page that was
not acked (and is fetched again) is not kept twice by its writer.  A page
fetched again by another worker after a takeover may still have a record
in the dead worker's files (written, not acked): the recrawl queues each
URL once, whichever record comes first, both being real answers.

**The generation.**  ``stateDir/.workers/.generation.json`` says which
generation the crawl writes, which one it revisits (``previous``), whether
its records were queued (``seeded``) and whether it finished
(:class:`Generation`).  The launcher writes it: generation 1 at a fresh
start, ``finished`` once every worker ended with the crawl's end, the next
generation at ``--recrawl``; the workers read it.  A worker started by hand
(``--worker``, no launcher) finds none and keeps no records.

**Seeding** (:func:`seed`, the launcher, before any worker starts, on a
Redis emptied of the finished crawl): every worker's records of the
previous generation are read in batches of 1 MiB and each URL the rules
still allow is enqueued in its partition's stream (``lb_enqueue``: the seen
set gets it, so a link to it finds it seen), its token in the entry
(larbin_py.distributed.sink.encode_entry) with the name of the worker whose
links log holds its links (``w2@1234``).  Whichever worker owns the
partition then asks it conditionally.  Done again when a launcher stopped
mid-way is run with ``--reload`` (``seeded`` false): ``lb_enqueue`` queues
a URL once.  Nothing per URL is held in memory.

**revisitAfter**: a young page is skipped by the worker that reads its
entry (larbin_py.recrawl.Recrawl.divert): not asked, its record carried on,
its stored links offered, its entry acked as ``notDue``.

**The links of a 304** (:class:`PeerRecords`): the worker that owns the URL
now reads the named worker's links log, on its writer thread, at the
offset the token names.  The launcher's workers share one stateDir, so
each can read the others' logs; a worker that finds no such log (lost or
removed; a worker whose stateDir is not the writer's) asks the page
plainly, without validators: the page is fetched whole, parsed and saved
again (its verdict told by its digest), never left without its links.

Errors: an unreadable ``.generation.json`` is a :class:`~larbin_py.state.StateError`
naming the file; a damaged links entry (CRC) makes its page asked plainly.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass

from ..records import NO_LINKS, OldRecords, decode_token, encode_token, links_path, read_entry, \
    records_path, stored_links
from ..state import StateError

__all__ = ["Generation", "PeerRecords", "WORKERS_RECORDS", "generation_path", "read_generation", "remove_previous",
           "reset", "seed", "worker_root", "workers_with", "write_generation"]

#: The folder of the workers' records under stateDir, and the generation file in it: both
#: begin with a dot, which no workerId does (a worker's scratch folder is ``stateDir/<workerId>``).
WORKERS_RECORDS = ".workers"
GENERATION = ".generation.json"
#: Records read per batch at seeding.
SEED_BATCH = 1 << 20


def worker_root(state_dir: str, worker: str) -> str:
    """The folder a worker's records live in (``records/`` below it, as larbin_py.records names)."""
    return os.path.join(state_dir, WORKERS_RECORDS, worker)


def generation_path(state_dir: str) -> str:
    return os.path.join(state_dir, WORKERS_RECORDS, GENERATION)


@dataclass
class Generation:
    """What ``.generation.json`` says (see the module docstring)."""

    generation: int = 1
    previous: int | None = None
    seeded: bool = True
    finished: bool = False


def read_generation(state_dir: str) -> Generation | None:
    """The crawl's generation file, or None when there is none (no launcher, an older crawl)."""
    path = generation_path(state_dir)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return Generation(int(doc["generation"]), None if doc.get("previous") is None else int(doc["previous"]),
                          bool(doc.get("seeded", True)), bool(doc.get("finished", False)))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StateError(f"{path}: unreadable ({exc}): remove stateDir to start afresh") from None


def write_generation(state_dir: str, gen: Generation) -> None:
    """Write ``.generation.json`` atomically (a temporary file synced, then renamed)."""
    from ..owner_only import makedirs, opener

    folder = os.path.join(state_dir, WORKERS_RECORDS)
    makedirs(folder)
    path = generation_path(state_dir)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", opener=opener) as f:
        json.dump(asdict(gen), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def workers_with(state_dir: str, generation: int) -> list[str]:
    """The workers whose records of ``generation`` are in this stateDir, sorted."""
    folder = os.path.join(state_dir, WORKERS_RECORDS)
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    return [w for w in names if not w.startswith(".")
            and os.path.exists(records_path(worker_root(state_dir, w), generation))]


def remove_previous(state_dir: str, generation: int) -> None:
    """A recrawl of ``generation`` finished: its records go, every worker's."""
    for w in workers_with(state_dir, generation):
        for path in (records_path(worker_root(state_dir, w), generation),
                     links_path(worker_root(state_dir, w), generation)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def reset(state_dir: str) -> None:
    """A fresh crawl: every record of an earlier one goes."""
    shutil.rmtree(os.path.join(state_dir, WORKERS_RECORDS), ignore_errors=True)


class PeerRecords:
    """The previous generation's links logs of every worker of this stateDir, read on the
    writer thread (the :class:`~larbin_py.records.OldRecords` surface a recrawl uses).

    The logs present are listed once, when built (a worker's start): :meth:`readable`
    answers from that list, on the loop, without I/O.  Each log is opened when first read.
    """

    def __init__(self, state_dir: str, generation: int) -> None:
        self.state_dir = state_dir
        self.generation = generation
        self.damaged = 0
        self._present = {w for w in workers_with(state_dir, generation)
                         if os.path.exists(links_path(worker_root(state_dir, w), generation))}
        self._fds: dict[str, tuple[int, int]] = {}

    def readable(self, source: str) -> bool:
        return source in self._present

    def _fd(self, source: str) -> tuple[int, int] | None:
        got = self._fds.get(source)
        if got is None:
            if source not in self._present:
                return None
            try:
                fd = os.open(links_path(worker_root(self.state_dir, source), self.generation),
                             os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._present.discard(source)
                return None
            got = self._fds[source] = (fd, os.fstat(fd).st_size)
        return got

    def _entry(self, offset: int, source: str) -> bytes | None:
        got = self._fd(source)
        if got is None or offset < 0 or offset >= got[1]:
            return None
        entry = read_entry(got[0], offset)
        if entry is None:
            self.damaged += 1
        return entry

    def links(self, offset: int | None, source: str = "") -> tuple[list[str], frozenset, bytes | None] | None:
        if offset is None:
            return None
        if offset == NO_LINKS:
            return [], frozenset(), None
        entry = self._entry(offset, source)
        return None if entry is None else stored_links(entry)

    def raw(self, offset: int, source: str = "") -> bytes | None:
        return self._entry(offset, source)

    def close(self) -> None:
        for fd, _size in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = {}


async def seed(io, config, state_dir: str, previous: int, *, say=None) -> tuple[int, int]:
    """Queue every URL of ``previous``'s records in Redis (see the module docstring).

    ``io``: the crawl's connected RedisIO.  Returns ``(queued, refused)``:
    URLs new to the seen sets, and URLs the rules now refuse (not queued).
    """
    from ..rules import UrlRules
    from ..url import fingerprint
    from .sink import RedisSink, encode_entry

    rules = UrlRules.from_config(config)
    if config.lock_site:
        for url in config.start_urls:
            rules.lock(url)
    parts = RedisSink(io.partitions)  # (its partition_of_url only)
    queued = refused = 0
    for worker in workers_with(state_dir, previous):
        root = worker_root(state_dir, worker)
        old = OldRecords(root, previous, [os.path.getsize(records_path(root, previous)), 0], links=False)
        try:
            offset = 0
            while True:
                batch, offset = old.batch(offset, SEED_BATCH)
                if not batch:
                    break
                by_part: dict[int, list[tuple[int, bytes]]] = {}
                for rec in batch:
                    visit = decode_token(rec.prev)
                    if visit is None:
                        continue
                    if rules.check(rec.url) is not None:
                        refused += 1
                        continue
                    p = parts.partition_of_url(rec.url)
                    if p is None:
                        continue
                    if visit.links is not None and visit.links >= 0:
                        visit.source = worker
                    entry = encode_entry(rec.url, rec.depth, config.retries, rec.hops, rec.via, encode_token(visit))
                    by_part.setdefault(p, []).append((fingerprint(rec.url), entry))
                t = io.tick()
                slots = [t.enqueue(p, items) for p, items in by_part.items()]
                results = await t.execute()
                queued += sum(int(results[i]) for i in slots)
        finally:
            old.close()
        if say is not None and old.damaged:
            say(f"recrawl: {old.damaged} damaged records of worker {worker} left out")
    return queued, refused
