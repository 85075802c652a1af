"""The analysis stage as the engine sees it: submit a page, hear its links back.

:class:`AnalysisStage` is the seam object: the page handler's ``analyze``
step calls :meth:`AnalysisStage.submit`.  The page's tasks (one per
analyzer) go on the durable queue (an :class:`~larbin_py.analysis.interfaces.AnalysisQueue`),
and the page goes to the pool as *one* job (one line to a process, one
answer back, the page parsed once there).  Everything after is callbacks on
the loop: the pool calls :meth:`_answered` with the answer; the ``links``
analyzer's links go to ``Frontier.offer(page_url, depth, links)`` -- depth
limits, rules, the seen test hold as for inline analysis.  A failed try is
counted and tried again after the backoff (``call_later``,
larbin_py.analysis.retry); the last failure raises an alert and marks the
task failed.

Sharing the parse (``share``): when every slot of every process is taken
and the page has no user analyzer, :meth:`submit` returns False and the
page handler extracts the links on the loop itself, as with
``analysisWorkers 0`` (no spool, no queue line: the links are offered
before the page's outcome is journaled, so nothing needs the queue).  The
processes never idle while the loop parses what they cannot take: on 2
cores, one process and the loop both parse.

The engine's end of work and stop grace: while tasks are pending, one
engine task (:meth:`_drain`) is alive; it ends after each batch of answers
(the engine's pump then runs: new links, a gate opened) and a new one is
spawned while tasks remain -- one engine task per batch, not per task.

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

from .alerts import Alerts
from .analyzers import AnalyzerSpec, format_headers, links_spec, parse_analyzer
from .interfaces import AnalysisQueue
from . import pool as pool_mod
from .pool import TaskFailed, WorkerPool
from .queue import Task, TaskQueue
from .analyzer_process import format_task, parse_answer
from .retry import Backoff

__all__ = ["AnalysisStage", "ANALYSIS_DIR"]

#: The queue's folder in stateDir.
ANALYSIS_DIR = "analysis"


def specs_from_config(config) -> list[AnalyzerSpec]:
    """The crawl's analyzers: ``links`` first, then the configured ones."""
    return [links_spec()] + [parse_analyzer(words) for words in config.analyzers]


def worker_setup(config, specs: list[AnalyzerSpec], spool_dir: str) -> dict:
    """The analysis processes' first line."""
    user = any(s.kind != "links" for s in specs)
    return {"analyzers": [s.to_json() for s in specs], "spool_dir": os.path.abspath(spool_dir),
            "opts": {"analysis_dir": os.path.abspath(config.analysis_dir) if user else None,
                     "timeout": config.analysis_timeout, "max_url_size": config.max_url_size,
                     "get_images": config.get_image}}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime



class _Job:
    """One page's tasks sent together: one line to a process, one answer back."""

    __slots__ = ("tasks", "names", "line")

    def __init__(self, tasks: list[Task]) -> None:
        self.tasks = tasks
        self.names = [t.analyzer for t in tasks]
        t = tasks[0]
        self.line = format_task([x.id for x in tasks], self.names, t.gen, t.offset - t.headers_length,
                                t.headers_length, t.offset, t.length, t.depth, t.status, t.content_type,
                                t.charset, t.saved, t.url)


