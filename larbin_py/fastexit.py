"""Ending a process that closed its own files, without the interpreter's teardown.

:func:`fast_exit` runs the ``atexit`` handlers (a thread pool's idle workers
are joined there, a user analyzer's hooks run), flushes ``sys.stdout`` and
``sys.stderr``, and ends the process with ``os._exit``.  What it skips is
the teardown: every module's objects freed one by one, which after a crawl
(its frontier, its stores' sets, lxml's and numpy's modules) took about
100 ms of a crawl's end, and as long again in each analysis process the
crawl waits for.

Limits: only for a process that closed and synced its files itself -- a
buffered file still open is lost, and a non-daemon thread still running is
killed (``threading`` joins them in the teardown, not in ``atexit``).  The
crawl (larbin_py.cli.exit_now, after the engine's shutdown) and an analysis
process at the end of its input (every answer and record written with
``os.write``) are such processes.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn

__all__ = ["fast_exit"]


def fast_exit(code: int) -> NoReturn:
    """``atexit`` handlers, stdout and stderr flushed, then ``os._exit(code)``."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
