"""``mirror`` mode: one file per page at a path derived from its URL.

``saveDir/HOST[_PORT]/PATH`` (see :mod:`larbin_py.output.paths` for the exact,
reversible and safe mapping), plus ``saveDir/index.tsv``.  A page fetched
again overwrites its file atomically and gets a new index line; a page with
``duplicate_of`` set is saved like any other (the mirror stays browsable).

Page files are not fsynced one by one as they are written (a killed
process loses nothing the kernel has): ``flush(sync=True)`` (a checkpoint,
or each commit with ``syncCommits``) and ``close()`` fdatasync the files
written since the last sync and fsync their directories
(:meth:`~larbin_py.output.paths.SafeTree.sync`) -- the crawl's own files,
never ``os.sync()``.
"""

from __future__ import annotations

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

    def write(self, doc: Document) -> str | None:
        if self._closed:
            raise OutputError("write after close")
        if doc.archive_only:  # an exchange only a WARC keeps
            return None
        parts = url_to_parts(doc.url)
        body = doc.body
        relpath = self._tree.write(parts[:-1], parts[-1], body)
        self._index.append(doc.url, relpath, doc.status, doc.content_type, len(body))
        stats = self.stats
        stats.count(doc, len(body))
        stats.files += 1
        return relpath

    def flush(self, sync: bool = False) -> None:
        if sync:
            # Pages first: a durable index line must name a whole file.
            self._tree.sync()
        self._index.flush(sync)

    def position(self) -> dict:
        return {"mode": self.mode, "index_length": self._index.length}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._tree.sync()
            self._index.close()
        finally:
            self._tree.close()

