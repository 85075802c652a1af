"""``mirror`` mode: one file per page at a path derived from its URL.

``saveDir/HOST[_PORT]/PATH`` (see :mod:`larbin_py.output.paths` for the exact,
reversible and safe mapping), plus ``saveDir/index.tsv``.  A page fetched
again overwrites its file atomically and gets a new index line; a page with
``duplicate_of`` set is saved like any other (the mirror stays browsable).

A recrawl (larbin_py.recrawl) starts a new index over the files it finds:
a page unchanged (``Document.revisit``) or kept (``Document.keep``) is not
written again, its existing file gets its index line (its size as it is;
none when the file is not there); a page gone (``Document.remove``) loses
its file.  :meth:`MirrorOutput.locate` tells a recrawl whether a page's
file is there before it trusts a 304; the file it found comes back with
the page (``Document.stored_file``), not looked up twice.

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
        found = doc.stored_file
        parts = url_to_parts(doc.url) if found is None else None
        if doc.remove:
            self._tree.remove(parts[:-1], parts[-1])
            return None
        if doc.keep or doc.revisit is not None:
            if found is None:
                found = self._tree.find(parts[:-1], parts[-1])
            if found is not None:
                relpath, size = found
                self._index.append(doc.url, relpath, doc.status if 200 <= doc.status < 300 else 200,
                                   doc.content_type, size)
                if doc.revisit is not None:
                    self.stats.count(doc, size)
                return relpath
            if doc.keep or not doc.body:  # nothing to index, nothing to write
                return None
        if parts is None:
            parts = url_to_parts(doc.url)
        body = doc.body
        relpath = self._tree.write(parts[:-1], parts[-1], body)
        self._index.append(doc.url, relpath, doc.status, doc.content_type, len(body))
        stats = self.stats
        stats.count(doc, len(body))
        stats.files += 1
        return relpath

    def locate(self, url: str) -> tuple[str, int] | None:
        """The file of ``url``, ``(relative path, size)``, or None when it is not there
        (a recrawl's lookup before it trusts a 304: :attr:`Document.stored_file`)."""
        parts = url_to_parts(url)
        return self._tree.find(parts[:-1], parts[-1])

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

