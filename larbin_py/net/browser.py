"""The headless Chromium process that renders dynamic pages (issue 23).

:class:`Browser` starts Debian's ``chromium`` headless, with a profile of its
own in ``stateDir/browser`` (wiped at every start: nothing of a previous run
leaks into the next, and nothing is written outside stateDir but a socket
directory in /tmp that does not outlive the browser, below), and talks to
it over ``--remote-debugging-pipe`` (see :mod:`larbin_py.net.cdp`).  Why a
pipe and not a DevTools port on 127.0.0.1: no other local process can drive
a browser it cannot reach (a port is open to every local user); no port to
pick, no race to read it from stderr; the browser's death is an end of file
at once.  (Speed does not decide: a command's round trip is the same, about
0.3-0.7 ms, over either; bench/dynamic.py measures both.)  The browser exits
by itself when the pipe closes, so even a crawler killed with SIGKILL leaves
no browser behind.

Who runs it, and the sandbox
----------------------------
Chromium renders hostile pages; its sandbox (user and PID namespaces plus
seccomp-bpf for every renderer) is what keeps a renderer exploit inside the
renderer.  So it is never turned off silently:

* **The crawler runs as root** (the usual container): Chromium runs as
  ``dynamicUser`` (default ``nobody``), never as root.  The start command is
  ``/bin/sh`` (which puts the two pipes on fds 3 and 4: the crawler has
  threads, so no ``preexec_fn``, and uvloop's spawn has no ``user=``), which
  execs ``setpriv --reuid --regid --clear-groups`` (util-linux), which execs
  Chromium as that user: real, effective and saved ids all the user's, no
  supplementary group, no capability left.  Inherited descriptors need no
  permission, so the pipes work across the switch.  The profile directory is
  made by the crawler, then given to the user (mode 0700); its log file
  (Chromium's stderr) is created by the crawler before that and read back
  through the crawler's own descriptor, never by path (the user owns the
  directory and could put a link there).  A ``dynamicUser`` that does not
  exist, or whose uid is 0, stops the start.
* **Not root**: Chromium runs as the crawler's own user (``dynamicUser`` is
  not used).
* **The sandbox is on** either way.  ``dynamicSandbox off`` adds
  ``--no-sandbox`` (the one way to get it, with a warning at start).

Chromium gets a small environment of its own (PATH, the locale, TZ), with
HOME and the XDG directories inside the profile: no secret of the crawler's
environment reaches a process that runs page scripts, and nothing is
written to a home directory.

Start failures are one line each (:class:`BrowserUnavailable`, the crawler
exits 2), told apart from Chromium's log and exit (:func:`start_failure`):
the browser exiting before it answers is noticed at once (its exit is
awaited beside its first answer), so nothing waits for ``start_timeout``.
In this order (what the crawler can check itself first: Chromium's log for
an unreachable profile differs from one build to the next, and some end it
with the zygote's failed check, as a forbidden sandbox does):

* root without the capability to change user (setpriv fails) -> run the
  crawler as an unprivileged user;
* ``dynamicUser`` cannot reach the profile (a parent directory it may not
  enter, such as /root) -> the directory named;
* the sandbox cannot start ("No usable sandbox!", "Failed to move to new
  namespace": user namespaces off or forbidden by a container's seccomp
  profile) -> the fixes, and ``dynamicSandbox off`` as the last resort;
* Chromium missing or broken -> the ``apt-get`` hint.

The network
-----------
The browser never reaches the network itself: every request a page makes
is intercepted and served by the crawler (:mod:`larbin_py.net.dynamic`), and
what interception does not see is stopped by :data:`FLAGS`:
``--proxy-server`` points at a closed port (a WebSocket, a service worker's
or a cross-site frame's request fails there), its bypass list is empty
(``<-loopback>``: loopback too), ``--host-resolver-rules`` resolves every
name to nothing (no DNS query of Chromium's own, prefetch or other),
``--disable-quic`` (no HTTP/3, no WebTransport over UDP), and the WebRTC IP
policy ``disable_non_proxied_udp`` (ICE gathers no UDP candidate and sends
no STUN datagram; TCP would need the proxy, which is closed).  The switch
is ``--webrtc-ip-handling-policy`` in current Chromium (156 here);
``--force-webrtc-ip-handling-policy``, its older name, is passed too and is
ignored by builds that do not know it.  WebRtcHideLocalIpsWithMdns stays at
its default: with no host candidate gathered there is no mDNS name to
announce, and turning it off would only un-hide local addresses.

Restarts
--------
``connection()`` gives the live connection, starting the browser (again)
when there is none: a crash is noticed by the pipe's end, counted in
``crashes``, and the next page restarts it (``restarts``).

Chromium's directory in /tmp
----------------------------
Chromium's ProcessSingleton puts its socket in a directory of its own,
``/tmp/org.chromium.Chromium.XXXXXX`` (``SingletonSocket`` and
``SingletonCookie``), and links the profile's ``SingletonSocket`` to it.
It is in the temp directory, not the profile, because a socket's path has
a 108-byte limit (Chromium CHECK-fails on a longer one, and stateDir may be
long): :func:`browser_env` passes no TMPDIR, so :func:`browser_tmpdir` is
/tmp.  Chromium removes that directory when it exits cleanly, never when it
is killed; so once the process is reaped (every path: ``close()``, a crash
or ``kill()`` before a restart, a start that failed), and before the
profile of a crawler killed with SIGKILL is wiped at the next start,
:func:`remove_singleton_dir` removes it.  The link is written by the
browser user (possibly a compromised browser, the crawler possibly root),
so it is never followed: only a directory of the exact name right in the
temp directory, a real directory owned by the browser's uid and holding
nothing but those two entries, is emptied (``dir_fd``-relative, no link
followed) and removed.  Anything else is left as it is (a debug log line).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import pwd
import re
import shutil
import signal
import stat
from dataclasses import dataclass

from ..core_pin import spawning
from .cdp import BrowserClosed, CDPConnection, CDPError

__all__ = ["Browser", "BrowserUnavailable", "RunAs", "as_user", "browser_env", "find_chromium", "run_as",
           "sandbox_complaint", "start_failure", "blocking_directory", "browser_tmpdir", "singleton_dir_name",
           "remove_singleton_dir", "INSTALL_HINT", "FLAGS"]

log = logging.getLogger(__name__)

INSTALL_HINT = "apt-get install chromium"
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Chromium's own switches: headless, quiet, no background traffic, nothing leaves unpoliced.
FLAGS = (
    "--headless",
    "--remote-debugging-pipe",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-gpu",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-dev-shm-usage",
    "--disable-features=Translate,MediaRouter,OptimizationHints",
    "--mute-audio",
    "--blink-settings=imagesEnabled=false",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--disable-quic",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
)
LOG_NAME = "chromium.log"
#: The environment variables handed to Chromium (HOME and XDG_* are set to the profile).
KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ")
#: Puts the pipes on the browser's fds 3 (commands) and 4 (answers), then execs the rest.
_FD_SCRIPT = 'exec "$@" 3<&0 4>&1 0</dev/null 1>&2'
#: The prefix of Chromium's log lines: ``[pid:tid:time:LEVEL:file.cc(line)] ``.
_LOG_PREFIX_RE = re.compile(r"\[[^\]]*:(ERROR|FATAL|WARNING|INFO|VERBOSE\d*):([^\]]*)\]\s*")
#: What the sandbox's failures say (the namespace one is printed without a prefix).
_SANDBOX_WORDS_RE = re.compile(r"sandbox|new namespace|user namespace", re.IGNORECASE)
#: The ProcessSingleton's directory: base::CreateNewTempDirectory, mkdtemp's six characters.
_SINGLETON_DIR_RE = re.compile(r"org\.chromium\.Chromium\.[A-Za-z0-9]{6}")
#: The profile's link to the socket, and all Chromium puts in that directory (the socket, the cookie link).
SINGLETON_SOCKET = "SingletonSocket"
SINGLETON_ENTRIES = (SINGLETON_SOCKET, "SingletonCookie")
SANDBOX_FIX = ("allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and "
               "user.max_user_namespaces > 0; in a container, a seccomp profile that permits them) or "
               "apt-get install chromium-sandbox; 'dynamicSandbox off' runs Chromium without it (not advised)")


class BrowserUnavailable(Exception):
    """Chromium is missing or would not start: one line for the user (exit 2)."""


@dataclass(frozen=True, slots=True)
class RunAs:
    """The unprivileged user Chromium is started as (the crawler being root)."""

    name: str
    uid: int
    gid: int


def run_as(user: str, euid: int) -> RunAs | None:
    """Who Chromium must run as: None (the crawler's own user) unless ``euid`` is 0.

    As root, ``user`` (a name or a number) is looked up; an unknown user or
    one whose uid is 0 raises :class:`BrowserUnavailable`.
    """
    if euid != 0:
        return None
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, OverflowError):
        raise BrowserUnavailable(f"dynamicUser {user!r}: no such user here (the crawler runs as root, so "
                                 f"Chromium must run as an unprivileged user: create one, e.g. useradd "
                                 f"--system --no-create-home larbin-chromium, or name an existing one)") from None
    if entry.pw_uid == 0:
        raise BrowserUnavailable(f"dynamicUser {user!r} is uid 0: Chromium renders hostile pages and must "
                                 f"not run as root; name an unprivileged user (default nobody)")
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)


def sandbox_complaint(log: str) -> str | None:
    """Chromium's own words when its sandbox cannot start (from its log), or None.

    Without user namespaces its zygote logs "No usable sandbox! ..." (an
    ERROR line); where a container's seccomp profile forbids them it prints
    "Failed to move to new namespace: ..." (no prefix), then a FATAL line of
    ``zygote_host_impl_linux.cc``.  The first such line's first sentence is
    returned; a line of another level, or about something else, is not one.
    """
    for line in log.splitlines():
        m = _LOG_PREFIX_RE.match(line)
        if m is not None and m.group(1) not in ("ERROR", "FATAL"):
            continue
        text = (line[m.end():] if m is not None else line).strip()
        if _SANDBOX_WORDS_RE.search(text) or (m is not None and m.group(1) == "FATAL"
                                              and "zygote_host" in m.group(2)):
            first = re.match(r"(.+?[.!])(?=\s+[A-Z])", text)
            return (first.group(1) if first else text)[:160]
    return None


def blocking_directory(path: str, uid: int, gid: int) -> str | None:
    """The first parent directory of ``path`` that user ``uid`` (group ``gid``) may not enter, or None.

    Mode bits only (an ACL that grants more is not read): used to explain a
    start that already failed, never to refuse one.
    """
    parts = os.path.abspath(path).split(os.sep)
    for i in range(1, len(parts)):
        directory = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(directory)
        except OSError:
            return None
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return directory
    return None


def _describe(directory: str) -> str:
    st = os.stat(directory)
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return f"{stat.filemode(st.st_mode)} {owner}"


def start_failure(log: str, *, path: str, detail: str, who: RunAs | None, sandbox: bool, profile: str) -> str:
    """The one line that says why Chromium did not start and what fixes it.

    The causes the crawler can check itself come first (``setpriv`` failed,
    a directory ``dynamicUser`` may not enter), then Chromium's own words: a
    profile it cannot reach makes some builds abort in the zygote's start
    (Chromium 150: ``FATAL:...zygote_host_impl_linux.cc`` ``Check failed: . :
    No such file or directory``), the line a container's forbidden
    namespaces end with too, and the sandbox must not be blamed for it.
    """
    user = f" as {who.name}" if who is not None else ""
    switch = next((ln.strip() for ln in log.splitlines() if ln.startswith("setpriv:")), None)
    if who is not None and switch is not None:
        return (f"cannot run Chromium as dynamicUser {who.name} ({switch}): the crawler is root without "
                f"CAP_SETUID/CAP_SETGID (a container that drops them?); run the crawler as an unprivileged "
                f"user instead (Chromium then runs as that user)")
    if who is not None:
        blocked = blocking_directory(profile, who.uid, who.gid)
        if blocked is not None:
            return (f"dynamicUser {who.name} cannot reach Chromium's profile {profile}: it may not enter "
                    f"{blocked} ({_describe(blocked)}); put stateDir where that user can pass (every parent "
                    f"directory searchable, o+x), or set dynamicUser to a user who can")
    complaint = sandbox_complaint(log) if sandbox else None
    if complaint is not None:
        return f"Chromium's sandbox cannot start{user} ({complaint}): {SANDBOX_FIX}"
    lines = [ln.strip() for ln in log.splitlines() if ln.strip() and "dbus" not in ln]
    tail = f": {lines[-1][:200]}" if lines else ""
    return f"{path} did not start{user} ({detail}){tail} -- is it a working Chromium? {INSTALL_HINT}"


def find_chromium(binary: str | None = None) -> str | None:
    """The path of the browser to run (``binary`` if given), or None."""
    if binary:
        return shutil.which(binary) or (binary if os.access(binary, os.X_OK) else None)
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def as_user(who: RunAs | None) -> list[str]:
    """The words that run a command as ``who`` (none for the crawler's own user): ``setpriv``
    with real, effective and saved ids set and no supplementary group.  BrowserUnavailable
    when setpriv (util-linux) is missing."""
    if who is None:
        return []
    setpriv = shutil.which("setpriv") or next(
        (p for p in ("/usr/bin/setpriv", "/bin/setpriv") if os.access(p, os.X_OK)), None)
    if setpriv is None:
        raise BrowserUnavailable(f"running Chromium as dynamicUser {who.name} needs setpriv, which is not "
                                 f"installed: apt-get install util-linux")
    return [setpriv, f"--reuid={who.uid}", f"--regid={who.gid}", "--clear-groups", "--"]


def let_pass(state_dir: str) -> None:
    """Let the browser user pass through stateDir (0700 -> 0711) to its profile.

    stateDir is the crawler's own (larbin_py.owner_only): the execute bit
    for others lets them reach a name they know, never list the folder, and
    every file in it is 0600, every other folder 0700.  A folder of another
    user's is left as it is (the start then fails naming it).
    """
    st = os.stat(state_dir)
    if st.st_uid == os.geteuid() and not st.st_mode & 0o001:
        os.chmod(state_dir, (st.st_mode & 0o7777) | 0o011)


def browser_env(profile: str, environ) -> dict[str, str]:
    """Chromium's environment: :data:`KEPT_ENV` of ``environ``, HOME and XDG_* in the profile."""
    env = {name: environ[name] for name in KEPT_ENV if name in environ}
    env.setdefault("PATH", os.defpath)
    env["HOME"] = profile
    env["XDG_CONFIG_HOME"] = os.path.join(profile, ".config")
    env["XDG_CACHE_HOME"] = os.path.join(profile, ".cache")
    return env


def browser_tmpdir(env) -> str:
    """The temp directory Chromium uses under ``env`` (base::GetTempDir: TMPDIR, else /tmp).

    :func:`browser_env` passes no TMPDIR, so it is /tmp: the profile is no
    place for the singleton's socket, whose path has a 108-byte limit.
    """
    return os.path.normpath(env.get("TMPDIR") or "/tmp")


def singleton_dir_name(target: str, tmpdir: str) -> str | None:
    """The name of the singleton directory a profile's ``SingletonSocket`` link names, or None.

    Pure: ``target`` (the link's text) must be exactly
    ``TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket``, XXXXXX six
    letters or digits, directly in ``tmpdir``; anything else (another
    folder, ``..``, a relative path, another name) is None.
    """
    directory, leaf = os.path.split(target)
    parent, name = os.path.split(directory)
    if (leaf != SINGLETON_SOCKET or not os.path.isabs(target) or parent != os.path.normpath(tmpdir)
            or _SINGLETON_DIR_RE.fullmatch(name) is None):
        return None
    return name


def remove_singleton_dir(profile: str, uid: int, tmpdir: str) -> bool:
    """Remove the singleton directory named by ``profile``'s ``SingletonSocket`` link; True if removed.

    Called once the browser is dead (a live one would make a new one).  The
    link is the browser user's writing, so nothing is followed:
    :func:`singleton_dir_name` checks its text; the directory is opened
    relative to ``tmpdir`` with O_NOFOLLOW | O_DIRECTORY (a link or a FIFO
    fails there, without blocking) and must be owned by ``uid`` (who the
    browser ran as) and hold nothing but :data:`SINGLETON_ENTRIES`, which
    are unlinked through that descriptor (unlink never follows a link nor
    removes a folder); then the name, still that directory, is removed with
    rmdir, which removes only an empty one.  Limits: a directory of another
    uid (a previous crawl with another ``dynamicUser``) is left; so is
    everything unexpected, with a debug log line, never an error: a leftover
    in /tmp is not worth stopping a crawl for.
    """
    try:
        target = os.readlink(os.path.join(profile, SINGLETON_SOCKET))
    except OSError:  # no link: no profile, or Chromium did not get that far
        return False
    name = singleton_dir_name(target, tmpdir)
    if name is None:
        log.debug("Chromium's singleton link %r is not a directory of %s: left", target[:200], tmpdir)
        return False
    try:
        parent = os.open(tmpdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return _empty_and_remove(parent, name, uid, tmpdir)
    finally:
        os.close(parent)


def _empty_and_remove(parent: int, name: str, uid: int, tmpdir: str) -> bool:
    where = os.path.join(tmpdir, name)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError as exc:
        if exc.errno != errno.ENOENT:  # gone is the usual: Chromium exited cleanly
            log.debug("Chromium's singleton directory %s: %s: left", where, exc.strerror)
        return False
    try:
        st = os.fstat(fd)
        entries = os.listdir(fd)
        if st.st_uid != uid or not set(entries) <= set(SINGLETON_ENTRIES):
            log.debug("Chromium's singleton directory %s: owner %d (browser %d), entries %s: left",
                      where, st.st_uid, uid, sorted(entries)[:5])
            return False
        for entry in entries:
            os.unlink(entry, dir_fd=fd)
    except OSError as exc:
        log.debug("Chromium's singleton directory %s: %s: left", where, exc.strerror)
        return False
    finally:
        os.close(fd)
    try:
        now = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return False
        os.rmdir(name, dir_fd=parent)
    except OSError as exc:
        log.debug("Chromium's singleton directory %s: %s: left", where, exc.strerror)
        return False
    return True


class Browser:
    """One headless Chromium, (re)started on demand; see the module docstring.

    ``user``: who runs it when the crawler is root (``dynamicUser``);
    ``sandbox``: False adds ``--no-sandbox`` (``dynamicSandbox off``).
    """

    def __init__(self, state_dir: str, *, binary: str | None = None, start_timeout: float = 30.0,
                 user: str = "nobody", sandbox: bool = True) -> None:
        self.profile = os.path.join(state_dir, "browser")
        self.binary = binary
        self.start_timeout = start_timeout
        self.user = user
        self.sandbox = sandbox
        self.proc: asyncio.subprocess.Process | None = None
        self.conn: CDPConnection | None = None
        self.version = ""
        self.starts = 0
        self.crashes = 0
        #: Who the browser runs as (None: the crawler's own user), once started.
        self.run_as: RunAs | None = None
        self._log_fd: int | None = None
        self._starting: asyncio.Future | None = None
        self._closing = False

    @classmethod
    def for_config(cls, config) -> "Browser":
        """The browser of a crawl's configuration (stateDir, dynamicUser, dynamicSandbox)."""
        return cls(config.state_dir, user=config.dynamic_user, sandbox=config.dynamic_sandbox)

    @property
    def warning(self) -> str | None:
        """What the user must be told at start (the sandbox off), or None."""
        if self.sandbox:
            return None
        euid = os.geteuid()
        if euid == 0:
            who = self.user
        else:
            try:
                who = pwd.getpwuid(euid).pw_name
            except KeyError:
                who = f"uid {euid}"
        return (f"dynamicSandbox off: Chromium renders crawled pages without its sandbox (--no-sandbox); "
                f"a renderer exploit runs as {who} with nothing else in its way")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else None

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    async def connection(self) -> CDPConnection:
        """The live DevTools connection, the browser started (again) if needed."""
        if self.conn is not None and not self.conn.is_closed:
            return self.conn
        if self._closing:
            raise BrowserClosed("the browser is shutting down")
        if self._starting is None:  # one start for every page waiting on it
            self._starting = asyncio.ensure_future(self._start())
        starting = self._starting
        try:
            return await asyncio.shield(starting)
        finally:
            if starting.done() and self._starting is starting:
                self._starting = None

    start = connection  # the engine starts it before the crawl so a missing browser fails at once

    def _remove_singleton_dir(self, who: RunAs | None) -> None:
        """The dead browser's directory in /tmp (module docstring); ``who`` it ran as."""
        uid = who.uid if who is not None else os.geteuid()
        remove_singleton_dir(self.profile, uid, browser_tmpdir(browser_env(self.profile, os.environ)))

    def _prepare_profile(self, who: RunAs | None) -> None:
        """A fresh profile directory (0700, the browser user's) holding the crawler's log file.

        A profile left by a crawler killed with SIGKILL names its browser's
        directory in /tmp: removed first."""
        self._remove_singleton_dir(who)
        shutil.rmtree(self.profile, ignore_errors=True)
        os.makedirs(os.path.dirname(self.profile) or ".", exist_ok=True)
        os.mkdir(self.profile, 0o700)
        self._close_log()
        # Created while the directory is still the crawler's, never opened again by name.
        self._log_fd = os.open(os.path.join(self.profile, LOG_NAME),
                               os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        if who is not None:
            os.chown(self.profile, who.uid, who.gid)
            let_pass(os.path.dirname(os.path.abspath(self.profile)))
        os.chmod(self.profile, 0o700)  # exactly, whatever the umask

    def _log(self) -> str:
        """The end of Chromium's log (its stderr), read through the crawler's descriptor."""
        if self._log_fd is None:
            return ""
        try:
            size = os.fstat(self._log_fd).st_size
            data = os.pread(self._log_fd, 16384, max(0, size - 16384))
        except OSError:
            return ""
        return data.decode("utf-8", "replace")

    def _close_log(self) -> None:
        if self._log_fd is not None:
            os.close(self._log_fd)
            self._log_fd = None

    async def _start(self) -> CDPConnection:
        if self.conn is not None:  # the previous one died
            self.crashes += 1
            await self._reap()
        path = find_chromium(self.binary)
        if path is None:
            raise BrowserUnavailable(f"dynamicPages needs Chromium, which is not installed "
                                     f"(no {' / '.join(CANDIDATES)} on PATH): {INSTALL_HINT}")
        who = self.run_as = run_as(self.user, os.geteuid())
        command = [*as_user(who), path]
        try:
            self._prepare_profile(who)
        except OSError as exc:
            raise BrowserUnavailable(f"cannot make Chromium's profile {self.profile}: "
                                     f"{exc.strerror or exc}") from None
        args = [*FLAGS, f"--user-data-dir={self.profile}"]
        if not self.sandbox:
            args.append("--no-sandbox")
        args.append("about:blank")
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            with spawning():  # every core for Chromium, when the loop is pinned to one (cpuAffinity)
                self.proc = await asyncio.create_subprocess_exec(
                    "/bin/sh", "-c", _FD_SCRIPT, "sh", *command, *args,
                    stdin=to_child_r, stdout=from_child_w, stderr=self._log_fd, start_new_session=True,
                    env=browser_env(self.profile, os.environ))
        except OSError as exc:
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
                os.close(fd)
            raise BrowserUnavailable(f"cannot run {path}: {exc.strerror or exc} ({INSTALL_HINT})") from None
        os.close(to_child_r)
        os.close(from_child_w)
        self.conn = await CDPConnection.over_pipes(from_child_r, to_child_w)
        self.starts += 1
        # Its first answer, or its exit (a sandbox that cannot start ends it at once).
        answer = asyncio.ensure_future(self.conn.send("Browser.getVersion", timeout=self.start_timeout))
        exited = asyncio.ensure_future(self.proc.wait())
        try:
            await asyncio.wait((answer, exited), return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        detail = None
        if not answer.done():
            answer.cancel()
            detail = f"exited with status {self.proc.returncode}"
        elif answer.exception() is not None:
            detail = str(answer.exception())
        if detail is not None:
            await self.conn.close()
            await self._reap()
            self.conn = None
            raise BrowserUnavailable(start_failure(self._log(), path=path, detail=detail, who=who,
                                                   sandbox=self.sandbox, profile=self.profile))
        self.version = answer.result().get("product", "")
        return self.conn

    def kill(self) -> None:
        """SIGKILL the browser (tests: a crash on demand)."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def _reap(self) -> None:
        """End the process (and its children: it leads its own session), wait for it, and remove
        its directory in /tmp (Chromium leaves it when killed)."""
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), 0.5)
            except asyncio.TimeoutError:
                pass
        if proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await proc.wait()
        else:
            try:  # the renderers and helpers of a crashed browser
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc = None
        self._remove_singleton_dir(self.run_as)

    async def close(self) -> None:
        """Close the browser (Browser.close, then the pipe, then a kill) and remove its profile."""
        self._closing = True
        if self._starting is not None and not self._starting.done():
            try:
                await self._starting
            except BaseException:
                pass
        conn = self.conn
        if conn is not None and not conn.is_closed:
            try:
                await conn.send("Browser.close", timeout=2.0)
            except (BrowserClosed, CDPError):
                pass
            await conn.close()
        await self._reap()
        self.conn = None
        self._close_log()
        shutil.rmtree(self.profile, ignore_errors=True)
