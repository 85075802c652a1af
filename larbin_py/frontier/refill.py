"""When the URLs parked in the wait lane come back to their sites: refills in batches.

A URL loaded while its site's FIFO is full (``maxUrlsBySite``, in-flight
URLs included) is parked in the wait lane (Larbin's ``URLsDiskWait``) and
counted in its site's ``overflow``.  The wait lane mixes every full site's
URLs, so finding one site's next URL means rotating past the others (a miss
is popped and parked again).  Larbin rotated for every freed slot: with a few
hundred full sites that is dozens of misses per page fetched.

Here a site *wants* a refill only once it has drained to half its bound
(:attr:`WaitRefill.block` free slots), and a rotation starts only when at
least one in :data:`REFILL_SHARE` of the sites with parked URLs wants one,
or when a wanting site has nothing left to send.  One rotation then fills
many sites, and stops as soon as none wants more or a whole turn of the
lane found nothing that fits (then the wanting sites' counts were off,
records lost to a damaged store: they stop wanting).

After a restart the records parked before it come back first, placed as
fresh URLs (:attr:`WaitRefill.replaying`): their sites have no overflow
count yet.  :class:`WaitRefill` is the frontier's own bookkeeping (the
frontier's ``load`` pops and places; this says from which lane and tracks
the counts); plain data, no clock, no I/O.
"""

from __future__ import annotations

from .sites import NamedSite

__all__ = ["WaitRefill", "REFILL_SHARE"]

#: A rotation of the wait lane starts once one in this many sites with
#: parked URLs wants a refill (or a wanting site has nothing left to send):
#: a rotation then pops about this many records per record placed.
REFILL_SHARE = 4


class WaitRefill:
    """The wait lane's rotation for sites bounded by ``max_urls_by_site``;
    ``replaying``: records parked before a restart, placed first as fresh ones."""

    __slots__ = ("bound", "block", "parked_sites", "wanting", "rotating", "misses", "replaying")

    def __init__(self, max_urls_by_site: int, *, replaying: int = 0) -> None:
        self.bound = max_urls_by_site
        #: Free slots a site with parked URLs must have before it wants a refill.
        self.block = max(1, max_urls_by_site // 2)
        self.parked_sites = 0  # sites with overflow > 0
        self.wanting: set[NamedSite] = set()  # parked sites drained to ``block`` free slots
        self.rotating = False  # the loader pops the wait lane
        self.misses = 0  # records of this turn that fitted no site
        self.replaying = replaying

    def park(self, site: NamedSite) -> None:
        """A URL of ``site`` was loaded while its FIFO was full: parked in the wait lane."""
        site.overflow += 1
        if site.overflow == 1:
            self.parked_sites += 1

    def placed(self, site: NamedSite, from_wait: bool) -> None:
        """A URL went into ``site``'s FIFO while the site has URLs parked (overflow > 0)."""
        if from_wait:
            site.overflow -= 1
            if site.overflow == 0:
                self.parked_sites -= 1
                self.wanting.discard(site)
        # A full site wants nothing (whichever lane filled it).
        if not site.room(self.bound):
            self.wanting.discard(site)

    def freed(self, site: NamedSite) -> None:
        """A slot of ``site`` became free: its parked URLs may come back."""
        if site.overflow <= 0:
            return
        wanting = self.wanting
        if site not in wanting:
            if len(site.fifo) + site.in_flight > self.bound - self.block:
                return
            wanting.add(site)
            # A turn counts from here: earlier misses may be this site's.
            self.misses = 0
        if not self.rotating and (len(wanting) * REFILL_SHARE >= self.parked_sites or not site.fifo):
            self.rotating = True
            self.misses = 0

    def hit(self) -> None:
        """A record of the rotation found its site."""
        self.misses = 0
        if not self.wanting:
            self.rotating = False

    def miss(self, waiting: int) -> None:
        """A record of the rotation fitted no site (parked again); ``waiting``: records in the wait lane."""
        self.misses += 1
        if self.misses >= waiting:
            self.end()

    def end(self) -> None:
        """The rotation is over: the wait lane is empty, or a whole turn found
        nothing for the wanting sites (so none of them has a record parked:
        their counts were off, records lost to a damaged store).  They stop wanting."""
        for site in self.wanting:
            self.parked_sites -= 1
            site.overflow = 0
        self.wanting.clear()
        self.rotating = False
        self.misses = 0

    def forget(self, site: NamedSite) -> None:
        """``site`` was handed over: its parked URLs left the wait lane with it."""
        if site.overflow > 0:
            site.overflow = 0
            self.parked_sites -= 1
            self.wanting.discard(site)

    def lane_filtered(self) -> None:
        """Records left the wait lane (a hand-over): a turn counts afresh."""
        self.misses = 0
        if self.rotating and not self.wanting:
            self.rotating = False
