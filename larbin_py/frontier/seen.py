"""The URL-seen test: the 64-bit fingerprints of every URL ever queued.

Mercator's "URL-seen test" answers one question per discovered link: was this
URL queued before?  Fingerprints come from :func:`larbin_py.url.fingerprint`
(stable across runs), so the set survives restarts.

Memory.  A Python ``set`` of ints costs 70-90 bytes per URL (an int object
plus a hash-table slot at most 60 % full): 10 M URLs would take most of a
gigabyte.  Here the bulk lives in one sorted numpy ``uint64`` array, 8 bytes
per URL, searched by bisection; only the fingerprints added since the last
merge sit in a small Python set.  When that set reaches ``merge_at``
entries it is merged into the array (one sorted insert: a copy of the array,
tens of milliseconds at 10 M).  :meth:`add_many` tests a page's links in one
vectorised search, which is where the crawler spends its seen-test time.

Persistence.  With :meth:`open_log`, every new fingerprint is appended to a
log (little-endian uint64, 8 bytes each); :meth:`flush` writes it out and
:meth:`load` rebuilds the set from it.  Nothing is ever rewritten, so a
crash can only cut the log's last record, which :meth:`load` drops and
reports.  The engine flushes the URL store *before* this log, so a
fingerprint on disk always has its URL on disk too (the converse may fail
after a crash: a URL queued twice, never one lost).
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

from ..lazyimport import LazyModule
from ..owner_only import opener

__all__ = ["SeenSet", "SeenUrls"]



def _numpy_loaded(numpy) -> None:
    global _EMPTY
    _EMPTY = numpy.zeros(0, dtype=numpy.uint64)


#: numpy, imported on first use (larbin_py.lazyimport).
np = LazyModule("numpy", globals(), "np", _numpy_loaded)


class SeenSet:
    """A set of 64-bit fingerprints with :meth:`add` answering "was it new?"."""

    __slots__ = ("_recent", "_hot", "_base", "merge_at", "hot_size", "_log", "_buf", "merges",
                 "dropped_bytes")

    def __init__(self, fingerprints: Iterable[int] = (), *, merge_at: int = 1 << 18,
                 hot_size: int = 1 << 14) -> None:
        self.merge_at = merge_at
        self.hot_size = hot_size
        self._recent: set[int] = set()
        self._hot: set[int] = set()  # fingerprints lately found in the array
        self._base = np.unique(np.fromiter(fingerprints, dtype=np.uint64))
        self._log = None
        self._buf = bytearray()
        self.merges = 0
        #: Bytes of a torn last record dropped by :meth:`load`.
        self.dropped_bytes = 0

    def __len__(self) -> int:
        return len(self._recent) + int(self._base.size)

    def __contains__(self, fp: int) -> bool:
        return fp in self._recent or self._in_base(fp)

    def _in_base(self, fp: int) -> bool:
        base = self._base
        if not base.size:
            return False
        key = np.uint64(fp)
        i = int(base.searchsorted(key))
        return i < base.size and base[i] == key

    def add(self, fp: int) -> bool:
        """Record ``fp``; True when it was not there before."""
        if fp in self._recent or self._in_base(fp):
            return False
        self._remember(fp)
        return True

    def add_many(self, fps: Sequence[int]) -> list[bool]:
        """:meth:`add` for each of ``fps`` in order (one vectorised search).

        Fingerprints recently found in the array (a page's navigation links,
        met again on every page of its site) are answered from a small
        cache of hot entries without searching the array again.
        """
        if not fps:
            return []
        recent, hot = self._recent, self._hot
        ask = [fp for fp in fps if fp not in recent and fp not in hot]
        in_base: set[int] = set()
        base = self._base
        if ask and base.size:
            keys = np.array(ask, dtype=np.uint64)
            idx = base.searchsorted(keys)
            np.minimum(idx, base.size - 1, out=idx)
            found = base[idx] == keys
            if found.any():
                in_base = set(keys[found].tolist())
        out = []
        log = self._log is not None
        for fp in fps:
            if fp in recent or fp in hot or fp in in_base:
                out.append(False)
            else:
                recent.add(fp)
                if log:
                    self._buf += fp.to_bytes(8, "little")
                out.append(True)
        if in_base:  # after the answers: a clear must not forget a hot one skipped above
            if len(hot) + len(in_base) > self.hot_size:
                hot.clear()
            hot.update(in_base)
        if len(recent) >= self.merge_at:  # not inside the loop: ``in_base`` describes this base
            self.merge()
        return out

    def _remember(self, fp: int) -> None:
        self._recent.add(fp)
        if self._log is not None:
            self._buf += fp.to_bytes(8, "little")
        if len(self._recent) >= self.merge_at:
            self.merge()

    def merge(self) -> None:
        """Move the recent fingerprints into the sorted array."""
        if not self._recent:
            return
        new = np.array(sorted(self._recent), dtype=np.uint64)
        base = self._base
        self._base = np.insert(base, base.searchsorted(new), new) if base.size else new
        self._recent = set()
        self.merges += 1

    def memory_bytes(self) -> int:
        """Approximate RAM held: the array plus the recent set and its ints."""
        import sys

        recent = self._recent
        return (int(self._base.nbytes) + sys.getsizeof(recent) + 32 * len(recent)
                + sys.getsizeof(self._hot) + 32 * len(self._hot))

    # -- persistence --------------------------------------------------------
    def open_log(self, path: str) -> None:
        """Append every fingerprint added from now on to the log at ``path``."""
        self._log = open(path, "ab", buffering=0, opener=opener)

    def flush(self, sync: bool = False) -> None:
        """Write the fingerprints added since the last flush (fsync with ``sync``)."""
        if self._log is None:
            return
        if self._buf:
            self._log.write(self._buf)
            self._buf = bytearray()
        if sync:
            os.fsync(self._log.fileno())

    def close(self) -> None:
        if self._log is not None:
            self.flush()
            self._log.close()
            self._log = None

    @classmethod
    def load(cls, path: str, *, merge_at: int = 1 << 18) -> "SeenSet":
        """The set logged at ``path``; a torn last record is dropped and counted."""
        size = os.path.getsize(path)
        fps = np.fromfile(path, dtype="<u8", count=size // 8).astype(np.uint64, copy=False)
        seen = cls(merge_at=merge_at)
        seen._base = np.unique(fps) if fps.size else _EMPTY
        seen.dropped_bytes = size % 8
        if seen.dropped_bytes:
            with open(path, "r+b") as f:
                f.truncate(size - seen.dropped_bytes)
        return seen


class SeenUrls:
    """URL strings lately found or put in a :class:`SeenSet`: a page's links
    answered "seen" without admission, fingerprint or search.

    Mercator keeps such a cache of popular URLs in front of its URL-seen
    test: a site's navigation links come back on every one of its pages.
    Exact strings (a hit is never a false "seen"), kept in two generations
    of at most ``size`` URLs each: when the young one would overflow it
    becomes the old one and the old one is dropped, so the URLs met lately
    stay.  About 120 bytes per URL held (2 x ``size`` at most: 8 MB by
    default).

    Correct only for a SeenSet that never forgets: a URL, once in it, is
    there for good (a restart starts with an empty cache).
    """

    __slots__ = ("size", "_young", "_old")

    def __init__(self, size: int = 1 << 15) -> None:
        self.size = size
        self._young: set[str] = set()
        self._old: set[str] = set()

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def __contains__(self, url: str) -> bool:
        return url in self._young or url in self._old

    def unknown(self, urls: Iterable[str]) -> list[str]:
        """Those of ``urls`` not held here, in order."""
        young, old = self._young, self._old
        return [u for u in urls if u not in young and u not in old]

    def remember(self, urls: Sequence[str]) -> None:
        """Hold ``urls`` (each now in the SeenSet); the oldest generation goes
        when the young one would pass ``size``."""
        young = self._young
        if len(young) + len(urls) > self.size:
            self._old = young
            self._young = young = set()
            if len(urls) > self.size:
                urls = urls[-self.size:]
        young.update(urls)
