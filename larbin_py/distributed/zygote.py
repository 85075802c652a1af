"""Workers forked from a process that has already imported them (a zygote).

A worker started as ``python -m larbin_py --worker`` spends about half a
CPU-second importing the crawler (the engine, lxml, uvloop, numpy, redis-py)
before it fetches a page: with four workers that is two CPU-seconds, more
than a tenth of a 20,000-page crawl.  The launcher instead forks, before its
own event loop or any thread exists, one *zygote*: a process that imports
the worker side once (:data:`PRELOAD`), freezes its objects out of the
garbage collector (so the children's collections do not copy its pages) and
then waits for orders on a ``SOCK_SEQPACKET`` socket pair.  Each worker is a
fork of the zygote that runs ``larbin_py.cli.main(argv)`` (the target the
launcher gives) exactly as the command line would, and ends with ``os._exit(code)``.

**Protocol** (one datagram each, JSON):

=================================  ==========================================
launcher -> zygote                 zygote -> launcher
=================================  ==========================================
``{"spawn": wid, "argv": [...]}``  ``{"started": wid, "pid": N}``, or
with three fds (SCM_RIGHTS): the   ``{"failed": wid, "error": "..."}``
child's stdin, stdout and stderr
(EOF: the launcher is done)        ``{"exit": N, "code": C}`` when child N
                                   ends (C as asyncio reports it: negative
                                   for a signal)
=================================  ==========================================

**The child** (:func:`_child`) starts a session of its own (a Ctrl-C reaches
it once, through the launcher), dies with the zygote
(``PR_SET_PDEATHSIG``), names itself ``larbin <wid>`` (``ps -o comm``;
``/proc/<pid>/comm``), puts the three fds on 0, 1 and 2 (with new
``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` on them), restores the
default signal handlers and runs the command line.  ``random`` is reseeded
by CPython at every fork.

**The zygote's end.**  It ignores SIGINT and SIGTERM (the launcher forwards
signals to the workers, and a SIGTERM to every process of a service must not
lose the workers' exit codes); both are blocked across its fork, so one sent
the moment :meth:`Zygote.start` returns is dropped, not fatal.  When the
launcher ends, however it ends, the kernel closes its socket: the zygote
sends SIGTERM to the children still running, waits for them and exits.

**Accounting.**  The zygote waits for each child (``pidfd_open``: Linux 5.3)
and the launcher waits for the zygote (:meth:`Zygote.close`), so the
workers' CPU time reaches the launcher's ``RUSAGE_CHILDREN`` as it does
with ``exec``: the benchmarks count every process.

**When it is not used.**  :meth:`Zygote.start` returns None, and the
launcher starts workers with ``exec`` as before, when a thread already runs
(a fork would copy its locks held), when ``os.pidfd_open`` is missing, or
when the fork fails.  A zygote that dies mid-crawl ends its workers
(PDEATHSIG); the launcher then reports them ended by SIGTERM, and respawns
go through ``exec``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import selectors
import signal
import socket
import sys
import threading
from typing import Callable, Iterable, Sequence

from .prctl import set_name, set_pdeathsig

__all__ = ["Zygote", "ForkedProc", "PRELOAD"]

#: What a worker imports, loaded once in the zygote.  A module missing here is
#: only imported by each worker itself (correct, slower).
PRELOAD = (
    "larbin_py.cli", "larbin_py.distributed.launcher", "larbin_py.distributed.crawl_worker", "larbin_py.engine",
    "larbin_py.runner", "larbin_py.pages", "larbin_py.parse", "larbin_py.net.http", "larbin_py.net.dns",
    "larbin_py.net.fastread", "larbin_py.output.mirror", "larbin_py.output.save", "larbin_py.output.warc",
    "larbin_py.output.stats", "larbin_py.output.writer", "larbin_py.distributed.membership_zk", "uvloop",
    "redis.asyncio", "lxml.html",
)

_MSG = 65536


def _send(sock: socket.socket, message: dict, fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


# --- the zygote's side ----------------------------------------------------------


def _child(sock: socket.socket, parent: int, wid: str, argv: list[str], fds: list[int],
           target: Callable[[list[str]], int], closing: list[int]) -> None:
    """In the forked worker: never returns."""
    code = 1
    try:
        for fd in closing:
            try:
                os.close(fd)
            except OSError:
                pass
        sock.close()
        os.setsid()
        set_pdeathsig(signal.SIGTERM)
        if os.getppid() != parent:  # the zygote died between the fork and the prctl
            os._exit(1)
        set_name(f"larbin {wid}")
        for i, fd in enumerate(fds[:3]):
            os.dup2(fd, i)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        # new streams on the new 0, 1 and 2, buffered as an exec'd Python's would be
        sys.stdin = os.fdopen(0, "r", closefd=False)
        sys.stdout = os.fdopen(1, "w", closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, errors="backslashreplace", closefd=False)
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = [sys.argv[0], *argv]
        code = target(argv)
        code = code if isinstance(code, int) and not isinstance(code, bool) else 0
    except SystemExit as exc:  # as the interpreter reads it: None is 0, a message is 1
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code & 0xFF)


def _serve(sock: socket.socket, parent: int, target: Callable[[list[str]], int]) -> None:
    """The zygote's loop: fork on order, report each child's end; return once
    the launcher has hung up and every child was waited for."""
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    children: dict[int, int] = {}  # pidfd -> pid
    open_ = True
    while open_ or children:
        for key, _ in sel.select():
            if key.fileobj is sock:
                try:
                    data, fds, _flags, _addr = socket.recv_fds(sock, _MSG, 3)
                except OSError:
                    data, fds = b"", []
                if not data:
                    open_ = False
                    sel.unregister(sock)
                    for pid in children.values():  # the launcher is gone: so are its workers
                        try:
                            os.kill(pid, signal.SIGTERM)
                        except ProcessLookupError:
                            pass
                    continue
                order = json.loads(data)
                wid, argv = order["spawn"], list(order["argv"])
                sys.stdout.flush()
                sys.stderr.flush()
                try:
                    pid = os.fork()
                except OSError as exc:
                    for fd in fds:
                        os.close(fd)
                    _send(sock, {"failed": wid, "error": str(exc)})
                    continue
                if pid == 0:
                    _child(sock, parent, wid, argv, fds, target, [sel.fileno(), *children])
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = pid
                sel.register(pidfd, selectors.EVENT_READ)
                _send(sock, {"started": wid, "pid": pid})
            else:
                pidfd = key.fd
                pid = children.pop(pidfd)
                sel.unregister(pidfd)
                os.close(pidfd)
                _pid, status = os.waitpid(pid, 0)
                if open_:
                    try:
                        _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
                    except OSError:
                        pass


#: The signals the zygote ignores: the launcher's to forward; its end is our EOF.
_IGNORED = (signal.SIGINT, signal.SIGTERM)


def _zygote_main(sock: socket.socket, preload: Sequence[str], target: Callable[[list[str]], int],
                 mask: Iterable[int]) -> None:
    code = 0
    try:
        for sig in _IGNORED:
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending is dropped: ignored
        set_name("larbin zygote")
        import importlib

        for name in preload:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
        gc.collect()
        gc.freeze()
        _serve(sock, os.getpid(), target)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


# --- the launcher's side ----------------------------------------------------------


class ForkedProc:
    """A worker forked by the zygote, shaped like ``asyncio.subprocess.Process``
    as far as the launcher uses it: ``pid``, ``returncode``, ``stdout`` and
    ``stderr`` (StreamReaders), ``wait()``, ``send_signal()``, ``kill()``."""

    def __init__(self, pid: int, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._ended = asyncio.get_running_loop().create_future()

    def _set_exit(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._ended.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self._ended)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # ended, its exit not read yet
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The launcher's handle on its zygote: :meth:`start` before any event loop
    or thread, :meth:`spawn` from the loop, :meth:`close` at the end."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self.sock = sock
        self.procs: dict[int, ForkedProc] = {}
        self._early: dict[int, int] = {}  # exits read before spawn() saw its "started"
        self.alive = True
        self._replies: asyncio.Queue | None = None
        self._reader: asyncio.Task | None = None
        self._lock: asyncio.Lock | None = None
        self.status: int | None = None

    @classmethod
    def start(cls, target: Callable[[list[str]], int], preload: Sequence[str] = PRELOAD,
              *, check_threads: bool = True) -> "Zygote | None":
        """Fork the zygote; None when forking is not safe or not possible here (see the module).

        ``target(argv)`` is what each child runs (the launcher gives
        ``larbin_py.cli.main``); ``check_threads=False`` forks beside threads
        known to be idle (tests).
        """
        if not hasattr(os, "pidfd_open") or (check_threads and threading.active_count() > 1):
            return None
        try:
            os.close(os.pidfd_open(os.getpid()))
        except OSError:  # a kernel before 5.3
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sys.stdout.flush()
        sys.stderr.flush()
        # SIGINT and SIGTERM blocked across the fork: one sent the moment start()
        # returns must not find the zygote before it ignores them
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _IGNORED)
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            ours.close()
            theirs.close()
            return None
        if pid == 0:
            ours.close()
            _zygote_main(theirs, preload, target, held)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        theirs.close()
        return cls(pid, ours)

    def _ensure_reader(self) -> None:
        if self._reader is None:
            self.sock.setblocking(False)
            self._replies = asyncio.Queue()
            self._lock = asyncio.Lock()
            self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await loop.sock_recv(self.sock, _MSG)
                if not data:
                    break
                msg = json.loads(data)
                if "exit" in msg:
                    proc = self.procs.pop(msg["exit"], None)
                    if proc is not None:
                        proc._set_exit(int(msg["code"]))
                    else:  # a child that ended before spawn() took its "started" from the queue
                        self._early[int(msg["exit"])] = int(msg["code"])
                else:
                    self._replies.put_nowait(msg)
        except (OSError, ValueError):
            pass
        self.alive = False
        self._replies.put_nowait({"failed": "", "error": "the zygote ended"})
        for proc in list(self.procs.values()):  # they die with it (PDEATHSIG): their codes are lost
            await _gone(proc.pid)
            proc._set_exit(-signal.SIGTERM)
        self.procs.clear()

    async def spawn(self, wid: str, argv: Sequence[str]) -> ForkedProc:
        """Fork a worker running ``larbin_py.cli.main(argv)``; its output on two pipes.

        Raises OSError when the zygote cannot (it died, or its fork failed).
        """
        self._ensure_reader()
        if not self.alive:
            raise OSError("the zygote ended")
        loop = asyncio.get_running_loop()
        async with self._lock:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            null = os.open(os.devnull, os.O_RDONLY)
            try:
                _send(self.sock, {"spawn": wid, "argv": list(argv)}, [null, out_w, err_w])
            except OSError:
                for fd in (out_r, err_r):
                    os.close(fd)
                raise
            finally:
                for fd in (null, out_w, err_w):
                    os.close(fd)
            reply = await self._replies.get()
            if "started" not in reply:
                os.close(out_r)
                os.close(err_r)
                raise OSError(f"the zygote could not start {wid}: {reply.get('error')}")
            streams = []
            for fd in (out_r, err_r):
                reader = asyncio.StreamReader(limit=1 << 20)
                await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r),
                                             os.fdopen(fd, "rb", buffering=0))
                streams.append(reader)
            proc = ForkedProc(int(reply["pid"]), *streams)
            if proc.pid in self._early:
                proc._set_exit(self._early.pop(proc.pid))
            else:
                self.procs[proc.pid] = proc
            return proc

    def close(self) -> int | None:
        """Hang up and wait for the zygote (it ends once its children have): its exit status."""
        if self.status is None:
            if self._reader is not None:
                self._reader.cancel()
            try:
                self.sock.close()
            except OSError:
                pass
            try:
                _pid, status = os.waitpid(self.pid, 0)
                self.status = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                self.status = -1
        return self.status


async def _gone(pid: int) -> None:
    """Until process ``pid`` has ended (not a child of ours: its pidfd says so)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # already gone
        return
    loop = asyncio.get_running_loop()
    ended = loop.create_future()
    loop.add_reader(fd, lambda: ended.done() or ended.set_result(None))
    try:
        await ended
    finally:
        loop.remove_reader(fd)
        os.close(fd)
