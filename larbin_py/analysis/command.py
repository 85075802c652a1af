"""An ``exec`` analyzer's command: its own process group, bounded output, killed whole.

:func:`run_command` starts the command in a new session (so a process
group of its own, whose id is the command's pid), reads its stdout and
stderr through non-blocking pipes and keeps the last :data:`CAPTURE_LIMIT`
bytes of each (:class:`Tail`: what is dropped is counted, so a command that
prints 100 MB costs 64 KiB of memory).  It waits, with one ``select`` on
the two pipes and a pidfd of the command, until the command has exited
*and* both pipes are closed, or until the deadline.  Then, whichever came
first, the whole group gets SIGKILL, and only after that is the command
reaped: its pid, and so the group id, cannot be reused by another process
while the group is killed.

Why the pipes and the group.  A grandchild inherits the pipes: a command
that exits leaving ``sleep 1000 &`` behind keeps stdout open, and a plain
``communicate()`` waits for that EOF (or, after a timeout, kills the
command alone and the grandchild lives on).  Here the read never outlives
the deadline, and what the command left in its group is killed with it --
at the timeout (:attr:`CommandResult.timed_out`) or when it ends on its
own.

Limits.  A descendant that leaves the group on purpose (``setsid``,
``setpgid``) is out of reach: only a cgroup would hold it.  The analysis
process running the command can itself be killed (the pool's timeout, a
crash): :func:`kill_with_groups` is what the pool uses, SIGSTOP of the
analysis process, SIGKILL of the group each of its children leads (the
command, unreaped until its group is dead, is always one of them), then
SIGKILL of the process; a crash of the analysis process itself leaves the
group (its children are re-parented and nobody knows them any more).

Errors: a command that cannot start raises :class:`FileNotFoundError` or
:class:`PermissionError` as :class:`subprocess.Popen` does.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

__all__ = ["CAPTURE_LIMIT", "CommandResult", "Tail", "kill_with_groups", "run_command"]

#: Bytes kept of each of a command's stdout and stderr (the last ones: a
#: failure's message shows the end of the output, where errors are).
CAPTURE_LIMIT = 64 * 1024
_READ = 1 << 16


class Tail:
    """The last ``limit`` bytes fed, and how many bytes were dropped before them (sans-I/O)."""

    __slots__ = ("limit", "data", "dropped")

    def __init__(self, limit: int = CAPTURE_LIMIT) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        if len(chunk) >= self.limit:
            self.dropped += len(self.data) + len(chunk) - self.limit
            self.data[:] = chunk[len(chunk) - self.limit:]
            return
        self.data += chunk
        extra = len(self.data) - self.limit
        if extra > 0:
            del self.data[:extra]
            self.dropped += extra

    @property
    def total(self) -> int:
        """Every byte fed."""
        return self.dropped + len(self.data)


@dataclass
class CommandResult:
    """How a command ended: ``returncode`` as :class:`subprocess.Popen` gives it
    (negative: killed by that signal); ``timed_out`` when the deadline came
    first (the command, or something in its group holding a pipe, still ran)."""

    returncode: int
    stdout: Tail
    stderr: Tail
    timed_out: bool


def run_command(argv: list[str], timeout: float, *, limit: int = CAPTURE_LIMIT) -> CommandResult:
    """Run ``argv`` (stdin /dev/null) in a process group of its own for at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, close_fds=True)
    tails = {proc.stdout.fileno(): Tail(limit), proc.stderr.fileno(): Tail(limit)}
    out, err = tails[proc.stdout.fileno()], tails[proc.stderr.fileno()]
    pidfd = _pidfd(proc.pid)
    timed_out = False
    try:
        with selectors.DefaultSelector() as sel:
            for fd in tails:
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            if pidfd is not None:
                sel.register(pidfd, selectors.EVENT_READ)
            exited = False
            while tails.keys() & sel.get_map().keys() or not exited:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                # without a pidfd, look for the exit every 10 ms (never reaping it)
                events = sel.select(left if pidfd is not None else min(left, 0.01))
                for key, _ in events:
                    if key.fd == pidfd:
                        exited = True
                        sel.unregister(pidfd)
                        continue
                    try:
                        chunk = os.read(key.fd, _READ)
                    except BlockingIOError:
                        continue
                    if chunk:
                        tails[key.fd].feed(chunk)
                    else:
                        sel.unregister(key.fd)
                if pidfd is None and not exited:
                    exited = _has_exited(proc.pid)
    finally:
        _killpg(proc.pid)  # the group, what the command left in it, before the pid can be reused
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        if pidfd is not None:
            os.close(pidfd)
    return CommandResult(proc.returncode, out, err, timed_out)


def _pidfd(pid: int) -> int | None:
    """A pollable fd that turns readable when ``pid`` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _has_exited(pid: int) -> bool:
    """Has child ``pid`` exited?  It stays a zombie (WNOWAIT): its group id stays its own."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:  # nothing left in it
        pass


def _children(pid: int) -> list[tuple[int, int]]:
    """``(pid, process group)`` of each child of ``pid``, from /proc (Linux)."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[1]) == pid:
            found.append((int(name), int(fields[2])))
    return found


def kill_with_groups(pid: int) -> None:
    """SIGKILL ``pid`` (an analysis process) and the process group each of its
    children leads (the commands :func:`run_command` started): stopped first, so
    that it starts nothing meanwhile and its exited commands stay unreaped."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    try:
        own = os.getpgrp()
        for child, group in _children(pid):
            if group == child and group != own:
                _killpg(group)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
