"""Alerts: what an administrator must hear of (an analysis that kept failing).

An alert is a JSON line appended to ``stateDir/alerts.log`` (``write()``
with O_APPEND, one line a call), counted (the ``/metrics`` counter), kept
among the recent ones (the dashboard's card), and handed to
``alertCommand`` when one is set: the command runs off the loop (an asyncio
subprocess), with the alert as JSON on its standard input and in the
``LARBIN_ALERT`` environment variable, and ``{url}``, ``{analyzer}``,
``{error}``, ``{kind}`` in its arguments replaced.  A command that cannot
start or exits non-zero is counted and said once on stderr; it never stops
the crawl.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import time

from ..core_pin import spawning
from ..owner_only import opener

__all__ = ["ALERTS_LOG", "Alerts"]

ALERTS_LOG = "alerts.log"
#: How many alerts the dashboard shows.
RECENT = 20
#: How long an alertCommand may run, seconds.
COMMAND_TIMEOUT = 60.0


class Alerts:
    """The alerts of one crawl (or one ``analyze`` run), in ``state_dir``.

    ``clock``: wall time for the alerts' ``time``; ``err``: where a failing
    alertCommand is said.
    """

    def __init__(self, state_dir: str, command: tuple[str, ...] = (), *, clock=time.time, err=None) -> None:
        self.path = os.path.join(state_dir, ALERTS_LOG)
        self.command = tuple(command)
        self.clock = clock
        self.err = err
        self.count = 0
        self.by_kind: collections.Counter[str] = collections.Counter()
        self.recent: collections.deque[dict] = collections.deque(maxlen=RECENT)
        self.command_runs = 0
        self.command_failures = 0
        self._said = False
        self._tasks: set[asyncio.Task] = set()

    def raise_alert(self, kind: str, **details) -> dict:
        """Record an alert; its command (if any) is started on the running loop."""
        alert = {"time": round(self.clock(), 3), "kind": kind, **details}
        line = (json.dumps(alert, separators=(",", ":"), default=str) + "\n").encode()
        fd = opener(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self.count += 1
        self.by_kind[kind] += 1
        self.recent.append(alert)
        if self.command:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                task = loop.create_task(self._run_command(alert))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return alert

    def argv(self, alert: dict) -> list[str]:
        """The command line for ``alert`` (placeholders replaced)."""
        values = {k: str(alert.get(k, "")) for k in ("url", "analyzer", "error", "kind")}
        out = []
        for word in self.command:
            for k, v in values.items():
                word = word.replace("{" + k + "}", v)
            out.append(word)
        return out

    async def _run_command(self, alert: dict) -> None:
        data = json.dumps(alert, default=str).encode()
        env = dict(os.environ, LARBIN_ALERT=data.decode())
        self.command_runs += 1
        try:
            with spawning():  # the process's cores, not the pinned loop's one (cpuAffinity)
                proc = await asyncio.create_subprocess_exec(
                    *self.argv(alert), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE, env=env)
        except OSError as exc:
            self._command_failed(f"cannot run alertCommand: {exc}")
            return
        try:
            _, stderr = await asyncio.wait_for(proc.communicate(data), COMMAND_TIMEOUT)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            self._command_failed(f"alertCommand still running after {COMMAND_TIMEOUT:g} s: killed")
            return
        if proc.returncode != 0:
            tail = stderr.decode(errors="replace").strip()[-200:]
            self._command_failed(f"alertCommand exited with status {proc.returncode}" + (f": {tail}" if tail else ""))

    def _command_failed(self, message: str) -> None:
        self.command_failures += 1
        if not self._said and self.err is not None:
            self._said = True
            print(f"larbin_py: {message} (said once; counted in the stats)", file=self.err)

    async def aclose(self) -> None:
        """Wait for the commands still running (each bounded by its timeout)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def stats(self) -> dict:
        return {"count": self.count, "by_kind": dict(self.by_kind), "recent": list(self.recent),
                "command_runs": self.command_runs, "command_failures": self.command_failures}
