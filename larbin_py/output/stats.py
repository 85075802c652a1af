"""``stats`` and ``none`` modes: nothing is stored.

``stats`` only counts (pages, body bytes, by status, by content type — see
:class:`~larbin_py.output.base.OutputStats`); ``none`` does not even count.
"""

from __future__ import annotations

from .base import Document, OutputStats

__all__ = ["StatsOutput", "NoOutput"]


class StatsOutput:
    """Counts pages; writes nothing."""

    mode = "stats"

    def __init__(self) -> None:
        self.stats = OutputStats()

    def write(self, doc: Document) -> None:
        if not (doc.archive_only or doc.keep or doc.remove):  # an exchange only a WARC keeps is no page
            self.stats.count(doc, len(doc.body))
        return None

    def flush(self, sync: bool = False) -> None:
        pass

    def position(self) -> dict:
        return {"mode": self.mode}

    def close(self) -> None:
        pass


class NoOutput:
    """Discards pages (``outputMode none``); ``stats`` stays at zero."""

    mode = "none"

    def __init__(self) -> None:
        self.stats = OutputStats()

    def write(self, doc: Document) -> None:
        return None

    def flush(self, sync: bool = False) -> None:
        pass

    def position(self) -> dict:
        return {"mode": self.mode}

    def close(self) -> None:
        pass
