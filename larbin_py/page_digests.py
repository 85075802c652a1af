"""pageNoDuplicate's table: which page first had a given content (sans-I/O).

A fetched body is known by its 8-byte blake2b digest; the table maps the
digest to the URL of the first page met with it, so a later page with the
same body is recorded as a duplicate of that URL (the output marks it; its
links are not followed again).

The table is bounded: at most :data:`MAX_PAGE_DIGESTS` digests (about
25 MB with their URLs), kept in least-recently-met order.  Past the bound the digest met
longest ago is forgotten, so a duplicate of a page long forgotten is taken
as new: kept in full and its links read again (the seen set still stops its
links from being fetched twice).  An 8-byte digest makes a false duplicate
(two different bodies, one digest) about one in 10**8 at that size.

The table is kept across --reload: :meth:`PageDigests.to_state` gives it as
a compact list of ``"<16 hex digits> <url>"`` strings, oldest first, saved
with the checkpoint's engine section; :meth:`PageDigests.restore` reads it
back (records that do not parse are skipped and counted).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

__all__ = ["MAX_PAGE_DIGESTS", "PageDigests"]

#: Digests pageNoDuplicate remembers (the least recently met are forgotten past it).
MAX_PAGE_DIGESTS = 100_000


class PageDigests:
    """The bounded digest -> first URL table of pageNoDuplicate."""

    def __init__(self, limit: int = MAX_PAGE_DIGESTS) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._table: OrderedDict[bytes, str] = OrderedDict()
        #: Digests forgotten to keep the bound.
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._table)

    def first_of(self, body: bytes, url: str) -> str | None:
        """The URL first met with ``body``, or None (``url`` is then remembered as its first)."""
        key = hashlib.blake2b(body, digest_size=8).digest()
        table = self._table
        first = table.get(key)
        if first is not None:
            table.move_to_end(key)
            return first
        table[key] = url
        if len(table) > self.limit:
            table.popitem(last=False)
            self.evicted += 1
        return None

    def to_state(self) -> list[str]:
        """The table as ``"<hex digest> <url>"`` strings, least recently met first."""
        return [f"{key.hex()} {url}" for key, url in self._table.items()]

    def restore(self, records) -> int:
        """Load :meth:`to_state`'s records (the bound applies); the number skipped as damaged."""
        bad = 0
        table = self._table
        for record in records:
            digest, sep, url = record.partition(" ") if isinstance(record, str) else ("", "", "")
            try:
                key = bytes.fromhex(digest)
            except ValueError:
                key = b""
            if not sep or not url or len(key) != 8:
                bad += 1
                continue
            table[key] = url
            table.move_to_end(key)
            if len(table) > self.limit:
                table.popitem(last=False)
                self.evicted += 1
        return bad
