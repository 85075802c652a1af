"""The headless Chromium process that renders dynamic pages (issue 23).

:class:`Browser` starts Debian's ``chromium`` headless, with a profile of its
own in ``stateDir/browser`` (wiped at every start: nothing of a previous run
leaks into the next, and nothing is written outside stateDir), and talks to
it over ``--remote-debugging-pipe`` (see :mod:`larbin_py.net.cdp`).  Why a
pipe and not a DevTools port on 127.0.0.1: no other local process can drive
a browser it cannot reach (a port is open to every local user); no port to
pick, no race to read it from stderr; the browser's death is an end of file
at once.  (Speed does not decide: a command's round trip is the same, about
0.3-0.7 ms, over either; bench/dynamic.py measures both.)  The browser exits by itself when the pipe closes, so even a
crawler killed with SIGKILL leaves no browser behind.

The browser never reaches the network itself: every request a page makes is
intercepted and served by the crawler (:mod:`larbin_py.net.dynamic`), and
``--proxy-server`` points at a closed port so that anything interception
does not see (a WebSocket) fails instead of leaving unpoliced.

``connection()`` gives the live connection, starting the browser (again)
when there is none: a crash is noticed by the pipe's end, counted in
``crashes``, and the next page restarts it (``restarts``).  A browser that
cannot start raises :class:`BrowserUnavailable`, whose message carries the
``apt-get`` hint; the crawler exits 2 with it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal

from .cdp import BrowserClosed, CDPConnection, CDPError

__all__ = ["Browser", "BrowserUnavailable", "find_chromium", "INSTALL_HINT"]

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
)
LOG_NAME = "chromium.log"


class BrowserUnavailable(Exception):
    """Chromium is missing or would not start: one line for the user (exit 2)."""


def find_chromium(binary: str | None = None) -> str | None:
    """The path of the browser to run (``binary`` if given), or None."""
    if binary:
        return shutil.which(binary) or (binary if os.access(binary, os.X_OK) else None)
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium, (re)started on demand; see the module docstring."""

    def __init__(self, state_dir: str, *, binary: str | None = None, start_timeout: float = 30.0) -> None:
        self.profile = os.path.join(state_dir, "browser")
        self.binary = binary
        self.start_timeout = start_timeout
        self.proc: asyncio.subprocess.Process | None = None
        self.conn: CDPConnection | None = None
        self.version = ""
        self.starts = 0
        self.crashes = 0
        self._starting: asyncio.Future | None = None
        self._closing = False

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

    async def _start(self) -> CDPConnection:
        if self.conn is not None:  # the previous one died
            self.crashes += 1
            await self._reap()
        path = find_chromium(self.binary)
        if path is None:
            raise BrowserUnavailable(f"dynamicPages needs Chromium, which is not installed "
                                     f"(no {' / '.join(CANDIDATES)} on PATH): {INSTALL_HINT}")
        shutil.rmtree(self.profile, ignore_errors=True)
        os.makedirs(self.profile, exist_ok=True)
        args = [*FLAGS, f"--user-data-dir={self.profile}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox
        args.append("about:blank")
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # The browser wants its commands on fd 3 and writes on fd 4: the pipes come
        # in as the shell's stdin and stdout, which renumbers them and execs it (no
        # preexec_fn: the crawler has threads; dash redirects only fds 0-9).
        script = 'exec "$@" 3<&0 4>&1 0</dev/null 1>&2'
        log = open(os.path.join(self.profile, LOG_NAME), "wb")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", script, "sh", path, *args,
                stdin=to_child_r, stdout=from_child_w, stderr=log, start_new_session=True)
        except OSError as exc:
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
                os.close(fd)
            raise BrowserUnavailable(f"cannot run {path}: {exc.strerror or exc} ({INSTALL_HINT})") from None
        finally:
            log.close()
        os.close(to_child_r)
        os.close(from_child_w)
        self.conn = await CDPConnection.over_pipes(from_child_r, to_child_w)
        self.starts += 1
        try:
            got = await self.conn.send("Browser.getVersion", timeout=self.start_timeout)
        except (BrowserClosed, CDPError) as exc:
            detail = self._log_tail()
            await self._reap()
            self.conn = None
            raise BrowserUnavailable(f"{path} did not start ({exc}){': ' + detail if detail else ''} "
                                     f"-- is it a working Chromium? {INSTALL_HINT}") from None
        self.version = got.get("product", "")
        return self.conn

    def _log_tail(self) -> str:
        """The browser's last error line (its log in the profile), for the user."""
        try:
            with open(os.path.join(self.profile, LOG_NAME), "rb") as f:
                lines = [ln for ln in f.read()[-8192:].decode("utf-8", "replace").splitlines()
                         if ln.strip() and "dbus" not in ln]
        except OSError:
            return ""
        return lines[-1].strip()[:200] if lines else ""

    def kill(self) -> None:
        """SIGKILL the browser (tests: a crash on demand)."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def _reap(self) -> None:
        """End the process (and its children: it leads its own session) and wait for it."""
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
        shutil.rmtree(self.profile, ignore_errors=True)
