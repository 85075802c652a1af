"""``save`` mode: Larbin's simple numbered save.

Page *n* (0, 1, 2... in write order) is ``saveDir/dDDDDD/fFFFFF`` with
``DDDDD = n // filesPerDir`` and ``FFFFF = n % filesPerDir`` (five digits,
zero-padded; more digits past 99999).  ``saveDir/index.tsv`` maps each file
back to its URL.  The position holds the next page number, so a resumed
crawl continues the numbering (files numbered after the checkpoint are
overwritten as the crawl redoes that work).  ``flush(sync=True)`` and
``close()`` fdatasync the page files written since the last sync and fsync
their directories, never ``os.sync()``.
"""

from __future__ import annotations

import os

from .base import Document, IndexWriter, OutputError, OutputStats, position_int
from .paths import SafeTree

__all__ = ["SaveOutput"]


class SaveOutput:
    """Writes page *n* to ``dDDDDD/fFFFFF`` (atomic rename) and indexes it."""

    mode = "save"

    def __init__(self, save_dir: str, *, files_per_dir: int = 2000, position: dict | None = None):
        if files_per_dir < 1:
            raise OutputError(f"filesPerDir must be at least 1, not {files_per_dir}")
        self.save_dir = save_dir
        self.files_per_dir = files_per_dir
        self.stats = OutputStats()
        self._next = position_int(position, "next_file", 0)
        self._tree = SafeTree(save_dir)
        self._dir_number = -1
        self._dir_fd = -1
        self._closed = False
        try:
            self._index = IndexWriter(self._tree.root, position_int(position, "index_length"))
        except BaseException:
            self._tree.close()
            raise

    def write(self, doc: Document) -> str | None:
        if self._closed:
            raise OutputError("write after close")
        if doc.archive_only or doc.keep or doc.remove:  # an exchange only a WARC keeps; a recrawl's
            return None
        n = self._next
        dir_number, file_number = divmod(n, self.files_per_dir)
        if dir_number != self._dir_number:
            self._switch_dir(dir_number)
        dirname = "d%05d" % dir_number
        leaf = "f%05d" % file_number
        body = doc.body
        self._tree.write_in(self._dir_fd, leaf, body, f"{dirname}/{leaf}")
        self._next = n + 1
        relpath = f"{dirname}/{leaf}"
        self._index.append(doc.url, relpath, doc.status, doc.content_type, len(body))
        stats = self.stats
        stats.count(doc, len(body))
        stats.files += 1
        return relpath

    def _switch_dir(self, dir_number: int) -> None:
        """Keep the current dDDDDD open: one directory fd for the whole run."""
        self._close_dir()
        fd, actual = self._tree.open_dir(["d%05d" % dir_number])
        if actual != ["d%05d" % dir_number]:
            os.close(fd)
            raise OutputError(f"cannot use {self.save_dir}/d{dir_number:05d}: a file holds the name")
        self._dir_fd, self._dir_number = fd, dir_number

    def _close_dir(self) -> None:
        if self._dir_fd >= 0:
            fd, self._dir_fd, self._dir_number = self._dir_fd, -1, -1
            self._tree.close_dir(fd)  # fsynced first when it got new files

    def flush(self, sync: bool = False) -> None:
        if sync:
            # Pages first: a durable index line must name a whole file.
            self._tree.sync()
        self._index.flush(sync)

    def position(self) -> dict:
        return {"mode": self.mode, "index_length": self._index.length, "next_file": self._next}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._tree.sync()
            self._index.close()
        finally:
            try:
                self._close_dir()
            finally:
                self._tree.close()
