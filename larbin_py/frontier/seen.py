"""The URL-seen test: the 64-bit fingerprints of every URL ever queued.

Mercator's "URL-seen test" answers one question per discovered link: was this
URL queued before?  Fingerprints come from :func:`larbin_py.url.fingerprint`
(stable across runs), so the set can be saved and reloaded with the crawl.

This implementation keeps the fingerprints in a Python ``set`` of ints: the
fastest membership test Python has (~50 ns), at roughly 60-70 bytes per URL.
Its persistence format is a flat little-endian array of uint64, so a more
compact in-memory structure can replace the set without changing the files.
"""

from __future__ import annotations

import os
import sys
from array import array
from typing import Iterable

__all__ = ["SeenSet"]


class SeenSet:
    """A set of 64-bit fingerprints with :meth:`add` answering "was it new?"."""

    __slots__ = ("_fps",)

    def __init__(self, fingerprints: Iterable[int] = ()) -> None:
        self._fps: set[int] = set(fingerprints)

    def __len__(self) -> int:
        return len(self._fps)

    def __contains__(self, fp: int) -> bool:
        return fp in self._fps

    def add(self, fp: int) -> bool:
        """Record ``fp``; True when it was not there before."""
        fps = self._fps
        if fp in fps:
            return False
        fps.add(fp)
        return True

    def discard(self, fp: int) -> None:
        self._fps.discard(fp)

    # -- persistence --------------------------------------------------------
    def save(self, path: str) -> None:
        """Write every fingerprint to ``path`` atomically (temp file, fsync, rename)."""
        arr = array("Q", self._fps)
        if sys.byteorder != "little":
            arr.byteswap()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            arr.tofile(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> "SeenSet":
        """Read a set saved by :meth:`save`; a truncated tail is ignored."""
        arr = array("Q")
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            arr.fromfile(f, size // 8)
        if sys.byteorder != "little":
            arr.byteswap()
        return cls(arr)
