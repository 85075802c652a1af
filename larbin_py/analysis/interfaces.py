"""The analysis stage's seam: the queue of analysis tasks, as a Protocol.

:class:`AnalysisQueue` is what :class:`~larbin_py.analysis.stage.AnalysisStage`
uses of its queue, no more.  The embedded crawler's implementation is
:class:`~larbin_py.analysis.queue.TaskQueue` (files in stateDir: a spool of
bodies and a log of task lines).  In the distributed mode the queue can
live in Redis so that analysis processes run on other machines: an
implementation of this Protocol is the swap (the stage is given it:
``AnalysisStage(config, queue=...)``), as the frontier's stores are swapped
through larbin_py.frontier.interfaces.

The contract, in the terms of the durability the crawl relies on:

* :meth:`~AnalysisQueue.add` returns only once the page's tasks (and its
  body, and its headers when given) would survive a crash of the process:
  the caller journals the page as done right after;
* a task is *done* only after :meth:`~AnalysisQueue.confirm` (a checkpoint
  covering what it produced is durable); a restart gives back in
  ``resumed`` every task neither confirmed nor :meth:`~AnalysisQueue.failed`,
  with its count of failed tries (:meth:`~AnalysisQueue.tried`);
* the analysis processes read a task's body (and headers) at
  ``spool_dir``/``bodies-GEN.bin``, offset and length as the task says
  (a remote queue would give its processes a local copy there, or change
  the worker's reader with it).

All calls are made on the event loop's thread and must not wait on the
network (a remote implementation buffers and sends in the background, as
larbin_py.distributed's stores do).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .queue import Task

__all__ = ["AnalysisQueue"]


@runtime_checkable
class AnalysisQueue(Protocol):
    """The durable queue of analysis tasks (one task = one analyzer on one page)."""

    #: Tasks given back by a restart (``--reload``), in the order they were queued.
    resumed: list[Task]

    def add(self, url: str, depth: int, analyzers: list[str], body: bytes, *, status=None,
            content_type=None, charset=None, headers: bytes = b"", saved: str | None = None) -> list[Task]:
        """Queue ``analyzers`` on a page, durably (see the module); the new tasks."""
        ...

    def tried(self, task: Task, error: str) -> None:
        """A try of ``task`` failed: ``task.tries`` counted up, durably; ``error`` kept for the alert."""
        ...

    def finished(self, task: Task) -> None:
        """``task`` succeeded: it is marked done at the next :meth:`confirm`."""
        ...

    def failed(self, task: Task) -> None:
        """``task`` failed for good (its alert was raised): never given back again."""
        ...

    def mark(self) -> int:
        """How many finished tasks a checkpoint starting now covers."""
        ...

    def confirm(self, mark: int) -> list[int]:
        """The first ``mark`` finished tasks are covered by a durable checkpoint: done.

        Returns the generations with no live task left (for :meth:`drop`).
        """
        ...

    def drop(self, gens: list[int]) -> None:
        """Let go of finished generations (their files, or their keys)."""
        ...

    @property
    def live(self) -> int:
        """Tasks neither done nor failed."""
        ...

    @property
    def spool_dir(self) -> str:
        """Where the analysis processes read the bodies (``bodies-GEN.bin``)."""
        ...

    def sync_paths(self) -> list[str]:
        """Local files a checkpoint must fsync for the queue to be durable (a remote queue: none)."""
        ...

    def close(self, *, remove_if_empty: bool = True) -> None:
        """Release; with no live task left, the queue's storage may go."""
        ...
