"""One writer per stateDir: an ``flock`` held for the process's life.

Two processes writing one stateDir -- a ``--reload`` started beside a
running crawl, a second launcher, two workers with one workerId -- append
to the same stores and journal and corrupt both crawls.  So every process
that writes a stateDir holds a lock on a file in it first, and a second one
is refused at once (exit 2, naming the holder) before it writes anything.

**Who locks what.**

=====================================  ==========================================
process                                lock file (role in the message)
=====================================  ==========================================
a crawl (``larbin -c ...``, --demo)    ``stateDir/lock`` (``crawl``, ``demo``)
the launcher (``--workers N``)         ``stateDir/lock`` (``launcher``)
``larbin analyze``                     ``stateDir/lock`` (``analyze``)
a worker (``--worker``, or a crawl     ``stateDir/<workerId>.lock``
with a redisUrl)                       (``worker <workerId>``)
=====================================  ==========================================

A worker writes only its own part of stateDir (``<workerId>/``,
``analysis-<workerId>/``): its lock is its own, so the launcher's
``stateDir/lock`` does not block its children, and a second worker with the
same id on the same stateDir is refused.

**Mechanism.**  :meth:`StateLock.acquire`:

1. creates stateDir (mode 0700, larbin_py.owner_only) when it is absent;
2. opens the lock file (``O_CREAT``, mode 0600, ``O_CLOEXEC``): a process to
   be refused finds the holder's file there, so it creates nothing;
3. ``flock(LOCK_EX | LOCK_NB)``: held by another open file, it raises
   :class:`StateLocked` with the holder's line (below), and the refused
   process has only read it;
4. checks that the path still names the file it locked (a holder that ends
   removes its file, see below; a process that opened the old file just
   before that locks a file nobody else can find, so it starts over);
5. writes one JSON line into the file, ``{"pid", "role", "started"}``, read
   only for a refused process's message (the lock itself is the flock);
6. makes stateDir owner-only (larbin_py.owner_only.make_private_dir).

The fd stays open for the process's life; :meth:`StateLock.release` (a clean
end) removes the file while still holding it, then closes it, and removes
stateDir too when this process created it and nothing else is in it (a
start that failed leaves no folder behind).

**After a crash.**  The kernel closes every fd of a process that dies, by
SIGKILL too, which releases the flock: a ``--reload`` right after a crash
takes the lock at once.  The file remains with the dead process's line; the
next holder overwrites it.  A lock never outlives its process, so there is
no stale lock to break by hand.

**Forks.**  An flock belongs to the open file, which a ``fork()`` shares: a
child holding an inherited fd would keep the parent's lock alive after the
parent died, and would not hold a lock of its own.  So the fd is
close-on-exec (an exec'd worker, redis-server or analysis process never
gets it) and this module closes it in every forked child
(``os.register_at_fork``): the launcher's zygote and the workers it forks
hold only what they take themselves.  A child's :meth:`release` of an
inherited lock does nothing.

**NFS.**  Linux implements ``flock()`` on NFS with the server's byte-range
locks (NFSv4, or NFSv3 with lockd), so two machines mounting one stateDir
exclude each other; a mount with ``nolock`` or ``local_lock=flock`` locks
on this machine only (two machines are then not excluded).  A client that
crashes holds its lock on the server until its lease ends (about 90 s on
NFSv4), so a ``--reload`` from another machine is refused until then.

**Errors.**  :class:`StateDirError` (one line) when stateDir or the lock
file cannot be created (a read-only disk, a path through a file);
:class:`StateLocked` (a :class:`StateDirError`) when another process holds
the lock.  The command line prints either and exits 2.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time

from . import owner_only

__all__ = ["LOCK_NAME", "StateDirError", "StateLocked", "StateLock", "lock_state_dir", "lock_worker",
           "read_holder"]

#: The lock file of a crawl, a launcher, an analyze run.
LOCK_NAME = "lock"
#: Attempts at step 4 before giving up (each lost to a holder ending meanwhile).
_ATTEMPTS = 50


class StateDirError(Exception):
    """stateDir cannot be locked: its message is one line."""


class StateLocked(StateDirError):
    """Another process holds the lock: ``holder`` is its line (may be empty)."""

    def __init__(self, message: str, holder: dict) -> None:
        super().__init__(message)
        self.holder = holder


#: The locks this process holds (a forked child closes them: see the module).
_held: set["StateLock"] = set()


def _forget_in_child() -> None:
    for lock in _held:
        fd, lock._fd = lock._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    _held.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def read_holder(path: str, fd: int | None = None) -> dict:
    """The line a holder wrote in lock file ``path`` ({} when none, or unreadable)."""
    try:
        if fd is None:
            with open(path, "rb") as f:
                data = f.read(4096)
        else:
            data = os.pread(fd, 4096, 0)
        doc = json.loads(data.decode("utf-8", "replace") or "{}")
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def _describe(holder: dict) -> str:
    """``process 1234 (a crawl, since 12:00:03)``, as far as the line tells."""
    pid = holder.get("pid")
    role = holder.get("role")
    started = holder.get("started")
    what = []
    if isinstance(role, str) and role:
        what.append(role)
    if isinstance(started, (int, float)):
        what.append("since " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)))
    who = f"process {pid}" if isinstance(pid, int) else "another process (it is starting)"
    return who + (f" ({', '.join(what)})" if what else "")


class StateLock:
    """An flock held on ``path`` by this process (see the module)."""

    def __init__(self, state_dir: str, path: str, role: str, fd: int, created_dir: bool) -> None:
        self.state_dir = state_dir
        self.path = path
        self.role = role
        self._fd: int | None = fd
        self._created_dir = created_dir
        #: A sentence when stateDir could not be made owner-only (a shared or foreign folder).
        self.warning: str | None = None

    @property
    def held(self) -> bool:
        """True until :meth:`release` (and False in a forked child)."""
        return self._fd is not None

    @classmethod
    def acquire(cls, state_dir: str, role: str, name: str = LOCK_NAME) -> "StateLock":
        """Lock ``state_dir/name`` for ``role``; raises StateLocked / StateDirError."""
        path = os.path.join(state_dir, name)
        created_dir = False
        for _ in range(_ATTEMPTS):
            try:
                if not os.path.isdir(state_dir):
                    os.makedirs(state_dir, mode=owner_only.DIR_MODE)
                    created_dir = True
            except FileExistsError:
                pass  # another process made it meanwhile, or a file is there: open() says which
            except OSError as exc:
                raise StateDirError(f"stateDir {state_dir!r}: cannot create it: {_reason(exc)}") from None
            try:
                fd = owner_only.opener(path, os.O_RDWR | os.O_CREAT)
            except FileNotFoundError:
                continue  # a holder that ended removed the folder it made: make it again
            except OSError as exc:
                raise StateDirError(f"stateDir {state_dir!r}: cannot open its lock file {path}: "
                                    f"{_reason(exc)}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = read_holder(path, fd)
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise StateDirError(f"stateDir {state_dir!r}: cannot lock {path}: {_reason(exc)}") from None
                raise StateLocked(_refusal(state_dir, name, holder), holder) from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if not same:  # its holder removed it as we opened it: lock the file now there
                os.close(fd)
                continue
            lock = cls(state_dir, path, role, fd, created_dir)
            _held.add(lock)
            try:
                line = json.dumps({"pid": os.getpid(), "role": role, "started": round(time.time(), 3)})
                os.ftruncate(fd, 0)
                os.pwrite(fd, (line + "\n").encode(), 0)
                lock.warning = owner_only.make_private_dir(state_dir)
            except OSError as exc:
                lock.release()
                raise StateDirError(f"stateDir {state_dir!r}: cannot write its lock file {path}: "
                                    f"{_reason(exc)}") from None
            return lock
        raise StateDirError(f"stateDir {state_dir!r}: its lock file {path} kept changing "
                            f"({_ATTEMPTS} attempts): other processes keep starting and ending on it")

    def release(self) -> None:
        """Give the lock up (a clean end): the file removed, stateDir too if this
        process made it and it is empty.  Idempotent; a no-op in a forked child."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _held.discard(self)
        try:
            try:
                os.unlink(self.path)  # still locked: whoever opened it meanwhile starts over
            except OSError:
                pass
        finally:
            os.close(fd)
        if self._created_dir:
            try:
                os.rmdir(self.state_dir)
            except OSError:  # not empty: the crawl's state is in it
                pass

    def __enter__(self) -> "StateLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _refusal(state_dir: str, name: str, holder: dict) -> str:
    who = _describe(holder)
    if name == LOCK_NAME:
        return (f"stateDir {state_dir!r} is in use by {who}: one process at a time writes a stateDir; "
                "wait for it to end (or stop it), or choose another stateDir")
    worker = name[:-len(".lock")]
    return (f"stateDir {state_dir!r}: workerId {worker} is in use there by {who}: one worker per workerId "
            "writes a stateDir; wait for it to end (or stop it), or give this worker another workerId")


def lock_state_dir(state_dir: str, role: str) -> StateLock:
    """Lock ``stateDir/lock`` for a crawl, a launcher or an analyze run (``role`` names it)."""
    return StateLock.acquire(state_dir, role)


def lock_worker(state_dir: str, worker: str) -> StateLock:
    """Lock ``stateDir/<worker>.lock`` for worker ``worker`` (its part of stateDir)."""
    return StateLock.acquire(state_dir, f"worker {worker}", f"{worker}.lock")