class AnalysisStage:
    """The analysis of one crawl: queue, pool, retries, alerts.

    ``reload``: continue the queue in stateDir.  ``durable``: tasks are
    marked done at checkpoints (canReload on); otherwise as they finish.
    ``queue``: the analysis queue (an :class:`AnalysisQueue`; default the
    :class:`TaskQueue` in stateDir).  ``share``: the loop parses a page
    itself when every process's line is full (see the module); default the
    configuration's ``analysisShare``.  ``links``: False when the caller
    extracts every page's links itself (the distributed mode, whose acks must
    follow the links' offer); the processes then run the user analyzers only.
    """

    def __init__(self, config, *, reload: bool = False, err=None, durable: bool = True,
                 pool: WorkerPool | None = None, specs: list[AnalyzerSpec] | None = None,
                 queue_dir: str = ANALYSIS_DIR, queue: AnalysisQueue | None = None,
                 share: bool | None = None, links: bool = True) -> None:
        self.config = config
        self.err = err
        self.durable = durable
        self.specs = specs if specs is not None else specs_from_config(config)
        self.user = [s for s in self.specs if s.kind != "links"]
        #: The crawl's link extractor runs in the processes (the ``analyze`` command runs
        #: without it; ``links=False``: the caller extracts the links on the loop).
        self.with_links = links and any(s.kind == "links" for s in self.specs)
        self.share = getattr(config, "analysis_share", True) if share is None else share
        self.backoff = Backoff(config.analysis_retries, config.analysis_backoff)
        self.queue: AnalysisQueue = queue if queue is not None else TaskQueue(
            os.path.join(config.state_dir, queue_dir), reload=reload)
        self.alerts = Alerts(config.state_dir, config.alert_command, err=err)
        self.queue_max = config.analysis_queue_max
        self.pool = pool if pool is not None else WorkerPool(
            max(1, config.analysis_workers), worker_setup(config, self.specs, self.queue.spool_dir),
            timeout=config.analysis_timeout, err=err, depth=pool_mod.DEPTH)
        self.pool.on_slot = self._slot_free
        #: Headers are kept for the python analyzers only (the others do not read them).
        self._wants_headers = any(s.kind == "python" for s in self.user)
        self._mirror = getattr(config, "output_mode", None) == "mirror"
        self.frontier = None
        self.counts = None
        self._spawn = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Jobs waiting for a free slot in a process's line.
        self._backlog: collections.deque[_Job] = collections.deque()
        self._retry_timers: set = set()
        self._draining = False
        self._wake: asyncio.Future | None = None
        self._closed = False
        #: Tasks submitted and not yet finished or failed for good.
        self.pending = 0
        self.peak_pending = 0
        self.finished = 0
        self.failed = 0
        self.resumed = 0
        self.links = 0
        #: Pages whose links the loop extracted itself (every slot taken: ``share``).
        self.inline = 0
        self.failed_tries: collections.Counter[str] = collections.Counter()
        self.cpu_seconds = 0.0  # the analysis processes', once they ended (close)
        self._children_cpu0 = _children_cpu()

    def attach(self, frontier, counts, spawn) -> None:
        """The frontier links go to, the engine's counters, and its task spawner."""
        self.frontier, self.counts, self._spawn = frontier, counts, spawn

    def start(self, loop) -> None:
        """Get ready; the pool starts the processes as tasks come, or all at
        once at :meth:`warm`."""
        self._loop = loop

    def warm(self) -> None:
        """Start every process now, in the background (a crawl, once its first
        DNS queries went: they import while the answers and the robots.txt
        files come, and nothing waits for them -- with ``share`` the loop
        parses the first pages itself until one is ready).  A process's start
        holds the loop 5-15 ms (fork and exec): before the first pump it
        delayed the first DNS queries by as much."""
        self.pool.warm()

    # -- the loop's side --------------------------------------------------
    def full(self) -> bool:
        """The gate: True while ``analysisQueueMax`` tasks are pending."""
        return self.pending >= self.queue_max

    def idle(self) -> bool:
        return self.pending == 0

    def submit(self, url: str, depth: int, body: bytes, *, status=None, content_type=None, charset=None,
               headers=None, saved: str | None = None, links: bool = True, analyzers: bool = True) -> bool:
        """A page to analyse: its tasks queued (durably), then sent to a process.

        Returns False when the page was not taken (``share``: every slot is
        busy and no user analyzer wants the page): the caller extracts its
        links itself.  ``links`` False: its links are not followed (nofollow);
        ``analyzers`` False: no user analyzer runs on it (a page not kept).
        """
        user = [s.name for s in self.user if s.wants(url, content_type)] if analyzers else []
        with_links = self.with_links and links
        if not user:
            if not with_links:
                return True  # nothing to run on it
            if self.share and not self._backlog and self.pool.free() == 0:
                self.inline += 1
                return False
        names = (["links"] if with_links else []) + user
        hdrs = format_headers(headers) if headers and user and self._wants_headers else b""
        if saved is None and self._mirror and user:
            from ..output.paths import url_to_relpath

            saved = os.path.join(os.path.abspath(self.config.save_dir), url_to_relpath(url))
        tasks = self.queue.add(url, depth, names, body, status=status, content_type=content_type,
                               charset=charset, headers=hdrs, saved=saved)
        self._count(len(tasks))
        self._dispatch(_Job(tasks))
        return True

    def resume(self) -> int:
        """``--reload``: run the tasks the queue gave back; how many."""
        tasks, self.queue.resumed = self.queue.resumed, []
        known = {s.name for s in self.specs}
        pages: dict[tuple, list[Task]] = {}
        self._count(len(tasks))
        for task in tasks:
            if task.analyzer not in known:
                # The analyzer left the configuration: said, not run, not lost silently.
                self._give_up(task, f"analyzer {task.analyzer!r} is no longer configured")
                continue
            pages.setdefault((task.gen, task.offset, task.tries), []).append(task)
        for group in pages.values():
            self._retry(group)
        self.resumed += len(tasks)
        return len(tasks)

    def _count(self, n: int) -> None:
        if n and not self.pending and not self._closed:
            self.pending += n
            self._ensure_drain()
        else:
            self.pending += n
        if self.pending > self.peak_pending:
            self.peak_pending = self.pending

    # -- the engine task that stands for the pending tasks ------------------
    def _ensure_drain(self) -> None:
        if not self._draining and self._spawn is not None:
            self._draining = True
            # The future exists before the task first runs: an answer that comes
            # in between wakes it (a poke with no future was lost, and the task
            # then waited for ever with nothing pending: the crawl never ended).
            self._wake = asyncio.get_running_loop().create_future()
            self._spawn(self._drain(self._wake))

    async def _drain(self, wake: asyncio.Future) -> None:
        """Alive while tasks are pending; ends after each batch of answers (the engine pumps)."""
        try:
            await wake
        except asyncio.CancelledError:  # the crawl stops: what is pending stays in the queue
            self._draining = False
            self._wake = None
            raise
        self._draining = False
        self._wake = None
        if self.pending and not self._closed:
            self._ensure_drain()  # before this task ends: the engine never sees none

    def _poke(self) -> None:
        w = self._wake
        if w is not None and not w.done():
            w.set_result(None)

    # -- jobs ---------------------------------------------------------------
    def _dispatch(self, job: _Job) -> None:
        if self._backlog or not self.pool.submit(job.line, job, self._answered):
            self._backlog.append(job)

    def _slot_free(self) -> None:
        """(The pool.) A slot freed, or a process is ready: the jobs that waited go."""
        backlog = self._backlog
        while backlog:
            if not self.pool.submit(backlog[0].line, backlog[0], self._answered):
                return
            backlog.popleft()

    def _answered(self, job: _Job, answer) -> None:
        """(The pool's callback.) A job's answer line, or its failure."""
        if isinstance(answer, TaskFailed):
            if answer.reason == "bystander":  # its process died running another job: not its try
                if not self._closed:
                    self._dispatch(job)
                return
            failed = [(t, f"{answer.reason}: {answer}") for t in job.tasks]
            reason = answer.reason
        else:
            try:
                results = parse_answer(answer, job.names)
            except (ValueError, UnicodeDecodeError) as exc:
                results = [(f"a bad answer from the analysis process: {exc}", "")] * len(job.tasks)
            failed = []
            reason = "error"
            done = 0
            for task, result in zip(job.tasks, results):
                if type(result) is tuple:
                    failed.append((task, f"error: {result[0]}"))
                    continue
                if task.analyzer == "links":
                    self._apply(task, result)
                self.queue.finished(task)
                done += 1
            self.pending -= done
            self.finished += done
            if done and not self.durable:
                self._confirm(self.queue.mark())
        if failed:
            self.failed_tries[reason] += len(failed)
            for task, error in failed:
                self.queue.tried(task, error)
            self._retry([t for t, _ in failed])
        self._poke()

    def _retry(self, tasks: list[Task]) -> None:
        """Tasks of one page whose last try failed (or resumed): again after the backoff, or given up."""
        again = []
        for task in tasks:
            if self.backoff.delay(task.tries) is None:
                self._give_up(task, task.error)
            else:
                again.append(task)
        if not again or self._closed:
            return
        delay = self.backoff.delay(again[0].tries)
        job = _Job(again)
        if not delay:
            self._dispatch(job)
            return
        handle = None

        def fire() -> None:
            self._retry_timers.discard(handle)
            if not self._closed:
                self._dispatch(job)
        handle = (self._loop or asyncio.get_running_loop()).call_later(delay, fire)
        self._retry_timers.add(handle)

    def _apply(self, task: Task, result: dict) -> None:
        """(Loop.) A finished task's result: the links to the frontier with their page's depth."""
        counts = self.counts
        if result.get("error") is not None:
            counts.page_errors["parseError"] += 1
        if result.get("nofollow"):
            counts.rejected["nofollow"] += result["nofollow"]
        if result.get("meta_nofollow"):
            self.frontier.offer(task.url, task.depth, ())  # none: the records (larbin_py.recrawl) say so
        else:
            links = result.get("links") or ()
            self.links += len(links)
            embeds = result.get("embeds")
            if embeds:  # how they were found: the crawl log says "embed"
                self.frontier.offer(task.url, task.depth, links, embeds=frozenset(embeds))
            else:
                self.frontier.offer(task.url, task.depth, links)

    def _give_up(self, task: Task, error: str) -> None:
        self.alerts.raise_alert("analysisFailed", url=task.url, analyzer=task.analyzer, tries=task.tries,
                                error=error, depth=task.depth)
        self.queue.failed(task)
        self.failed += 1
        self.pending -= 1
        self._poke()

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
        self._closed = True
        for handle in list(self._retry_timers):
            handle.cancel()
        self._retry_timers.clear()
        self._backlog.clear()
        await self.pool.close()
        await self.alerts.aclose()
        if not self.durable:
            self._confirm(self.queue.mark())
        self.queue.close()
        self._poke()
        # The processes are reaped: their CPU (and their children's) is the children's usage since the start.
        self.cpu_seconds = _children_cpu() - self._children_cpu0
        if self.err is not None and (self.finished or self.failed or self.pending or self.inline):
            print(f"larbin_py: analysis: {self.finished} tasks done, {self.failed} failed ({self.alerts.count} "
                  f"alerts), {self.pending} left for --reload, {sum(self.failed_tries.values())} tries failed, "
                  f"{self.inline} pages parsed on the loop (processes busy or starting); "
                  f"{self.pool.size} processes, {self.cpu_seconds:.2f} CPU s, peak RSS "
                  f"{self.pool.peak_rss_kb / 1024:.1f} MB a process", file=self.err)

    def stats(self) -> dict:
        return {"workers": self.pool.size, "pending": self.pending, "peak_pending": self.peak_pending,
                "queue_max": self.queue_max, "finished": self.finished, "failed": self.failed,
                "resumed": self.resumed, "links": self.links, "inline": self.inline, "share": self.share,
                "failed_tries": dict(self.failed_tries), "alerts": self.alerts.stats(), "pool": self.pool.stats()}
