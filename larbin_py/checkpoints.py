"""When a crawl's progress is made durable, and what ``--reload`` gives back to the engine.

The crawl state (:class:`~larbin_py.crawl_state.CrawlState`, the
checkpointer strategy) says *where* progress is kept: stateDir
(``LocalState``), Redis (``DistState``), nowhere (``larbin_py.testing.state.MemoryState``).
:class:`Checkpoints` says *when*, the same for all of them:

* once as the crawl starts (the seeds and a ``--reload``'s state in it),
  taken as a task (:meth:`first`) when the crawl state allows it
  (``first_beside``: stateDir, a test's memory): the first pump sends the
  first DNS queries and requests, then the snapshot is taken on the loop,
  as every periodic one is with requests in flight, and written meanwhile
  (the first request waited 10-15 ms for its writes and fsyncs); a
  distributed worker's first one joins the crawl and is awaited first,
* every ``checkpointInterval`` seconds while it runs, each timer armed once
  the last checkpoint is written (so two never overlap), and none armed
  when the state keeps nothing (``checkpoint`` returned False: canReload
  off, a worker, a fake);
* once at the end, unless the crawl failed (the last good one is kept).

Each carries the engine's own section: its counters, the crawl time (the
runs before a ``--reload`` included) and pageNoDuplicate's digests, which
:meth:`Checkpoints.restore` gives back.  The analysis stage's tasks marked
before a checkpoint are confirmed by it (their links are in it).  A
checkpoint that fails stops the crawl (larbin_py.failures).
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from .output import OutputError

__all__ = ["Checkpoints"]


class Checkpoints:
    """The checkpoints of one crawl, taken through ``crawl_state``.

    ``frontier``, ``counts`` (:class:`~larbin_py.engine_stats.Counters`),
    ``digests`` (:class:`~larbin_py.page_digests.PageDigests`) and
    ``analysis`` (the analysis stage, or None): what a checkpoint covers;
    ``interval``: checkpointInterval; ``failures``: where a failed one is
    reported (:class:`~larbin_py.failures.Failures`); ``err``: where
    ``--reload`` says what it continued.  :meth:`begin` gives the loop once
    it runs, and ``stopping()``, True once the crawl stops taking work (no
    timer is armed then).
    """

    def __init__(self, crawl_state, frontier, *, counts, digests, analysis, interval: float, failures,
                 err) -> None:
        self.crawl_state = crawl_state
        self.frontier = frontier
        self.counts = counts
        self.digests = digests
        self.analysis = analysis
        self.interval = interval
        self.failures = failures
        self.err = err
        #: Crawl time of the runs before a --reload, seconds.
        self.elapsed_before = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = 0.0
        self._stopping: Callable[[], bool] = lambda: False
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None

    def begin(self, loop: asyncio.AbstractEventLoop, stopping: Callable[[], bool]) -> None:
        """The crawl starts on ``loop``: its time counts from now."""
        self._loop = loop
        self._started = loop.time()
        self._stopping = stopping

    async def first(self) -> None:
        """The first checkpoint.  When the crawl state allows it
        (``first_beside``), a task: its snapshot is taken when the loop runs
        it (after the pump the seeds scheduled), its writing goes on beside
        the crawl as every later one's; a failure stops the crawl as theirs
        does, and :meth:`close` awaits it.  Otherwise (a worker joining the
        distributed crawl) it is awaited before the crawl runs."""
        if getattr(self.crawl_state, "first_beside", False):
            self._task = self._loop.create_task(self.write())
        else:
            await self.write()

    def elapsed(self) -> float:
        """Crawl time so far, the runs before a --reload included."""
        return self.elapsed_before + ((self._loop.time() - self._started) if self._loop else 0.0)

    def restore(self) -> None:
        """Continue the crawl saved in the crawl state (``--reload``); say what was damaged."""
        st = self.crawl_state
        section = st.restore(self.frontier, self._loop.time(), time.time(), self.err)
        self.counts.restore(section)
        self.elapsed_before = float(section.get("elapsed", 0.0))
        st.damaged["pageDigests"] = self.digests.restore(section.get("page_digests", ()))
        st.report_damage(self.err)
        if self.analysis is not None and self.analysis.resume():
            print(f"larbin_py: {self.analysis.resumed} analysis tasks resumed", file=self.err)

    async def write(self) -> bool:
        """Make the crawl's progress durable, then arm the next one; False
        (and the crawl stops) on failure."""
        section = dict(self.counts.to_state(), elapsed=self.elapsed(), page_digests=self.digests.to_state())
        analysed = self.analysis.mark() if self.analysis is not None else 0
        try:
            written = await self.crawl_state.checkpoint(self.frontier, self._loop.time(), section)
            if self.analysis is not None:
                # Their links are in the checkpoint (or nothing is kept at all: no --reload to redo them for).
                self.analysis.confirm(analysed)
        except OutputError as exc:
            self.failures.output_failed(exc)
            return False
        except OSError as exc:
            self.failures.write_failed(exc)
            return False
        if written and not self._stopping():
            self._timer = self._loop.call_later(self.interval, self._on_timer)
        return True

    def _on_timer(self) -> None:
        self._timer = None
        if not self._stopping():
            self._task = self._loop.create_task(self.write())

    async def close(self, *, last: bool) -> None:
        """The end: no more timers, the checkpoint being written awaited,
        then the last one (``last``: the crawl did not fail)."""
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if last:
            await self.write()
