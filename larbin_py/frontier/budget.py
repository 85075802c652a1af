"""Per-site budgets (``maxPagesBySite``, ``maxBytesBySite``, a ``site`` line's): how much of a site is crawled.

A site (``scheme://host:port``) may have a page budget and a byte budget:
the crawl's, or a ``site`` line's for its host (``limits(host)``: the
first matching line's value, None for the crawl's; 0 means none).  The
frontier asks :meth:`SiteBudget.allows` before it starts a page request
(``_take_from_site``): a site past its budget has its URLs forgotten as
``siteBudget``, one by one as they come out of its FIFO, counted like any
other outcome, never silently dropped.

What counts:

* **pages**: a page URL of the site that ended after a request -- fetched,
  ``noindex``, ``canonicalised``, an error answer, or out of retries.  A
  request running holds a place (:meth:`started`), so the requests running
  never push a site past its page budget; a retry gives its place back
  (:meth:`released`) and takes it again when it starts.  Sitemap files and
  robots.txt are not pages: they count for neither budget;
* **bytes**: the bodies read from the site's pages (``spent``, the bytes the
  fetcher read).  The byte budget is checked before a request starts, so
  the page that crosses it is kept whole; the next ones are forgotten.

Sans-I/O, no clock.  Memory: one entry per site that has a budget (about
150 bytes), kept for the crawl's life (not pruned with the site: a site
made again after pruning keeps its count) and in the checkpoint
(:meth:`to_state`, :meth:`restore`), so ``--reload`` goes on counting.
In the distributed mode each worker counts the sites it owns (see
docs/scope.md for what a hand-over keeps).
"""

from __future__ import annotations

from typing import Callable

__all__ = ["SiteBudget", "REASON"]

#: The outcome of a URL forgotten past its site's budget.
REASON = "siteBudget"


class SiteBudget:
    """The budgets of every site: ``max_pages``/``max_bytes`` the crawl's (0: none);
    ``limits(host) -> (pages or None, bytes or None)`` a host's own (a ``site`` line)."""

    __slots__ = ("max_pages", "max_bytes", "limits", "active", "_used", "_limits")

    def __init__(self, max_pages: int = 0, max_bytes: int = 0,
                 limits: Callable[[str], tuple[int | None, int | None]] | None = None) -> None:
        self.max_pages = max_pages
        self.max_bytes = max_bytes
        self.limits = limits
        #: Some site may have a budget (else every call is skipped by the frontier).
        self.active = bool(max_pages or max_bytes or limits is not None)
        #: site key -> [pages ended, bytes read, pages running]
        self._used: dict[str, list[int]] = {}
        self._limits: dict[str, tuple[int, int]] = {}

    def _limit(self, key: str, host: str) -> tuple[int, int]:
        got = self._limits.get(key)
        if got is None:
            pages, nbytes = self.limits(host) if self.limits is not None else (None, None)
            got = (self.max_pages if pages is None else pages, self.max_bytes if nbytes is None else nbytes)
            if len(self._limits) >= 65536:
                self._limits.clear()
            self._limits[key] = got
        return got

    def allows(self, key: str, host: str) -> bool:
        """True when a page request of site ``key`` (host ``host``) may start."""
        pages, nbytes = self._limit(key, host)
        if not pages and not nbytes:
            return True
        used = self._used.get(key)
        if used is None:
            return True
        if pages and used[0] + used[2] >= pages:
            return False
        return not nbytes or used[1] < nbytes

    def _entry(self, key: str) -> list[int]:
        used = self._used.get(key)
        if used is None:
            used = self._used[key] = [0, 0, 0]
        return used

    def started(self, key: str, host: str) -> None:
        """A page request of the site starts: it holds a place."""
        if self._limit(key, host) != (0, 0):
            self._entry(key)[2] += 1

    def released(self, key: str) -> None:
        """A page request ended in a retry: its place is given back (it takes it again later)."""
        used = self._used.get(key)
        if used is not None and used[2] > 0:
            used[2] -= 1

    def ended(self, key: str) -> None:
        """A page request ended for good: one page of the site's budget spent."""
        used = self._used.get(key)
        if used is not None:
            used[0] += 1
            if used[2] > 0:
                used[2] -= 1

    def spent(self, key: str, host: str, nbytes: int) -> None:
        """``nbytes`` of a page's body were read from the site."""
        if nbytes and self._limit(key, host)[1]:
            self._entry(key)[1] += nbytes

    def used(self, key: str) -> tuple[int, int]:
        """``(pages, bytes)`` spent by the site (running requests aside)."""
        used = self._used.get(key)
        return (used[0], used[1]) if used is not None else (0, 0)

    def to_state(self) -> dict[str, list[int]]:
        """The counts, for a checkpoint: ``{site key: [pages, bytes]}``."""
        return {key: [used[0], used[1]] for key, used in self._used.items() if used[0] or used[1]}

    def restore(self, state) -> int:
        """Take a checkpoint's counts back; returns how many entries were unusable (skipped)."""
        bad = 0
        if not isinstance(state, dict):
            return 1 if state else 0
        for key, value in state.items():
            if (isinstance(key, str) and isinstance(value, list) and len(value) == 2
                    and all(type(v) is int and v >= 0 for v in value)):
                used = self._entry(key)
                used[0], used[1] = value
            else:
                bad += 1
        return bad
