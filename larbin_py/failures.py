"""How a crawl fails: the first failure's message, said once, and the stop it asks for.

Every part that can fail the crawl reports here, on the loop: the writer
thread (a page not stored), a group commit or a checkpoint, a page's
output, a write to stateDir (a full disk...), a task's exception.  The
first message is the crawl's failure: printed once, kept for the summary
(``Summary.failed``, exit code 1); what fails after it is most often its
consequence and is not said again.  Failing asks the engine to stop
(``stop("failed")``): in-flight requests get their grace time, and the last
good checkpoint is kept, so ``--reload`` continues once the cause is fixed.

A failed write to stateDir also marks the state *broken*: the logs may lack
records, so the seen log must not get ahead of the URL stores
(``LocalState.close(broken=)``).
"""

from __future__ import annotations

import os
from typing import Callable

from .output import OutputError
from .state import describe_write_error

__all__ = ["Failures"]


class Failures:
    """The failure of one crawl.

    ``state_dir``: where the URL stores are (named in a failed write's
    message); ``err``: where the message is printed; ``stop(reason)``: the
    engine's ``request_stop``.
    """

    def __init__(self, state_dir: str, err, stop: Callable[[str], None]) -> None:
        self.state_dir = state_dir
        self.err = err
        self.stop = stop
        #: The first failure's message; None while the crawl has not failed.
        self.message: str | None = None
        #: A write to stateDir failed (see the module docstring).
        self.state_broken = False

    def fail(self, message: str, *, stop: bool = True) -> None:
        """The crawl fails with ``message`` (the first one is kept and printed); it stops.

        ``stop=False``: a start that failed before the crawl began (nothing
        runs that a stop would end).
        """
        if self.message is None:
            self.message = message
            print(f"larbin_py: {message}", file=self.err)
        if stop:
            self.stop("failed")

    def note(self, message: str) -> None:
        """A failure met while the crawl shuts down: kept if it is the first, not printed."""
        if self.message is None:
            self.message = message

    def write_failed(self, exc: OSError) -> None:
        """A write to stateDir failed (a full disk...): say which file and why, stop.

        A write() names no file; the URL stores' folder is named then (the
        other state files name themselves, see larbin_py.state).
        """
        self.state_broken = True
        where = f"the URL stores in {os.path.join(self.state_dir, 'frontier')}"
        self.fail(describe_write_error(exc, where) + "; the crawl stops, the last good checkpoint "
                  "is kept: continue with --reload once the cause is fixed")

    def output_failed(self, exc: OutputError) -> None:
        """The output could not store a page (or sync its files)."""
        self.fail(f"output failed: {exc}")

    def on_writer_error(self, exc: BaseException) -> None:
        """(Loop.) A page could not be stored by the writer thread."""
        self.fail(f"output failed: {exc}" if isinstance(exc, OutputError) else
                  f"output failed: {type(exc).__name__}: {exc}")

    def on_io_error(self, exc: BaseException) -> None:
        """(Loop.) A group commit or a checkpoint failed."""
        if isinstance(exc, OutputError):
            self.output_failed(exc)
        elif isinstance(exc, OSError):
            self.write_failed(exc)
        else:
            self.fail(f"cannot save the crawl state: {type(exc).__name__}: {exc}; the last good "
                      "checkpoint is kept, continue with --reload once the cause is fixed")

    def task_failed(self, exc: BaseException) -> None:
        """An engine task ended with ``exc``: a write to stateDir (the URL stores), or a bug."""
        if isinstance(exc, OSError):
            self.write_failed(exc)
        else:
            self.fail(f"internal error: {type(exc).__name__}: {exc}")
