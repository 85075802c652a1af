"""The URL-seen test on disk: Mercator's and BUbiNG's sieve, about 1.5 bytes of RAM per URL.

:class:`~larbin_py.frontier.seen.SeenSet` keeps every fingerprint in RAM
(8 bytes each, and a Python set of the recent ones): 10 M URLs cost 110 MB.
:class:`Sieve` keeps them in one sorted file, the *run* (``stateDir/seen.run``),
and holds in RAM only what answers a test without reading most of it:

* the *recent* fingerprints, added since the last seal: a Python set of at
  most ``seal_at`` (16 Ki) entries, then sealed into a sorted numpy array, a
  *chunk*.  Chunks are compacted two by two (at most ~log2 of them) and
  merged into the run in the background once there are ``N / ratio`` of
  them (N the run's size; 8 B each, so at most 8/32 = 0.25 B per URL);
* the run's *index*: the first fingerprint of each block of 512 (4 KiB),
  0.016 B per URL, which says which block of the run may hold a fingerprint;
* a *filter* in front of the run: a Bloom filter blocked in 64-byte lines,
  ``bloom_bits`` (9) bits per fingerprint of the run, k = 6 bits set in one
  line.  A new link passes it with probability ~1.5 %: most new links cost no
  read of the run at all.  A "maybe" is always checked against the run, so
  the answer is exact: never a false "seen".

A test of a page's links (:meth:`add_many`) is: the recent set and a small
cache of fingerprints lately found (hot), one ``searchsorted`` per chunk,
the filter (a few vectorised numpy steps for the whole batch), and for each
key the filter lets through one ``pread`` of its 4 KiB block of the run
(from the page cache when the machine has the memory for it; not mapped,
so the run never counts in the process's RSS) and one vectorised compare
of all those blocks at once.  The cost of a batch is therefore a fixed
number of numpy calls plus one block read per link already seen (or per
false positive of the filter): the loop never reads more than 4 KiB per
link, and nothing for most new ones.

Merging.  A merge runs on a thread of its own: it reads the old run with
``pread`` in slices of :data:`SLICE` fingerprints (no mapping, so no RSS),
merges each with the chunks' fingerprints of the same key range in one
preallocated buffer (numpy's sort of two sorted runs, no temporaries of the
run's size), writes the new run, its index and a new filter, fsyncs and
renames it over the old one.  The loop installs the result at its next test
(a few assignments) and keeps testing against the old run and the chunks
until then: a merge never stalls the loop.

Persistence and crashes.  The append-only log ``seen.log`` is the truth,
as for :class:`SeenSet` (same format, same flush order, cut back by the
journal's ``cut_to_commit`` on ``--reload``).  The run is derived from it:
its header says how many bytes of the log it covers.  Only fingerprints
whose log bytes a *written commit* covers go into the run (:meth:`committed`,
called by the journal after each commit line and each checkpoint): after a
process crash the journal cuts the log back to its last commit, never below
what the run covers.  On :meth:`load` the log's torn tail is dropped and
counted, the fingerprints logged after the run's coverage are read back
into chunks, and a run that is damaged or covers more than the log holds
(after a machine crash lost the log's end, which the run had already been
merged with) is rebuilt from the log: slower, never wrong.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

from .. import malloc_tuning
from ..core_pin import release_thread
from ..lazyimport import LazyModule
from ..owner_only import opener

__all__ = ["Sieve", "RUN_NAME"]

RUN_NAME = "seen.run"
_MAGIC = b"LBSIEVE1"
_HEADER = struct.Struct("<8sQQQI")  # magic, count, log bytes covered, block, crc32 of the data
_HEAD_BYTES = 4096  # the data starts on a page boundary: block i is page i + 1
#: Fingerprints per block of the run (4 KiB): the index holds the first of each.
BLOCK = 512
#: Fingerprints a merge reads, merges and writes at a time (2 MiB).
SLICE = 1 << 18
_K = 6  # bits per key in the filter, in one 512-bit line


def _numpy_loaded(numpy) -> None:
    """numpy's constants, set when it is first used (larbin_py.lazyimport: a crawl that
    never seals a chunk never imports it)."""
    global _U64, _EMPTY, _MIX, _SHIFTS
    _U64 = numpy.uint64
    _EMPTY = numpy.zeros(0, dtype=_U64)
    _MIX = _U64(0x9E3779B97F4A7C15)  # the filter's bit positions: another view of the fingerprint's bits
    _SHIFTS = numpy.arange(_K, dtype=_U64) * _U64(9)


np = LazyModule("numpy", globals(), "np", _numpy_loaded)
#: Seconds the merge thread sleeps between steps (the loop's turn at the GIL).
STEP_ASIDE = 0.0003
#: Largest chunk the loop makes by compaction (1 MiB): more chunks rather than a long pause.
COMPACT_MAX = 1 << 17
_ADD_STEP = 1 << 13  # keys added to the filter at a time (temporaries of 48 B each)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """``a`` sorted in place, its duplicates dropped (a view or a copy)."""
    a.sort()
    if a.size > 1:
        keep = np.empty(a.size, dtype=bool)
        keep[0] = True
        np.not_equal(a[1:], a[:-1], out=keep[1:])
        if not keep.all():
            a = a[keep]
    return a


class _Filter:
    """A Bloom filter in 64-byte lines over the run: ``maybe`` is never a false "no"."""

    __slots__ = ("bits", "lines")

    def __init__(self, count: int, bits_per_key: int) -> None:
        self.lines = max(1, (count * bits_per_key + 511) // 512)
        self.bits = np.zeros(self.lines * 64, dtype=np.uint8)

    def _positions(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        line = ((keys >> _U64(32)) * _U64(self.lines)) >> _U64(32)
        spread = (keys * _MIX)[:, None] >> _SHIFTS
        bit = spread & _U64(511)
        byte = (line * _U64(64))[:, None] + (bit >> _U64(3))
        return byte, (bit & _U64(7)).astype(np.uint8)

    def add(self, keys: np.ndarray, pause=None) -> None:
        """Set the bits of ``keys``; ``pause()`` between steps (a merge thread's turn to step aside)."""
        bits = self.bits
        for at in range(0, keys.size, _ADD_STEP):
            if pause is not None:
                pause()
            byte, bit = self._positions(keys[at:at + _ADD_STEP])
            byte, bit = byte.ravel(), bit.ravel()
            # One pass per bit value: a byte met twice in a pass gets the same value twice.
            # (np.bitwise_or.at would do it in one, but holds the GIL: the loop would wait.)
            for b in range(8):
                where = byte[bit == b]
                bits[where] |= np.uint8(1 << b)

    def maybe(self, keys: np.ndarray) -> np.ndarray:
        byte, bit = self._positions(keys)
        return ((self.bits[byte] >> bit) & 1).all(axis=1)


class _Run:
    """The sorted run on disk, with its RAM index and filter; blocks read with ``pread``.

    Reading (rather than mapping) keeps the run out of the process's RSS: a
    mapped page stays counted until unmapped, and a fault maps a whole folio
    of the page cache around it (up to 2 MiB on recent kernels).
    """

    __slots__ = ("path", "count", "covers", "index", "filter", "_fd", "_rows", "_views")

    def __init__(self, path: str, count: int, covers: int, index: np.ndarray, filt: _Filter) -> None:
        self.path, self.count, self.covers = path, count, covers
        self.index, self.filter = index, filt
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._rows = np.empty((0, BLOCK), dtype=_U64)
        self._views: list[memoryview] = []

    def _buffer(self, n: int) -> np.ndarray:
        """Rows for ``n`` blocks, kept from batch to batch (grown in steps of 256 rows)."""
        if self._rows.shape[0] < n:
            self._rows = np.empty((-(-n // 256) * 256, BLOCK), dtype=_U64)
            self._views = [memoryview(row).cast("B") for row in self._rows]
        return self._rows

    def contains(self, keys: np.ndarray, counts) -> np.ndarray:
        """Which of ``keys`` are in the run: the filter, then one block read per key it lets through."""
        found = np.zeros(keys.size, dtype=bool)
        if not self.count or not keys.size:
            return found
        maybe = np.flatnonzero(self.filter.maybe(keys))
        if not maybe.size:
            return found
        ask = keys[maybe]
        block = self.index.searchsorted(ask, side="right").astype(np.int64) - 1
        inside = block >= 0  # below the run's first key: not there
        rows = self._buffer(ask.size)
        last = (self.count - 1) // BLOCK
        np.clip(block, 0, last, out=block)
        fd, preadv, size = self._fd, os.preadv, 8 * BLOCK
        for view, at in zip(self._views, (block * size + _HEAD_BYTES).tolist()):
            preadv(fd, [view], at)
        tail = self.count - last * BLOCK  # entries in the last block
        if tail < BLOCK:  # past the run's end: copies of its last key (which is in it)
            short = block == last
            if short.any():
                rows[np.flatnonzero(short), tail:] = rows[np.flatnonzero(short), tail - 1:tail]
        hit = inside & (rows[:ask.size] == ask[:, None]).any(axis=1)
        found[maybe] = hit
        counts.run_tests += int(maybe.size)
        counts.run_misses += int(maybe.size - np.count_nonzero(hit))
        return found

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _read_header(path: str) -> tuple[int, int, int] | None:
    """``(count, covers, crc)`` of a well-formed run file, else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    if len(head) < _HEADER.size:
        return None
    magic, count, covers, block, crc = _HEADER.unpack(head)
    if magic != _MAGIC or block != BLOCK or size != _HEAD_BYTES + 8 * count:
        return None
    return count, covers, crc


def _scan(path: str, count: int, bits_per_key: int) -> tuple[np.ndarray, _Filter, int, bool]:
    """Read a run through once: its index, its filter, its CRC, and whether it is sorted."""
    filt = _Filter(count, bits_per_key)
    index = []
    crc, ordered, prev = 0, True, None
    buf = np.empty(min(SLICE, max(count, 1)), dtype=_U64)
    with open(path, "rb") as f:
        done = 0
        while done < count:
            n = min(buf.size, count - done)
            view = buf[:n]
            got = os.preadv(f.fileno(), [memoryview(view).cast("B")], _HEAD_BYTES + 8 * done)
            if got != 8 * n:
                raise OSError(f"{path}: short read")
            crc = zlib.crc32(view, crc)
            if n > 1 and not bool((view[1:] > view[:-1]).all()):
                ordered = False
            if prev is not None and not view[0] > prev:
                ordered = False
            prev = view[n - 1]
            index.append(view[(-done) % BLOCK::BLOCK].copy())
            filt.add(view)
            done += n
    return (np.concatenate(index) if index else _EMPTY), filt, crc, ordered


class Sieve:
    """The seen store on disk (see the module docstring); a :class:`SeenStore`.

    ``directory`` holds the run (``seen.run``).  A new Sieve starts empty
    (an old run there is replaced at the first merge); :meth:`load` reopens
    one from its log.  ``first_merge``: fingerprints held in RAM before the
    first merge into the run (a small crawl never writes one); ``ratio``:
    later merges come when the chunks hold 1/``ratio`` of the run.
    ``background``: merge on a thread (False: at once, for tests).
    """

    def __init__(self, directory: str, *, first_merge: int = 1 << 18, ratio: int = 32,
                 seal_at: int = 1 << 14, bloom_bits: int = 9, hot_size: int = 1 << 14,
                 background: bool = True) -> None:
        self.directory = directory
        self.path = os.path.join(directory, RUN_NAME)
        self.first_merge, self.ratio, self.seal_at = first_merge, ratio, seal_at
        self.bloom_bits, self.hot_size = bloom_bits, hot_size
        self._recent: set[int] = set()
        self._hot: set[int] = set()
        #: Sealed chunks, oldest first: (first log index, end log index, sorted fingerprints).
        self._chunks: list[tuple[int, int, np.ndarray]] = []
        self._run: _Run | None = None
        self._next = 0  # log index (fingerprint number) of the next one added
        self._sealed = 0  # log index where the recent set starts
        self._durable = None  # log index up to which a merge may go (None: no log, all)
        self._log = None
        self._buf = bytearray()
        # (its thread takes every core of the process, not a pinned loop's one: larbin_py.core_pin)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="larbin-sieve",
                                        initializer=release_thread) if background else None
        self._merging: Future | None = None
        self._merging_chunks = 0
        self.merges = 0
        #: Bytes of a torn last log record dropped by :meth:`load`.
        self.dropped_bytes = 0
        #: The run was rebuilt from the log on :meth:`load` (damaged, or ahead of the log).
        self.rebuilt = False
        #: Keys the filter let through to the run, and those of them not there (false positives).
        self.run_tests = 0
        self.run_misses = 0
        #: Why the last merge failed (the run could not be written), raised by :meth:`flush`.
        self.failed: OSError | None = None

    # -- the test -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self._next

    def __contains__(self, fp: int) -> bool:
        if fp in self._recent or fp in self._hot:
            return True
        return bool(self._in_store(np.array([fp], dtype=_U64))[0])

    def add(self, fp: int) -> bool:
        """Record ``fp``; True when it was not there before."""
        return self.add_many((fp,))[0]

    def _in_store(self, keys: np.ndarray) -> np.ndarray:
        """Which of ``keys`` are in the chunks or the run."""
        found = np.zeros(keys.size, dtype=bool)
        for _, _, arr in self._chunks:
            if arr.size:
                idx = arr.searchsorted(keys)
                np.minimum(idx, arr.size - 1, out=idx)
                found |= arr[idx] == keys
        run = self._run
        if run is not None and run.count:
            rest = np.flatnonzero(~found)
            if rest.size:
                found[rest[run.contains(keys[rest], self)]] = True
        return found

    def add_many(self, fps: Sequence[int]) -> list[bool]:
        """Test-and-add each of ``fps`` in order: True where it was new (exact)."""
        if not fps:
            return []
        if self._merging is not None and self._merging.done():
            self._install()
        recent, hot = self._recent, self._hot
        ask = [fp for fp in fps if fp not in recent and fp not in hot]
        in_store: set[int] = set()
        if ask and (self._chunks or self._run is not None):
            keys = np.array(ask, dtype=_U64)
            keys.sort()  # the searches then walk each chunk, the index and the run forwards
            found = self._in_store(keys)
            if found.any():
                in_store = set(keys[found].tolist())
        out = []
        log = self._log is not None
        for fp in fps:
            if fp in recent or fp in hot or fp in in_store:
                out.append(False)
            else:
                recent.add(fp)
                if log:
                    self._buf += fp.to_bytes(8, "little")
                out.append(True)
        if in_store:  # after the answers: a clear must not forget a hot one skipped above
            if len(hot) + len(in_store) > self.hot_size:
                hot.clear()
            hot.update(in_store)
        self._next = self._sealed + len(recent)
        if len(recent) >= self.seal_at:
            self._seal()
        return out

    # -- chunks and merges ------------------------------------------------------------
    def _seal(self) -> None:
        """The recent set becomes a sorted chunk; small chunks are compacted; a merge may start."""
        recent = self._recent
        if recent:
            arr = np.fromiter(recent, dtype=_U64, count=len(recent))
            arr.sort()
            self._chunks.append((self._sealed, self._next, arr))
            self._sealed = self._next
            self._recent = set()
        self._compact()
        self._maybe_merge()

    def _compact(self) -> None:
        """Merge the two newest chunks while the older is under twice the newer (~log2 chunks),
        up to :data:`COMPACT_MAX` fingerprints (a merge of two sorted runs on the loop: ~1 ms)."""
        chunks, frozen = self._chunks, self._merging_chunks
        while (len(chunks) - frozen >= 2 and chunks[-2][2].size < 2 * chunks[-1][2].size
               and chunks[-2][2].size + chunks[-1][2].size <= COMPACT_MAX):
            a0, _, a = chunks[-2]
            _, b1, b = chunks.pop()
            both = np.concatenate((a, b))
            both.sort(kind="stable")  # two sorted runs: one merge pass
            chunks[-1] = (a0, b1, both)

    def _mergeable(self, force: bool = False) -> int:
        """How many of the oldest chunks a merge may take now (0: not yet)."""
        if self._merging is not None or self.failed is not None:
            return 0
        limit = self._durable  # None: no log, no limit
        take, total = 0, 0
        for start, end, arr in self._chunks:
            if limit is not None and end > limit:
                break
            take += 1
            total += arr.size
        run_n = self._run.count if self._run is not None else 0
        need = self.first_merge if not run_n else max(self.first_merge, run_n // self.ratio)
        return take if take and (force or total >= need) else 0

    def _maybe_merge(self, force: bool = False) -> None:
        take = self._mergeable(force)
        if not take:
            return
        chunks = [arr for _, _, arr in self._chunks[:take]]
        covers = self._chunks[take - 1][1]
        old = self._run
        job = (old.path if old is not None else None, old.count if old is not None else 0, chunks,
               covers)
        self._merging_chunks = take
        if self._pool is None:
            fut: Future = Future()
            fut.set_result(self._merge_job(*job))
            self._merging = fut
            self._install()
        else:
            self._merging = self._pool.submit(self._merge_job, *job)

    def _merge_job(self, old_path: str | None, old_count: int, chunks: list[np.ndarray],
                   covers: int) -> tuple[int, int, np.ndarray, _Filter]:
        """(Merge thread.) Write old run + ``chunks`` as the new run; (count, covers, index, filter)."""
        total_bound = old_count + sum(c.size for c in chunks)
        filt = _Filter(total_bound, self.bloom_bits)
        tmp = self.path + ".tmp"
        # Key-range slices of about SLICE fingerprints: uniform fingerprints split evenly.
        parts = max(1, -(-total_bound // SLICE))
        edges = [int(i * (1 << 64) // parts) for i in range(parts)] + [1 << 64]
        buf = np.empty(min(SLICE + SLICE // 2, total_bound + 1), dtype=_U64)
        index, crc, count, prev_last = [], 0, 0, None
        old_file = open(old_path, "rb") if old_path and old_count else None
        old_keys_at = 0
        try:
            with open(tmp, "wb", opener=opener) as out:
                out.write(b"\0" * _HEAD_BYTES)
                for lo, hi in zip(edges[:-1], edges[1:]):
                    _step_aside()
                    pieces = []
                    if old_file is not None:
                        end = old_keys_at + _count_below(old_file, old_keys_at, old_count, hi)
                        pieces.append(("old", old_keys_at, end))
                        old_keys_at = end
                    size = sum(e - s for _, s, e in pieces)
                    sl = []
                    for c in chunks:
                        a = c.searchsorted(_U64(lo)) if lo else 0
                        b = c.searchsorted(_U64(hi)) if hi < (1 << 64) else c.size
                        sl.append(c[a:b])
                        size += b - a
                    if size > buf.size:
                        buf = np.empty(size + size // 4, dtype=_U64)
                    at = 0
                    for _, s, e in pieces:
                        n = e - s
                        if n:
                            got = os.preadv(old_file.fileno(), [memoryview(buf[at:at + n]).cast("B")],
                                            _HEAD_BYTES + 8 * s)
                            if got != 8 * n:
                                raise OSError(f"{old_path}: short read")
                        at += n
                    for part in sl:
                        buf[at:at + part.size] = part
                        at += part.size
                    view = _sorted_unique(buf[:at])
                    if prev_last is not None and view.size and view[0] == prev_last:
                        view = view[1:]
                    if not view.size:
                        continue
                    prev_last = view[-1]
                    index.append(view[(-count) % BLOCK::BLOCK].copy())
                    filt.add(view, _step_aside)
                    crc = zlib.crc32(view, crc)
                    out.write(memoryview(view).cast("B"))
                    count += view.size
                out.seek(0)
                out.write(_HEADER.pack(_MAGIC, count, 8 * covers, BLOCK, crc))
                out.flush()
                os.fsync(out.fileno())
        finally:
            if old_file is not None:
                old_file.close()
        os.replace(tmp, self.path)
        _sync_dir(self.directory)
        del buf, sl
        if count >= SLICE:  # the slices' buffers, back to the kernel (it locks the heaps: not for small runs)
            malloc_tuning.trim()
        return count, covers, (np.concatenate(index) if index else _EMPTY), filt

    def _install(self) -> None:
        """(Loop.) Put a finished merge's run in place of the old one."""
        fut, take = self._merging, self._merging_chunks
        self._merging, self._merging_chunks = None, 0
        try:
            count, covers, index, filt = fut.result()
        except OSError as exc:  # the chunks stay in RAM, no more merges; flush() reports it
            if exc.filename is None:
                exc.filename = self.path + ".tmp"
            self.failed = exc
            return
        old = self._run
        self._run = _Run(self.path, count, covers, index, filt)
        if old is not None:
            old.close()
        del self._chunks[:take]
        self.merges += 1
        self._maybe_merge()

    def wait_merges(self) -> None:
        """Block until no merge is running and the result is installed (tests, bench, close)."""
        while self._merging is not None:
            self._merging.exception()  # waits; a failure is kept by _install
            self._install()

    def merge(self) -> None:
        """Seal the recent set and merge every chunk the log's commits allow, now (tests, bench)."""
        self.wait_merges()
        self._seal()
        self._maybe_merge(force=True)
        self.wait_merges()

    def committed(self, log_bytes: int) -> None:
        """(Any thread.) A commit covering ``log_bytes`` of the log is written: a merge may take them."""
        idx = log_bytes // 8
        if self._durable is None or idx > self._durable:
            self._durable = idx

    # -- RAM ----------------------------------------------------------------------------
    def memory_bytes(self) -> int:
        """Approximate RAM held: recent and hot sets, chunks, the run's index and filter."""
        import sys

        total = sys.getsizeof(self._recent) + 32 * len(self._recent)
        total += sys.getsizeof(self._hot) + 32 * len(self._hot)
        total += sum(arr.nbytes for _, _, arr in self._chunks)
        if self._run is not None:
            total += self._run.index.nbytes + self._run.filter.bits.nbytes
        return total

    # -- persistence --------------------------------------------------------------------
    def open_log(self, path: str) -> None:
        """Append every fingerprint added from now on to the log at ``path``."""
        self._log = open(path, "ab", buffering=0, opener=opener)
        if self._durable is None:
            self._durable = self._sealed if self._run is None else self._run.covers

    def flush(self, sync: bool = False) -> None:
        """Write the fingerprints added since the last flush (fsync with ``sync``)."""
        if self.failed is not None:  # a merge could not write the run: stateDir cannot be written
            raise self.failed
        if self._log is None:
            return
        if self._buf:
            self._log.write(self._buf)
            self._buf = bytearray()
        if sync:
            os.fsync(self._log.fileno())

    def close(self) -> None:
        """Flush the log, finish a running merge, release the run (idempotent)."""
        self.failed = None  # reported by flush() already; the log is written all the same
        try:
            if self._log is not None:
                self.flush()
                self._log.close()
                self._log = None
        finally:
            if self._merging is not None:
                self.wait_merges()  # a failure stays in .failed: the old run stays, the log holds all
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            if self._run is not None:
                self._run.close()
                self._run = None

    @classmethod
    def load(cls, directory: str, log_path: str, **kw) -> "Sieve":
        """The store of ``directory`` whose log is ``log_path`` (already cut back by the journal).

        A torn last log record is dropped and counted (:attr:`dropped_bytes`);
        the run is reopened if it is whole and covers no more than the log
        holds, else rebuilt from the log (:attr:`rebuilt`); the fingerprints
        logged after the run's coverage go back into RAM chunks.
        """
        seen = cls(directory, **kw)
        try:
            os.unlink(seen.path + ".tmp")  # a merge cut by the crash
        except FileNotFoundError:
            pass
        size = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        seen.dropped_bytes = size % 8
        if seen.dropped_bytes:
            with open(log_path, "r+b") as f:
                f.truncate(size - seen.dropped_bytes)
        logged = size // 8
        start = 0
        head = _read_header(seen.path) if os.path.exists(seen.path) else None
        if head is not None and head[1] // 8 <= logged and head[1] % 8 == 0:
            count, covers, crc = head
            index, filt, got, ordered = _scan(seen.path, count, seen.bloom_bits)
            if got == crc and ordered:
                seen._run = _Run(seen.path, count, covers // 8, index, filt)
                start = covers // 8
                seen._next = seen._sealed = start
        if seen._run is None and os.path.exists(seen.path):
            seen.rebuilt = True
            os.unlink(seen.path)
        # Everything the cut log holds is committed: it may all be merged.
        seen._durable = logged
        pool, seen._pool = seen._pool, None  # read back with merges done at once
        try:
            seen._replay(log_path, start, logged)
        finally:
            seen._pool = pool
        return seen

    def _replay(self, log_path: str, start: int, end: int) -> None:
        """Add log records ``start..end`` (not logged again), sealing and merging as usual."""
        step = self.seal_at
        with open(log_path, "rb") as f:
            at = start
            while at < end:
                n = min(step, end - at)
                f.seek(8 * at)
                fps = np.frombuffer(f.read(8 * n), dtype="<u8").tolist()
                self.add_many(fps)
                at += n
                # A fingerprint logged twice (never written so, but tolerated) is added
                # once: the log indices stay those of the log (a chunk ends no earlier).
                shift = at - self._next
                self._sealed += shift
                self._next += shift


def _step_aside() -> None:
    """(Merge thread.) Leave the GIL to the loop for a moment.

    The merge's numpy steps release the GIL, but a thread that releases and
    takes it back at once keeps winning it: the loop, waiting at each of its
    own numpy calls, lost up to the 5 ms switch interval each time (a batch
    took 8-20 ms during a merge instead of 0.2).  Sleeping a little between
    steps of about a millisecond hands the GIL over for certain.
    """
    time.sleep(STEP_ASIDE)


def _count_below(f, start: int, count: int, hi: int) -> int:
    """How many of the run's fingerprints from ``start`` on are below ``hi`` (a bisection with pread)."""
    if hi >= 1 << 64:
        return count - start
    lo, top = start, count
    one = np.empty(1, dtype=_U64)
    view = memoryview(one).cast("B")
    while lo < top:
        mid = (lo + top) // 2
        os.preadv(f.fileno(), [view], _HEAD_BYTES + 8 * mid)
        if int(one[0]) < hi:
            lo = mid + 1
        else:
            top = mid
    return lo - start


def _sync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: Fingerprints ``seenStore auto`` holds in RAM before its first run on disk.
AUTO_FIRST_MERGE = 1 << 18
#: ``seenStore disk``: the run from the first sealed chunk on.
DISK_FIRST_MERGE = 1 << 14
#: Recent fingerprints held in a Python set before they are sealed into a sorted chunk.
SEAL_AT = 1 << 14


def open_seen(kind: str, state_dir: str, *, reload: bool = False):
    """The seen store ``seenStore`` names (``auto``, ``array``, ``disk``) for ``state_dir``.

    With ``reload`` it is read back from ``stateDir/seen.log`` (already cut
    back to the last commit by the journal), else it starts empty.  Either
    kind reads the log the other wrote.
    """
    from .seen import SeenSet

    log = os.path.join(state_dir, "seen.log")
    if kind == "array":
        return SeenSet.load(log) if reload and os.path.exists(log) else SeenSet()
    first = DISK_FIRST_MERGE if kind == "disk" else AUTO_FIRST_MERGE
    if reload:
        return Sieve.load(state_dir, log, first_merge=first, seal_at=SEAL_AT)
    return Sieve(state_dir, first_merge=first, seal_at=SEAL_AT)
