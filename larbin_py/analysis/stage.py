"""The analysis stage as the engine sees it: submit a page, hear its links back.

:class:`AnalysisStage` is the seam object: the page handler's ``analyze``
step calls :meth:`AnalysisStage.submit` (the page's tasks go on the durable
queue, one coroutine each is spawned as an engine task, so the engine's end
of work waits for them and its stop grace covers them); each coroutine tries
its task on the pool, and on the loop the ``links`` analyzer's links go to
``Frontier.offer(page_url, depth, links)`` -- depth limits, rules, the seen
test hold as for inline analysis.  A failed try is counted and tried again
after the backoff (larbin_py.analysis.retry); the last failure raises an
alert and marks the task failed.

Back-pressure: :meth:`full` is part of the engine's gate (no request starts
while ``analysisQueueMax`` tasks are pending): the queue's bodies are on
disk, its RAM is one small object per pending task.

Durability (see larbin_py.analysis.queue): a task is written before the
page's outcome reaches the journal, and marked done only after a checkpoint
covers its links (:meth:`mark` before the checkpoint, :meth:`confirm`
after).  ``--reload`` runs the tasks not marked done again.
"""

from __future__ import annotations

import asyncio
import collections
import os
import resource
import time

from .alerts import Alerts
from .analyzers import AnalyzerSpec, links_spec, parse_analyzer
from .pool import TaskFailed, WorkerPool
from .queue import Task, TaskQueue
from .retry import Backoff

__all__ = ["AnalysisStage", "ANALYSIS_DIR"]

#: The queue's folder in stateDir.
ANALYSIS_DIR = "analysis"


def specs_from_config(config) -> list[AnalyzerSpec]:
    """The crawl's analyzers: ``links`` first, then the configured ones."""
    return [links_spec()] + [parse_analyzer(words) for words in config.analyzers]


