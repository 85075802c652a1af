"""``mirror`` mode: one file per page at a path derived from its URL.

``saveDir/HOST[_PORT]/PATH`` (see :mod:`larbin_py.output.paths` for the exact,
reversible and safe mapping), plus ``saveDir/index.tsv``.  A page fetched
again overwrites its file atomically and gets a new index line; a page with
``duplicate_of`` set is saved like any other (the mirror stays browsable).

Page files are not fsynced one by one: ``flush(sync=True)`` (a checkpoint)
and ``close()`` call ``os.sync()`` so every page renamed so far is durable.
"""

from __future__ import annotations

import os

from .base import Document, IndexWriter, OutputError, OutputStats, position_int
from .paths import SafeTree, url_to_parts

__all__ = ["MirrorOutput"]


class MirrorOutput:
    """Writes each page to its mirror path (atomic rename) and indexes it."""

    mode = "mirror"

    def __init__(self, save_dir: str, *, position: dict | None = None):
        self.save_dir = save_dir
        self.stats = OutputStats()
        self._tree = SafeTree(save_dir)
        self._closed = False
        try:
            self._index = IndexWriter(self._tree.root, position_int(position, "index_length"))
        except BaseException:
            self._tree.close()
            raise

    def write(self, doc: Document) -> str:
        if self._closed:
            raise OutputError("write after close")
        parts = url_to_parts(doc.url)
        body = doc.body
        relpath = self._tree.write(parts[:-1], parts[-1], body)
        self._index.append(doc.url, relpath, doc.status, doc.content_type, len(body))
        stats = self.stats
        stats.count(doc, len(body))
        stats.files += 1
        return relpath

    def flush(self, sync: bool = False) -> None:
        self._index.flush(sync)
        if sync:
            # Page files were renamed into place without fsync (one per page
            # would be far too slow); a checkpoint makes them all durable.
            os.sync()

    def position(self) -> dict:
        return {"mode": self.mode, "index_length": self._index.length}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._index.close()
            os.sync()
        finally:
            self._tree.close()

