"""Running an engine in this process: signals, the summary, the exit code.

:func:`run_engine` is what the command line (``larbin_py.cli``) and the demo
(``larbin_py.demo``) run on their event loop (uvloop, made by the command
line): SIGINT and SIGTERM ask the engine to stop (in-flight requests get
their grace time), the summary goes to stderr, and the exit code says how
the crawl ended.  The engine itself knows nothing of signals or exit codes.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from .engine import Engine
from .servers import StartError

__all__ = ["SIGNAL_STOPS", "run_engine"]

#: Stop reasons given by the signal handlers, and the exit codes they mean.
SIGNAL_STOPS = {signal.SIGINT: ("interrupted by SIGINT", 130), signal.SIGTERM: ("terminated by SIGTERM", 143)}


async def run_engine(engine: Engine) -> int:
    """Run ``engine`` with SIGINT/SIGTERM handlers; print the summary; exit code."""
    loop = asyncio.get_running_loop()
    for sig, (reason, _code) in SIGNAL_STOPS.items():
        loop.add_signal_handler(sig, engine.request_stop, reason)
    try:
        summary = await engine.run()
    except StartError as exc:
        print(f"larbin_py: {exc}", file=sys.stderr)
        return 2
    finally:
        for sig in SIGNAL_STOPS:
            loop.remove_signal_handler(sig)
    print(summary.format(), file=sys.stderr)
    if summary.failed:
        return 1
    for reason, code in SIGNAL_STOPS.values():
        if summary.stop_reason == reason:
            return code
    return 0