def worker_setup(config, specs: list[AnalyzerSpec]) -> dict:
    """The analysis processes' first line."""
    user = any(s.kind != "links" for s in specs)
    return {"analyzers": [s.to_json() for s in specs],
            "opts": {"analysis_dir": os.path.abspath(config.analysis_dir) if user else None,
                     "timeout": config.analysis_timeout, "max_url_size": config.max_url_size,
                     "get_images": config.get_image}}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class AnalysisStage:
    """The analysis of one crawl: queue, pool, retries, alerts.

    ``reload``: continue the queue in stateDir.  ``durable``: tasks are
    marked done at checkpoints (canReload on); otherwise as they finish.
    """

    def __init__(self, config, *, reload: bool = False, err=None, durable: bool = True,
                 pool: WorkerPool | None = None, specs: list[AnalyzerSpec] | None = None,
                 queue_dir: str = ANALYSIS_DIR) -> None:
        self.config = config
        self.err = err
        self.durable = durable
        self.specs = specs if specs is not None else specs_from_config(config)
        self.user = [s for s in self.specs if s.kind != "links"]
        #: The crawl's link extractor runs on every page (the ``analyze`` command runs without it).
        self.with_links = any(s.kind == "links" for s in self.specs)
        self.backoff = Backoff(config.analysis_retries, config.analysis_backoff)
        self.queue = TaskQueue(os.path.join(config.state_dir, queue_dir), reload=reload)
        self.alerts = Alerts(config.state_dir, config.alert_command, err=err)
        self.queue_max = config.analysis_queue_max
        self.pool = pool if pool is not None else WorkerPool(
            max(1, config.analysis_workers), worker_setup(config, self.specs), timeout=config.analysis_timeout, err=err)
        self.frontier = None
        self.counts = None
        self._spawn = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting: asyncio.Task | None = None
        #: Tasks submitted and not yet finished or failed for good.
        self.pending = 0
        self.peak_pending = 0
        self.finished = 0
        self.failed = 0
        self.resumed = 0
        self.links = 0
        self.failed_tries: collections.Counter[str] = collections.Counter()
        self.cpu_seconds = 0.0  # the analysis processes', once they ended (close)
        self._children_cpu0 = _children_cpu()
        self.busy_seconds = 0.0  # wall time of the tries (the processes' work, as seen from the loop)

    def attach(self, frontier, counts, spawn) -> None:
        """The frontier links go to, the engine's counters, and its task spawner."""
        self.frontier, self.counts, self._spawn = frontier, counts, spawn

    def start(self, loop, *, eager: bool = False) -> None:
        """Get ready; ``eager``: start every process now (in the background),
        else the pool starts them as tasks come."""
        self._loop = loop
        if eager:
            self._starting = loop.create_task(self.pool.start())
            self._starting.add_done_callback(self._started)

    def _started(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None and self.err is not None:
            print(f"larbin_py: cannot start the analysis processes: {task.exception()}", file=self.err)

    # -- the loop's side --------------------------------------------------
    def full(self) -> bool:
        """The gate: True while ``analysisQueueMax`` tasks are pending."""
        return self.pending >= self.queue_max

    def idle(self) -> bool:
        return self.pending == 0

    def submit(self, url: str, depth: int, body: bytes, *, status=None, content_type=None, charset=None) -> None:
        """A page to analyse: its tasks queued (durably), then run."""
        names = (["links"] if self.with_links else []) + [s.name for s in self.user if s.wants(url, content_type)]
        for task in self.queue.add(url, depth, names, body, status=status, content_type=content_type,
                                   charset=charset):
            self._run(task)

    def resume(self) -> int:
        """``--reload``: run the tasks the queue gave back; how many."""
        tasks, self.queue.resumed = self.queue.resumed, []
        known = {s.name for s in self.specs}
        for task in tasks:
            if task.analyzer not in known:
                # The analyzer left the configuration: said, not run, not lost silently.
                self._give_up(task, f"analyzer {task.analyzer!r} is no longer configured")
                continue
            self._run(task)
        self.resumed += len(tasks)
        return len(tasks)

    def _run(self, task: Task) -> None:
        self.pending += 1
        if self.pending > self.peak_pending:
            self.peak_pending = self.pending
        self._spawn(self.run(task))

    async def run(self, task: Task) -> None:
        """Try ``task`` until it succeeds or its tries are spent."""
        msg = {"id": task.id, "n": task.analyzer, "spool": self.queue.spool_path(task.gen), "o": task.offset,
               "l": task.length, "u": task.url, "d": task.depth, "s": task.status, "c": task.content_type,
               "h": task.charset}
        while True:
            delay = self.backoff.delay(task.tries)
            if delay is None:
                self._give_up(task, task.error)
                return
            if delay:
                await asyncio.sleep(delay)
            started = time.monotonic()
            try:
                reply = await self.pool.run(msg)
            except TaskFailed as exc:
                self.busy_seconds += time.monotonic() - started
                if exc.reason == "bystander":  # its process died running another task: not its try
                    continue
                self.failed_tries[exc.reason] += 1
                self.queue.tried(task, f"{exc.reason}: {exc}")
                continue
            self.busy_seconds += time.monotonic() - started
            self._apply(task, reply)
            self.queue.finished(task)
            self.pending -= 1
            self.finished += 1
            if not self.durable:
                self._confirm(self.queue.mark())
            return

    def _apply(self, task: Task, reply: dict) -> None:
        """(Loop.) A finished task's result: the links to the frontier with their page's depth."""
        if task.analyzer != "links":
            return
        counts = self.counts
        if reply.get("error") is not None:
            counts.page_errors["parseError"] += 1
        if reply.get("nofollow"):
            counts.rejected["nofollow"] += reply["nofollow"]
        if not reply.get("meta_nofollow"):
            links = reply.get("links") or ()
            self.links += len(links)
            self.frontier.offer(task.url, task.depth, links)

    def _give_up(self, task: Task, error: str) -> None:
        tries = task.tries
        self.alerts.raise_alert("analysisFailed", url=task.url, analyzer=task.analyzer, tries=tries,
                                error=error, depth=task.depth)
        self.queue.failed(task)
        self.failed += 1
        self.pending -= 1

    # -- checkpoints --------------------------------------------------------
    def mark(self) -> int:
        """Before a checkpoint: the finished tasks it will cover."""
        return self.queue.mark()

    def confirm(self, mark: int) -> None:
        """After the checkpoint is durable: those tasks marked done."""
        self._confirm(mark)

    def _confirm(self, mark: int) -> None:
        gens = self.queue.confirm(mark)
        if gens:
            self.queue.drop(gens)

    async def close(self) -> None:
        """The processes ended, the alert commands waited for, the queue closed."""
        if self._starting is not None and not self._starting.done():
            self._starting.cancel()
            await asyncio.gather(self._starting, return_exceptions=True)
        await self.pool.close()
        await self.alerts.aclose()
        if not self.durable:
            self._confirm(self.queue.mark())
        self.queue.close()
        # The processes are reaped: their CPU (and their children's) is the children's usage since the start.
        self.cpu_seconds = _children_cpu() - self._children_cpu0
        if self.err is not None and (self.finished or self.failed or self.pending):
            print(f"larbin_py: analysis: {self.finished} tasks done, {self.failed} failed ({self.alerts.count} "
                  f"alerts), {self.pending} left for --reload, {sum(self.failed_tries.values())} tries failed; "
                  f"{self.pool.size} processes, {self.cpu_seconds:.2f} CPU s", file=self.err)

    def stats(self) -> dict:
        return {"workers": self.pool.size, "pending": self.pending, "peak_pending": self.peak_pending,
                "queue_max": self.queue_max, "finished": self.finished, "failed": self.failed,
                "resumed": self.resumed, "links": self.links, "failed_tries": dict(self.failed_tries),
                "alerts": self.alerts.stats(), "pool": self.pool.stats()}
