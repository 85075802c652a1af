"""The writer thread: an output's blocking disk calls, off the event loop.

Creating a file costs from tens of microseconds on tmpfs to most of a
millisecond on an ext4 disk, and an fsync can wait for the device: none of
that may run on the event loop.  A :class:`WriterThread` runs, one after the
other in the order they were handed over, the jobs the loop gives it:

* :meth:`WriterThread.submit` -- fire and forget (a page to store, a group
  commit).  The first failure is kept in :attr:`WriterThread.error` and
  reported once to the loop through ``on_error`` (or the job's own
  ``on_error``; called on the loop's thread); the jobs of that kind queued
  after it are dropped (the crawl is failing).  Such a job costs the loop
  no wake-up: the writer posts to the loop only what someone waits for (a
  future, ``on_room`` when the queue had been full, an error).
* :meth:`WriterThread.call` -- a job whose result (or exception) comes back
  as an ``asyncio`` future resolved on the loop: a group commit, a
  checkpoint.  Such a job fails at once with the kept error when an earlier
  job failed, so nothing is ever declared durable after a lost write.

The queue is bounded by the engine, not by blocking: :meth:`full` says when
:attr:`max_backlog` jobs wait, and the engine then starts no new request
(the frontier's gate holds) until ``on_room`` (on the loop) says the backlog
fell to half of it.  Jobs run in order, so an index keeps the order of the
pages, and a commit queued after some writes covers them.

:class:`ThreadedOutput` puts an :class:`~larbin_py.output.base.Output` behind
a writer thread: ``write(doc)`` queues the page and returns at once.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable

from .base import Document, OutputError, OutputStats

__all__ = ["WriterThread", "ThreadedOutput", "MAX_BACKLOG"]

#: Jobs queued before the engine's gate holds (pages are at most maxPageSize each).
MAX_BACKLOG = 256

_WRITE, _CALL, _ALWAYS = 0, 1, 2


def _resolve(fut: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


class WriterThread:
    """One thread running blocking jobs in order; see the module docstring."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, max_backlog: int = MAX_BACKLOG,
                 on_error: Callable[[BaseException], None] | None = None,
                 on_room: Callable[[], None] | None = None, name: str = "larbin-writer") -> None:
        self._loop = loop
        self.max_backlog = max_backlog
        self.on_error = on_error
        self.on_room = on_room
        #: The first failure of a :meth:`submit` job (then every job of that kind is dropped).
        self.error: BaseException | None = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._submitted = 0  # written by the loop's thread only
        self._finished = 0  # written by the writer thread only
        self._want_room = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- the loop's side ---------------------------------------------------
    @property
    def native_id(self) -> int:
        """The writer thread's id in the kernel (larbin_py.core_pin pins it)."""
        return self._thread.native_id

    @property
    def backlog(self) -> int:
        """Jobs handed over and not finished."""
        return self._submitted - self._finished

    def full(self) -> bool:
        """True when :attr:`max_backlog` jobs wait; ``on_room`` is then called
        (on the loop) once the backlog is down to half of it."""
        if self._submitted - self._finished < self.max_backlog:
            return False
        self._want_room = True
        # The writer may have drained the queue between the test and the flag.
        return self._submitted - self._finished >= self.max_backlog

    def submit(self, fn: Callable, *args, weight: int = 1,
               on_error: Callable[[BaseException], None] | None = None) -> None:
        """Run ``fn(*args)`` on the writer thread; a failure goes to ``on_error``
        (this job's, else the writer's).

        ``weight``: how many items of the backlog the job counts for (a batch of pages).
        """
        self._put((_WRITE, fn, args, on_error), weight)

    def call(self, fn: Callable, *args, always: bool = False) -> asyncio.Future:
        """Run ``fn(*args)`` on the writer thread; its result as a future.

        Unless ``always``, the job fails with :attr:`error` without running
        when an earlier :meth:`submit` job failed.
        """
        fut = self._loop.create_future()
        self._put((_ALWAYS if always else _CALL, fn, args, fut), 1)
        return fut

    def _put(self, job, weight: int) -> None:
        if self._closed:
            raise RuntimeError("writer thread closed")
        self._submitted += weight
        self._queue.put((job, weight))

    async def aclose(self) -> None:
        """Finish the queued jobs, then stop the thread."""
        if self._closed:
            return
        done = self.call(lambda: None, always=True)
        self._closed = True
        self._queue.put((None, 0))
        try:
            await done
        finally:
            self._thread.join()

    def close(self) -> None:
        """:meth:`aclose` for callers without a running loop (blocks)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put((None, 0))
        self._thread.join()

    # -- the writer's side -------------------------------------------------
    def _post(self, fn: Callable, *args) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _run(self) -> None:
        get = self._queue.get
        while True:
            job, weight = get()
            if job is None:
                return
            kind, fn, args, fut = job  # fut: the future of a call, the on_error of a submit
            try:
                if kind != _ALWAYS and self.error is not None:
                    if kind != _WRITE:
                        self._post(_resolve, fut, None, self.error)
                    continue
                try:
                    result = fn(*args)
                except BaseException as exc:  # noqa: BLE001 - every failure goes to the loop
                    if kind != _WRITE:
                        self._post(_resolve, fut, None, exc)
                    else:
                        self.error = exc
                        report = fut if fut is not None else self.on_error
                        if report is not None:
                            self._post(report, exc)
                else:
                    if kind != _WRITE:
                        self._post(_resolve, fut, result, None)
            finally:
                self._finished += weight
                if self._want_room and self._submitted - self._finished <= self.max_backlog // 2:
                    self._want_room = False
                    if self.on_room is not None:
                        self._post(self.on_room)


class ThreadedOutput:
    """An :class:`~larbin_py.output.base.Output` whose disk work runs on a writer thread.

    ``write(doc)`` queues the page and returns None at once (it raises the
    writer's :class:`OutputError` when an earlier write failed).  ``flush``
    queues a flush.  :meth:`sync_position` is a *job* (run it with
    :meth:`WriterThread.call`): it makes what was written durable and
    returns the position that covers it; :meth:`flush_position` (also a
    job) only hands the index to the kernel, for a commit.  :meth:`backlog_full` is the
    engine's gate.  ``stats`` are the inner output's, updated by the writer.
    """

    def __init__(self, inner, writer: WriterThread, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.inner = inner
        self.writer = writer
        self.mode = inner.mode
        # Pages of one turn of the loop go to the writer as one job: a
        # thread hand-over per page costs more CPU than the write itself.
        self._batch: list[Document] = []
        self._loop = loop
        #: Set by a group committer (larbin_py.journal) that hands the pages
        #: over with its commit (one job every few ms): no job of their own.
        self.batch_by_commit = False

    @property
    def stats(self) -> OutputStats:
        return self.inner.stats

    def write(self, doc: Document) -> None:
        error = self.writer.error
        if error is not None:
            raise error if isinstance(error, OutputError) else OutputError(f"writer failed: {error!r}")
        batch = self._batch
        batch.append(doc)
        if len(batch) == 1 and not self.batch_by_commit:
            if self._loop is not None:
                self._loop.call_soon(self.submit_pending)
            else:
                self.submit_pending()
        return None

    def submit_pending(self) -> None:
        """Hand the pages written since the last hand-over to the writer (in order)."""
        batch = self._batch
        if batch:
            self._batch = []
            self.writer.submit(self.write_many, batch, weight=len(batch))

    def take_pending(self) -> list[Document]:
        """The pages written since the last hand-over (the caller hands them to
        the writer, in order, and runs :meth:`write_many` there)."""
        batch, self._batch = self._batch, []
        return batch

    def write_many(self, docs: list[Document]) -> None:
        """(Writer thread.) Store ``docs`` in order."""
        write = self.inner.write
        for doc in docs:
            write(doc)

    def backlog_full(self) -> bool:
        return self.writer.full()

    def flush(self, sync: bool = False) -> None:
        self.submit_pending()
        self.writer.submit(self.inner.flush, sync)

    def sync_position(self) -> dict:
        """(Writer thread.) Flush and sync the inner output; its position."""
        self.inner.flush(sync=True)
        return self.inner.position()

    def flush_position(self) -> dict:
        """(Writer thread.) Hand buffered index bytes to the kernel; the position."""
        self.inner.flush(sync=False)
        return self.inner.position()

    def position(self) -> dict:
        raise RuntimeError("the position of a threaded output is read on its writer: use sync_position")

    async def aclose(self) -> None:
        """Write what is queued, then close the inner output (on the writer)."""
        self.submit_pending()
        await self.writer.call(self.inner.close, always=True)

    def close(self) -> None:
        raise RuntimeError("close a threaded output with 'await aclose()'")
