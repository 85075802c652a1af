"""Recrawls: a finished crawl visited again with conditional requests (``--recrawl``).

Every crawl that keeps its state (canReload) records, for each page it
fetched, what the next crawl needs (larbin_py.records: its validators, the
digest of its body, its links, when it was fetched).  ``--recrawl`` starts
a new crawl, the next *generation*, from those records:

1. **Seeding** (:meth:`Recrawl.seed`, before the first checkpoint): the
   previous generation's records are read in batches on the writer thread
   and each URL is queued again (the main lane, with its record's token in
   ``UrlRecord.prev``) and added to the seen set, so a link to it finds it
   seen; a URL the rules now refuse is dropped (counted under its reason).
   A page younger than ``revisitAfter`` is not queued: its record goes on
   to the new generation as it is, its file stays (``skipped``), and once
   every record is in the seen set its stored links are offered, so the
   crawl still reaches what it linked to.  The start URLs are then queued
   as in any crawl (those fetched before are already there).
2. **Conditional requests** (:meth:`request_headers`): a URL with a token
   whose links are known is asked with ``If-None-Match`` (its ETag) and
   ``If-Modified-Since`` (its Last-Modified).  Without known links (the
   page's analysis never ended) it is asked plainly: a 304 would leave
   nothing to offer.  What the page would need if unchanged (its links
   entry, its mirror file) is read on the writer thread while it is asked
   (:meth:`prefetch`), the reads of the requests a loop turn starts as one
   job.
3. **Unchanged** (:meth:`unchanged`): a 304, or a 2xx whose body has the
   digest of the last one (a server that ignores validators).  Its stored
   links (read by then, or read now when it was asked without validators)
   are offered again;
   the page is counted fetched; its file is not rewritten (the output gets
   a ``revisit`` Document: the mirror indexes the file it has, the WARC
   writes a revisit record); its record goes on with the links copied
   (:meth:`on_unchanged`).  A 304 for a page whose mirror file is missing
   is asked again without validators (a retry that costs none).
4. **Changed or new**: a 2xx handled as in any crawl (:meth:`fetched`
   records it anew).
5. **Gone** (404, 410): counted; ``recrawlGone delete`` removes its file
   from the mirror (and its index line) and drops its record,
   ``keep`` keeps both.  Any other end (a redirect, a 5xx, a timeout,
   robots.txt) keeps the record and the file as they were (``kept``).
6. A URL met for the first time is crawled as usual and counted ``new``.

The verdicts are counted in the engine's ``recrawl`` counter (the summary,
``/stats.json``'s ``recrawl``, ``/metrics``) and written in the crawl
log's last field.

**Records of every crawl** (:meth:`fetched`): a page whose links were read
on the loop is recorded at once; one handed to the analysis processes is
recorded when its links come back through :meth:`offer` (the stage's way
to the admission), its record kept meanwhile in a bounded table
(:data:`PENDING_MAX`; past it, or at the crawl's end (:meth:`settle`: a
failed analysis, tasks left to a ``--reload``), the record is written
without its links, and the next recrawl asks that page without
validators; after a crash, such a page has no record and the next recrawl
fetches it as a new one when a link leads there).  Records are *ops* handed to the crawl state
(``record``), written by the group commit that covers the outcome
(larbin_py.records.RecordsWriter).

**The distributed mode** (larbin_py.distributed.records): a launcher's
workers keep records as the crawl state here does (the worker's
``DistState``); the launcher seeds (``seeding`` is False in a worker), a
token names the worker whose links log holds its links (``Visit.source``)
and a log this process cannot read leaves the page's links unknown (asked
plainly: :meth:`_visit`); each verdict is told to the crawl state's
``verdict`` when it has one, to be counted with the page's ack; a page
younger than revisitAfter is skipped by the worker that reads its entry
(:meth:`divert`), acked as ``notDue``.

Memory: nothing per URL is held (the tokens travel with the URL records
through the frontier, on disk); the table of pages awaiting their links
(at most :data:`PENDING_MAX`), one batch of records at seeding.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections import OrderedDict
from dataclasses import dataclass

from .frontier.store import UrlRecord
from .journal import FETCHED
from .output import Document
from .output.base import payload_digest
from .records import NO_LINKS, OldRecords, Visit, clean_etag, clean_type, decode_token, encode_token
from .url import fingerprints

__all__ = ["PENDING_MAX", "Recrawl", "Stored", "VERDICTS", "last_modified_of"]

#: Pages whose links the analysis processes have not given back yet, at most.
PENDING_MAX = 100_000
#: The verdicts of a recrawl, as the crawl log and the stats name them.
VERDICTS = ("new", "changed", "unchanged", "notModified", "gone", "kept", "skipped")
#: Records read and queued per batch at seeding.
SEED_BATCH = 1 << 20
_PENDING_LINKS = object()
_MONTHS = (b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec")
_DAYS = (b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun")


@functools.lru_cache(maxsize=1024)
def http_date(seconds: int) -> bytes:
    """``seconds`` as an IMF-fixdate, ``Sun, 06 Nov 1994 08:49:37 GMT`` (If-Modified-Since;
    email.utils.formatdate's bytes in half its time).  Kept for the answer: a 304 sends the
    date back (:func:`revalidated`), while about as many requests as a crawl's connections
    are in flight."""
    t = time.gmtime(seconds)
    return b"%s, %02d %s %04d %02d:%02d:%02d GMT" % (_DAYS[t.tm_wday], t.tm_mday, _MONTHS[t.tm_mon - 1],
                                                       t.tm_year, t.tm_hour, t.tm_min, t.tm_sec)


#: An IMF-fixdate (RFC 9110 5.6.7), the form nearly every server sends: read without email.utils.
_FIXDATE = re.compile(rb"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-3][0-9]) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                      rb"([1-9][0-9]{3}) ([0-2][0-9]):([0-5][0-9]):([0-6][0-9]) GMT")
_MONTH_NUMBER = {m: i + 1 for i, m in enumerate(_MONTHS)}


def _epoch_days(year: int, month: int) -> int:
    """Days from 1970-01-01 to the first of ``month`` of ``year`` (proleptic Gregorian)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def last_modified_of(headers) -> int | None:
    """The Last-Modified header of a response (lower-case names), in seconds; None when absent or bad.

    An IMF-fixdate is read here (4 µs against email.utils' 12), with the same
    result as ``mktime_tz(parsedate_tz(...))``: a day past the month's end or a second 60
    runs on, as there.  The obsolete forms (RFC 850, asctime) and anything else go
    through email.utils."""
    for name, value in headers:
        if name == b"last-modified":
            m = _FIXDATE.fullmatch(value.strip())
            if m is not None:
                day, month, year, hour, minute, second = m.groups()
                return ((_epoch_days(int(year), _MONTH_NUMBER[month]) + int(day) - 1) * 86400
                        + int(hour) * 3600 + int(minute) * 60 + int(second))
            return date_by_email(value)
    return None


def date_by_email(value: bytes) -> int | None:
    """An HTTP date in any form email.utils reads, in seconds; None when it reads none."""
    from email.utils import mktime_tz, parsedate_tz  # imported when met: a crawl starts without email

    parsed = parsedate_tz(value.decode("latin-1", "replace"))
    if parsed is None:
        return None
    try:
        return int(mktime_tz(parsed))
    except (OverflowError, ValueError):
        return None


def etag_of(headers) -> str:
    for name, value in headers:
        if name == b"etag":
            return clean_etag(value.decode("latin-1", "replace"))
    return ""


#: The last second :func:`http_date` writes with a four-digit year (9999-12-31 23:59:59).
_LAST_FIXDATE = 253402300799


def revalidated(headers, etag: str, last_modified: int | None) -> tuple[str, int | None]:
    """The validators an unchanged page keeps: the answer's ETag and Last-Modified (each the
    first of its name, as :func:`etag_of` and :func:`last_modified_of` read them), or, where
    it sends none that is valid, ``etag`` and ``last_modified`` (those it was asked with).

    A 304 nearly always sends back the very bytes the request carried: those are
    recognized as they are, without the ETag's check or the date's parse (a tenth of a
    recrawl's work on a 304, beside the rest, was reading them again)."""
    new_etag, new_date = "", None
    seen_etag = seen_date = False
    for name, value in headers:
        if name == b"etag" and not seen_etag:
            seen_etag = True
            if not (etag and value == etag.encode("ascii")):
                new_etag = clean_etag(value.decode("latin-1", "replace"))
        elif name == b"last-modified" and not seen_date:
            seen_date = True
            if (last_modified is None or not 0 <= last_modified <= _LAST_FIXDATE
                    or value != http_date(last_modified)):
                new_date = last_modified_of(((name, value),))
    return new_etag or etag, new_date or last_modified


@dataclass(slots=True)
class Stored:
    """What a recrawl reads for an unchanged page: its links, and whether its mirror file is
    there; ``entry``: its links entry as read, copied as it is into this crawl's log."""

    links: list[str] | None
    embeds: frozenset
    present: bool
    entry: bytes | None = None
    #: Its mirror file as found, ``(relative path, size)`` (mirror mode), indexed as it is.
    file: tuple[str, int] | None = None


def _job_results(job: asyncio.Future, n: int) -> list:
    """The results of a :meth:`Recrawl._read_many` job, or its failure ``n`` times."""
    if job.cancelled():
        return [asyncio.CancelledError()] * n
    exc = job.exception()
    return job.result() if exc is None else [exc] * n


def _deliver(futures: list[asyncio.Future], results: list) -> None:
    """Each future its result, or its exception (retrieved here: a page whose answer
    was not a 304 never looks at its read, and the writer's failure is reported
    by the writer)."""
    for fut, res in zip(futures, results):
        if fut.done():
            continue
        if isinstance(res, asyncio.CancelledError):
            fut.cancel()
        elif isinstance(res, BaseException):
            fut.set_exception(res)
            fut.exception()
        else:
            fut.set_result(res)


class Recrawl:
    """This crawl's records and, in a recrawl, the revisit of the previous generation.

    ``config``: the crawl's; ``old``: the previous generation's records
    (:class:`~larbin_py.records.OldRecords`), None in a first crawl;
    ``seeding``: the records are still to be queued (a recrawl's start,
    not its ``--reload``).  :meth:`attach` gives the frontier, the crawl
    state, the engine's counters and the page handler (its crawl log
    lines); :meth:`start` the writer thread and the output once the loop
    runs.
    """

    def __init__(self, config, *, old: OldRecords | None = None, seeding: bool = False,
                 wall=time.time) -> None:
        self.config = config
        self.old = old
        self.active = old is not None
        self.seeding = seeding
        self.wall = wall
        self.gone_delete = config.recrawl_gone == "delete"
        self.revisit_after = config.revisit_after
        self.mirror = config.output_mode == "mirror"
        self.frontier = self.state = self.counts = self.pages = None
        self.writer = self.output = None
        self._pending: OrderedDict[str, tuple[UrlRecord, Visit]] = OrderedDict()
        #: A worker's skips under way (:meth:`divert`): the worker is not idle meanwhile.
        self.skipping = 0
        self._tasks: set = set()
        #: The stored reads asked in this loop turn (:meth:`prefetch`), read as one writer job.
        self._batch: list = []
        #: Writer jobs of :meth:`prefetch` and the reads they carried (not in ``/stats.json``:
        #: the tests read them, to see the reads batched and each page read once).
        self.read_jobs = self.reads = 0

    def attach(self, frontier, crawl_state, counts, pages) -> None:
        self.frontier, self.state, self.counts, self.pages = frontier, crawl_state, counts, pages

    def start(self, writer, output) -> None:
        self.writer, self.output = writer, output

    def _count(self, verdict: str, rec: UrlRecord | None = None, *more: str) -> str:
        """Count ``verdict`` (and ``more``); a worker's crawl state is told them for ``rec``'s ack
        (``verdict``: larbin_py.distributed.crawl_worker, the counts kept in Redis with the acks)."""
        counts = self.counts.recrawl
        counts[verdict] += 1
        for name in more:
            counts[name] += 1
        tell = getattr(self.state, "verdict", None)
        if tell is not None and rec is not None:
            tell(rec, (verdict, *more))
        return verdict

    def _visit(self, rec: UrlRecord) -> Visit | None:
        """``rec``'s token; its links not known when they lie in a log this process cannot read
        (the distributed mode: another machine's worker, docs/recrawl.md)."""
        visit = decode_token(rec.prev)
        if visit is not None and visit.source and not self.old.readable(visit.source):
            visit.links = None
        return visit

    # -- records of every crawl ---------------------------------------------
    def fetched(self, rec: UrlRecord, res, digest: str, links) -> str:
        """A 2xx page kept: its record (``links``: the links offered, ``None`` for
        none to offer, :meth:`pending` when the analysis processes have them).
        Returns its verdict in a recrawl (``new``, ``changed``, ``unchanged``), else ``""``."""
        now = int(self.wall())
        visit = Visit(now, now, last_modified_of(res.headers), digest[5:], None, etag_of(res.headers),
                      clean_type(res.content_type))
        if isinstance(links, tuple) and not links[0] or isinstance(links, list) and not links:
            links = None  # no links to offer
        if links is _PENDING_LINKS:
            pending = self._pending
            pending[rec.url] = (rec, visit)
            if len(pending) > PENDING_MAX:  # its links never came back (a failed analysis): without them
                _url, (old_rec, old_visit) = pending.popitem(last=False)
                self.state.record((old_rec, old_visit, None))
        elif links is None:
            visit.links = NO_LINKS
            self.state.record((rec, visit, None))
        else:
            self.state.record((rec, visit, links))
        if not self.active:
            return ""
        prev = decode_token(rec.prev) if rec.prev else None
        if prev is None:
            return self._count("new", rec)
        return self._count("unchanged" if prev.digest == visit.digest else "changed", rec)

    def settle(self) -> int:
        """(The crawl's end, before its last checkpoint.) The pages whose links never came
        back (a failed analysis, tasks left for --reload) recorded without them; how many."""
        pending, self._pending = self._pending, OrderedDict()
        for rec, visit in pending.values():
            self.state.record((rec, visit, None))
        return len(pending)

    @staticmethod
    def pending():
        """The ``links`` of :meth:`fetched` for a page whose links the analysis processes will give."""
        return _PENDING_LINKS

    def offer(self, page_url: str, depth: int, links, **kw) -> int:
        """The analysis stage's way to the admission: a page's links, recorded with its page."""
        waiting = self._pending.pop(page_url, None)
        if waiting is not None:
            rec, visit = waiting
            embeds = kw.get("embeds") or ()
            if not links:  # none to offer (meta nofollow, or none found): a 304 offers none
                visit.links = NO_LINKS
                self.state.record((rec, visit, None))
            else:
                self.state.record((rec, visit, (list(links), embeds) if embeds else list(links)))
        return self.frontier.admission.offer(page_url, depth, links, **kw)

    # -- a recrawl's requests -------------------------------------------------
    def request_headers(self, rec: UrlRecord) -> tuple:
        """The validators to send for ``rec`` (none when its links are not known)."""
        if not (self.active and rec.prev):
            return ()
        visit = self._visit(rec)
        if visit is None or visit.links is None:
            return ()
        headers = []
        if visit.etag:
            headers.append((b"If-None-Match", visit.etag.encode("ascii")))
        if visit.last_modified is not None:
            headers.append((b"If-Modified-Since", http_date(visit.last_modified)))
        return tuple(headers)

    def unchanged(self, rec: UrlRecord, res, sent: bool, digest: str | None) -> bool:
        """Is ``res`` the answer of a page unchanged since the last crawl (with links known)?"""
        if not (self.active and rec.prev) or res.error is not None:
            return False
        visit = self._visit(rec)
        if visit is None or visit.links is None:
            return False
        if res.status == 304:
            return sent
        return 200 <= res.status < 300 and digest is not None and digest[5:] == visit.digest

    def prefetch(self, rec: UrlRecord) -> asyncio.Future:
        """(Loop.) What was stored of ``rec`` (its links, its mirror file), read on the
        writer thread: a future of its :class:`Stored`.  Asked when ``rec`` is asked with
        validators (the read overlaps the request; used if the page is unchanged), or
        when a page asked without them turns out unchanged (its digest).  The reads asked
        in one loop turn (the requests a pump starts) go to the writer as one job: a
        hand-over to the writer and back for each page cost a recrawl about a fifth of
        its CPU on 2 cores (docs/recrawl.md)."""
        visit = decode_token(rec.prev)
        fut = asyncio.get_running_loop().create_future()
        batch = self._batch
        batch.append((fut, (visit.links, rec.url, visit.source)))
        if len(batch) == 1:
            fut.get_loop().call_soon(self._read_batch)
        return fut

    def _read_batch(self) -> None:
        batch, self._batch = self._batch, []
        futures = [fut for fut, _item in batch]
        try:
            job = self.writer.call(self._read_many, [item for _fut, item in batch])
        except RuntimeError as exc:  # the writer is closed: the crawl is ending
            _deliver(futures, [exc] * len(futures))
            return
        self.read_jobs += 1
        self.reads += len(batch)
        job.add_done_callback(lambda job: _deliver(futures, _job_results(job, len(futures))))

    def _read_many(self, items: list[tuple]) -> list:
        """(Writer.) :meth:`_read_stored` of each item, or the exception it raised."""
        out = []
        for item in items:
            try:
                out.append(self._read_stored(*item))
            except Exception as exc:
                out.append(exc)
        return out

    def _read_stored(self, offset: int, url: str, source: str = "") -> Stored:
        """(Writer.) The mirror file's path is worked out here too, not on the loop."""
        found = self.old.links(offset, source)
        present, file = True, None
        if self.mirror:
            file = self.output.inner.locate(url)
            present = file is not None
        if found is None:
            return Stored(None, frozenset(), present, None, file)
        return Stored(*found[:2], present, found[2], file)

    def on_unchanged(self, req, res, stored: Stored, now: float) -> None:
        """The page has not changed (see :meth:`unchanged`): apply it (see the module docstring)."""
        fr, rec = self.frontier, req.record
        visit = decode_token(rec.prev)
        not_modified = res.status == 304
        if stored.links is None or (not_modified and not stored.present):
            # Its links are lost, or its file: asked again, plainly, at no cost in retries.
            visit.etag, visit.last_modified, visit.links = "", None, None
            rec.prev = encode_token(visit)
            self.pages.archive(res)
            fr.retry(req, "notModified", now, free=True)
            return
        if stored.links:
            fr.admission.offer(rec.url, rec.depth, stored.links, embeds=stored.embeds)
        self.output.write(Document(
            url=rec.url, status=res.status, headers=res.headers, body=res.body,
            content_type=res.content_type or visit.content_type or None,
            fetched_at=time.time(), ip=req.ip, raw_request=res.raw_request or None,
            raw_response_head=res.raw_response_head or None, raw_body=getattr(res, "raw_body", None),
            revisit="server-not-modified" if not_modified else "identical-payload-digest",
            refers_to_date=float(visit.captured), stored_file=stored.file))
        fr.fetched_ok(req, now)
        visit.checked = int(self.wall())
        visit.etag, visit.last_modified = revalidated(res.headers, visit.etag, visit.last_modified)
        # its links entry as read (or, read nothing, NO_LINKS kept as it is)
        self.state.record((rec, visit, stored.entry))
        if not_modified:
            self._count("unchanged", rec, "notModified")
        else:
            self._count("unchanged", rec)
        line = None
        if self.pages.logging:
            line = self.pages.line(rec, "notModified" if not_modified else "ok", res,
                                   digest="sha1:" + visit.digest, recrawl="unchanged")
        self.state.done(rec.url, FETCHED, True, line)
        self.counts.last.append({"url": rec.url, "status": res.status, "reason": "unchanged",
                                 "bytes": len(res.body), "time": time.time()})

    def forgotten(self, rec: UrlRecord, res) -> str:
        """A URL of the last crawl ended without a page: ``gone`` (404, 410) or ``kept``."""
        if not (self.active and rec.prev):
            return ""
        visit = decode_token(rec.prev)
        if visit is None:
            return ""
        gone = res is not None and res.status in (404, 410)
        keep = not (gone and self.gone_delete)
        self.output.write(Document(url=rec.url, status=res.status if gone else 0, headers=[], body=b"",
                                   content_type=visit.content_type or None, keep=keep, remove=not keep))
        if keep:
            self.state.record((rec, visit, visit.links if visit.links not in (None, NO_LINKS) else None))
        return self._count("gone" if gone else "kept", rec)

    # -- a recrawl's start ------------------------------------------------------
    async def seed(self) -> int:
        """Queue the previous generation's URLs again (see the module docstring); how many."""
        old, fr = self.old, self.frontier
        adm = fr.admission
        rules = adm.rules
        now = int(self.wall())
        retries = self.config.retries
        queued = offset = 0
        skipped = False
        while True:
            batch, offset = await self.writer.call(old.batch, offset, SEED_BATCH)
            if not batch:
                break
            keep = []
            for rec in batch:
                reason = rules.check(rec.url)
                if reason is not None:
                    adm.rejected[reason] += 1
                    continue
                keep.append(rec)
            new = adm.seen.add_many(fingerprints([r.url for r in keep]))
            for rec, is_new in zip(keep, new):
                if not is_new:
                    continue  # met twice in the records
                visit = decode_token(rec.prev)
                if visit is None:
                    continue
                if self.revisit_after and now - visit.checked < self.revisit_after:
                    self._skip(rec, visit)
                    skipped = True
                    continue
                adm.push_record(UrlRecord(rec.url, rec.depth, retries, rec.hops, "", rec.via, rec.found, rec.ref, rec.prev))
                queued += 1
        if skipped:  # their links, once every record is known as seen
            offset = 0
            while True:
                batch, offset = await self.writer.call(self._skipped_links, offset, now)
                if not batch:
                    break
                for rec, links, embeds in batch:
                    if rules.check(rec.url) is None:  # as in the first pass
                        adm.offer(rec.url, rec.depth, links, embeds=embeds)
        self.seeding = self.state.seeding = False
        return queued

    def _skip(self, rec: UrlRecord, visit: Visit) -> None:
        """A page younger than revisitAfter: its record and file go on as they are."""
        self.state.record((rec, visit, visit.links if visit.links not in (None, NO_LINKS) else None))
        self.output.write(Document(url=rec.url, status=0, headers=[], body=b"", keep=True,
                                   content_type=visit.content_type or None))
        self._count("skipped", rec)
        if self.pages.logging:
            self.state.log(self.pages.line(rec, "notDue", None, digest="sha1:" + visit.digest, recrawl="skipped"))

    # -- a distributed recrawl: revisitAfter where the URL is read -------------------
    def divert(self, rec: UrlRecord) -> bool:
        """(A worker, on the loop.) A URL read from its partition's stream: True when it is
        younger than revisitAfter, and skipped here instead of queued (see :meth:`_skip_later`).
        A page whose links lie in a log this worker cannot read is not skipped: it is asked."""
        if not (self.active and self.revisit_after and rec.prev):
            return False
        visit = self._visit(rec)
        if visit is None or visit.links is None or self.wall() - visit.checked >= self.revisit_after:
            return False
        self.skipping += 1
        task = asyncio.ensure_future(self._skip_later(rec, visit))
        self._tasks.add(task)
        task.add_done_callback(self._skip_ended)
        return True

    def _skip_ended(self, task) -> None:
        """A skip that raised (its writer failed: the worker fails with it) leaves its entry
        un-acked, pending for the partition's next owner: its error is retrieved here."""
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()

    async def _skip_later(self, rec: UrlRecord, visit: Visit) -> None:
        """Its stored links read on the writer, then as :meth:`_skip` and its links offered; its
        entry acked as ``notDue``.  Links that cannot be read (a damaged entry): the page is
        queued to be asked plainly instead."""
        try:
            found = await self.writer.call(self.old.links, visit.links, visit.source)
            fr = self.frontier
            if found is None:
                visit.etag, visit.last_modified, visit.links = "", None, None
                rec.prev = encode_token(visit)
                fr.admission.push_record(rec)
                return
            self._skip(rec, visit)
            if found[0]:
                fr.admission.offer(rec.url, rec.depth, found[0], embeds=found[1])
            if fr.on_done is not None:
                fr.on_done(rec, "notDue")
        finally:
            self.skipping -= 1

    def _skipped_links(self, offset: int, now: int) -> tuple[list, int]:
        """(Writer.) The records skipped from ``offset`` on, with their links."""
        out = []
        while not out:
            batch, offset = self.old.batch(offset, SEED_BATCH)
            if not batch:
                return [], offset
            for rec in batch:
                visit = decode_token(rec.prev)
                if visit is None or now - visit.checked >= self.revisit_after:
                    continue
                found = self.old.links(visit.links)
                if found is not None and found[0]:
                    out.append((rec, found[0], found[1]))
        return out, offset

