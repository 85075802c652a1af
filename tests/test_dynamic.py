"""Dynamic pages, the fetcher level: rules, the browser process, rendering against the sim.

Real Chromium (``require_service``), the sim's JavaScript host
(``SimConfig(dynamic=True)``, larbin_py.sim.dynamic) and the crawler's own
HTTP fetcher.  The sub-request gate here is a small one that admits the
page's host only (the frontier's gate, with robots.txt and politeness, is
exercised by the crawls of tests/test_dynamic_crawl.py).

The tests run as root here, so the root path is the one exercised: Chromium
runs as ``nobody``, whose profile lives in ``work_dir`` (pytest's own temp
directories are 0700 root, which nobody may not enter).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections import Counter

import pytest

from larbin_py.net import dynamic as dynamic_mod
from larbin_py.net.browser import Browser, BrowserUnavailable
from larbin_py.net.dynamic import DynamicFetcher, DynamicRules, RenderedResult, parse_rule
from larbin_py.net.http import Fetcher
from larbin_py.sim import Sim, SimConfig
from larbin_py.sim.dynamic import DYN_LINKS, JS_HOST

from conftest import require_service

LINK_RE = re.compile(rb'<a href="(/dyn/[^"]+)"')
RULES = (("re:.*/scroll\\.html", "scroll"), ("re:.*/call\\.html", "call:loadMore"), (f"http://{JS_HOST}", "none"))


def test_rules_first_match_wins_prefix_or_regex():
    rules = DynamicRules([parse_rule(["http://a.example/list", "scroll"]), parse_rule(["re:https?://b\\.example/"]),
                          parse_rule(["http://a.example/", "call:app.more"])])
    assert rules.trigger("http://a.example/list?page=2") == "scroll"
    assert rules.trigger("http://a.example/other") == "call:app.more"
    assert rules.trigger("https://b.example/x") == "none"
    assert rules.trigger("http://c.example/b.example/") is None  # re: matches from the start
    assert not DynamicRules(()) and rules
    with pytest.raises(ValueError, match="trigger must be"):
        parse_rule(["http://a/", "click"])


async def test_a_missing_browser_is_one_clear_line_with_the_install_hint(tmp_path):
    browser = Browser(str(tmp_path), binary="no-such-chromium-binary")
    with pytest.raises(BrowserUnavailable, match="apt-get install chromium"):
        await browser.connection()
    await browser.close()
    assert not (tmp_path / "browser").exists()


class SameHostGate:
    """Admits the page's own host (the sim's address) but its /private/ (which the
    host's robots.txt disallows), refuses the rest as otherHost."""

    def __init__(self, ip: str, port: int) -> None:
        self.ip, self.port = ip, port
        self.asked: list[str] = []

    async def admit(self, page_request, url: str):
        self.asked.append(url)
        if f"//{JS_HOST}:" not in url:
            return "otherHost"
        if "/private/" in url:
            return "forbiddenRobots"
        return self.ip, self.port


@pytest.mark.async_timeout(90)
async def test_rendering_finds_the_links_of_every_trigger_and_stops_the_endless_page(work_dir, monkeypatch):
    require_service("chromium", "apt-get install chromium")
    monkeypatch.setattr(dynamic_mod, "TAB_PAGES", 2)  # tabs recycled every 2 pages here
    async with Sim(SimConfig(hosts=1, extras=False, trap=False, dynamic=True)) as sim:
        ip = sim.resolve_map()[JS_HOST]
        http = Fetcher(user_agent="larbin_py-test")
        gate = SameHostGate(ip, sim.port)
        browser = Browser(str(work_dir))
        dyn = DynamicFetcher(http, browser, DynamicRules(RULES), gate, timeout=10.0, tabs=2)
        base = f"http://{JS_HOST}:{sim.port}"
        try:
            pages = ["/onload.html", "/scroll.html", "/call.html", "/xhr.html", "/refresh.html"]
            results = await asyncio.gather(*(dyn.fetch(base + p, ip, sim.port) for p in pages))
            for page, res in zip(pages, results):
                assert isinstance(res, RenderedResult) and res.error is None, (page, res.error_detail)
                assert res.render_reason == "ok" and res.rendered, (page, res.render_reason)
                assert set(LINK_RE.findall(res.body)) == {p.encode() for p in DYN_LINKS[page]}, page
                assert not LINK_RE.findall(res.static_body)  # the links exist only once scripts ran
            # the meta refresh did not take the page away (its DOM is the one saved and parsed)
            assert dyn.refused["navigation"] == 1 and b"<title>refresh</title>" in results[-1].body
            # the other host's script and the disallowed JSON were refused, never fetched
            assert dyn.refused["otherHost"] == 1 and dyn.refused["forbiddenRobots"] == 1
            assert not any(r.path.startswith("/private/") for r in sim.log.requests)
            assert not any(r.host == "other.sim.test" for r in sim.log.requests)
            assert not any(r.path.startswith("/img/") for r in sim.log.requests)  # images never fetched
            # a function the page does not have: the page as loaded, counted
            missing = await dyn.fetch(base + "/onload.html", ip, sim.port, trigger="call:noSuchThing")
            assert missing.render_reason == "noFunction" and LINK_RE.findall(missing.body)
            # the endless page: stopped at the timeout, what it rendered kept
            loop = asyncio.get_running_loop()
            dyn.timeout = 2.0
            t0 = loop.time()
            endless = await dyn.fetch(base + "/endless.html", ip, sim.port)
            took = loop.time() - t0
            assert endless.render_reason == "dynamicTimeout"
            assert LINK_RE.findall(endless.body) == [b"/dyn/endless-1.html"]
            assert 2.0 <= took < 2.0 + 3.0, took  # the DOM is read after the deadline
            assert sum(r.path == "/api/tick.json" for r in sim.log.requests) > 3
            assert dyn.counters["dynamicTimeout"] == 1 and dyn.counters["ok"] == 5
            # a page that is not HTML is handed back as fetched
            script = await dyn.fetch(base + "/app.js", ip, sim.port)
            assert not isinstance(script, RenderedResult) and script.status == 200
            assert dyn.stats["sub_requests"] == dyn.counters["subRequests"] > 0
            # tabs are recycled: never more open than dynamicConnexions (+ the browser's first blank page)
            assert dyn.counters["tabsRecycled"] >= 3
            targets = (await browser.conn.send("Target.getTargets"))["targetInfos"]
            assert len([t for t in targets if t["type"] == "page"]) <= 2 + 1
        finally:
            await dyn.close()
            await http.close()
        assert browser.pid is None and not (work_dir / "browser").exists()


@pytest.mark.async_timeout(60)
async def test_a_browser_killed_mid_render_is_a_connection_failure_then_restarted(work_dir):
    require_service("chromium", "apt-get install chromium")
    async with Sim(SimConfig(hosts=1, extras=False, trap=False, dynamic=True)) as sim:
        ip = sim.resolve_map()[JS_HOST]
        http = Fetcher(user_agent="larbin_py-test")
        browser = Browser(str(work_dir))
        dyn = DynamicFetcher(http, browser, DynamicRules(RULES), SameHostGate(ip, sim.port), timeout=20.0)
        base = f"http://{JS_HOST}:{sim.port}"
        try:
            render = asyncio.ensure_future(dyn.fetch(base + "/endless.html", ip, sim.port))
            # the page is rendering once its polling reaches the server
            await sim.log.wait_for(lambda log: any(r.path == "/api/tick.json" for r in log.requests), 15)
            first_pid = browser.pid
            browser.kill()
            res = await asyncio.wait_for(render, 10)
            assert res.error == "noConnection" and "browser crashed" in res.error_detail
            assert dyn.counters["crashes"] == 1
            again = await dyn.fetch(base + "/onload.html", ip, sim.port)
            assert again.error is None and again.render_reason == "ok" and LINK_RE.findall(again.body)
            assert browser.starts == 2 and browser.crashes == 1 and browser.pid != first_pid
        finally:
            await dyn.close()
            await http.close()


def test_metrics_show_the_dynamic_counters_only_when_dynamic_pages_are_on():
    from larbin_py.web.metrics import render_metrics

    dyn = {"pages": {"ok": 3, "dynamicTimeout": 1, "noFunction": 0, "renderFailed": 0}, "sub_requests": 7,
           "sub_refused": {"blocked": 2, "otherHost": 1}, "crashes": 1}
    text = render_metrics({"dynamic": dyn})
    assert 'larbin_dynamic_pages_total{reason="dynamicTimeout"} 1' in text
    assert "larbin_dynamic_sub_requests_total 7" in text
    assert 'larbin_dynamic_sub_refused_total{reason="otherHost"} 1' in text
    assert "larbin_dynamic_browser_crashes_total 1" in text
    assert "larbin_dynamic" not in render_metrics({"dynamic": None})


@pytest.mark.async_timeout(60)
async def test_a_script_spinning_for_ever_costs_one_timeout_and_keeps_the_fetched_page(work_dir, monkeypatch):
    require_service("chromium", "apt-get install chromium")
    monkeypatch.setattr(dynamic_mod, "READ_TIMEOUT", 1.0)  # the hung renderer's last chance, short here
    async with Sim(SimConfig(hosts=1, extras=False, trap=False, dynamic=True)) as sim:
        ip = sim.resolve_map()[JS_HOST]
        http = Fetcher(user_agent="larbin_py-test")
        browser = Browser(str(work_dir))
        dyn = DynamicFetcher(http, browser, DynamicRules(RULES), SameHostGate(ip, sim.port), timeout=10.0)
        base = f"http://{JS_HOST}:{sim.port}"
        try:
            # the browser started and a tab opened first, with time for both on a loaded machine
            # (the render's deadline bounds the tab's opening too: a start slower than it would
            # be an honest noConnection, not what this test is about)
            first = await dyn.fetch(base + "/onload.html", ip, sim.port)
            assert first.render_reason == "ok", (first.error, first.error_detail)
            # 3 s: time for the renderer to reach the endless loop even on a loaded machine (a
            # deadline that comes first is an honest dynamicTimeout: the DOM is still readable)
            dyn.timeout = 3.0
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            busy = await dyn.fetch(base + "/busy.html", ip, sim.port)
            took = loop.time() - t0
            assert busy.error is None and busy.render_reason == "renderFailed", (busy.error, busy.error_detail)
            assert busy.body == busy.static_body  # the page as fetched: nothing rendered could be read
            assert took < 3.0 + 1.0 + 2.0, took
            assert dyn.counters["tabsRecycled"] == 1  # the stuck tab was closed, not reused
            # the browser itself is fine: the next page renders in a fresh tab
            dyn.timeout = 10.0  # (a loaded machine must not turn this render into a timeout)
            ok = await dyn.fetch(base + "/onload.html", ip, sim.port)
            assert ok.render_reason == "ok" and LINK_RE.findall(ok.body) and browser.starts == 1
        finally:
            await dyn.close()
            await http.close()


# ---------------------------------------------------------------------------
# Who runs Chromium, its sandbox, what a page can reach, bounded renders


class PageSite:
    """A one-host site on 127.0.0.1: ``pages`` maps a path to its HTML; every request's path,
    query included, is kept in ``paths``.  ``/hold`` is answered ``released`` only once
    ``release`` is set: a page that asks for it keeps its render going until the test says."""

    def __init__(self, pages: dict) -> None:
        self.pages = pages
        self.paths: list[str] = []
        self.release = asyncio.Event()
        self._changed = asyncio.Event()

    async def __aenter__(self) -> "PageSite":
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def wait_for(self, predicate, timeout: float) -> None:
        """Until ``predicate(paths)`` holds (a request wakes it), at most ``timeout`` s."""
        async def until():
            while not predicate(self.paths):
                self._changed.clear()
                await self._changed.wait()
        await asyncio.wait_for(until(), timeout)

    async def _handle(self, reader, writer) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        path = head.split(b" ", 2)[1].decode("latin-1")
        self.paths.append(path)
        self._changed.set()
        if path == "/hold":
            await self.release.wait()
        body = b"released" if path == "/hold" else self.pages.get(path.split("?")[0], b"")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % len(body) + body)
        try:
            await writer.drain()
        except ConnectionError:
            pass
        writer.close()


class LoopbackGate:
    """Admits the site's own requests, refuses the rest (otherHost)."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def admit(self, page_request, url: str):
        return ("127.0.0.1", self.port) if url.startswith(f"http://127.0.0.1:{self.port}/") else "otherHost"


def renderer(site: PageSite, work_dir, **kw) -> tuple[Fetcher, DynamicFetcher]:
    http = Fetcher(user_agent="larbin_py-test")
    dyn = DynamicFetcher(http, Browser(str(work_dir)), DynamicRules([(site.base, "none")]),
                         LoopbackGate(site.port), **kw)
    return http, dyn


def browser_processes(pid: int) -> dict[int, tuple[list[int], str]]:
    """The browser's processes, read from /proc: its session (it leads one) and its descendants,
    each ``(real, effective, saved, fs uids, command line)``."""
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                stats[int(name)] = (int(fields[1]), int(fields[3]))  # parent, session
            except (OSError, ValueError, IndexError):
                continue
    mine = {p for p, (_, sid) in stats.items() if sid == pid} | {pid}
    grew = True
    while grew:  # and anything below them that left the session
        below = {p for p, (ppid, _) in stats.items() if ppid in mine} - mine
        grew = bool(below)
        mine |= below
    out = {}
    for p in mine:
        try:
            with open(f"/proc/{p}/status") as f:
                uids = next(ln for ln in f if ln.startswith("Uid:")).split()[1:]
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except (OSError, StopIteration):
            continue
        out[p] = ([int(u) for u in uids], cmdline)
    return out


#: A page whose render goes on until the test sets its site's ``release`` (a request in flight).
HOLDING = (b"<!DOCTYPE html><html><head><title>held</title></head><body><script>"
           b"fetch('/hold').then(r => r.text()).then(t => { document.title = t; });"
           b"</script></body></html>")


@pytest.mark.async_timeout(60)
async def test_chromium_never_runs_as_root_and_keeps_its_sandbox(work_dir):
    require_service("chromium", "apt-get install chromium")
    import pwd

    expected = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else os.getuid()
    async with PageSite({"/": HOLDING}) as site:
        http, dyn = renderer(site, work_dir, timeout=20.0)
        try:
            render = asyncio.ensure_future(dyn.fetch(site.base + "/", "127.0.0.1", site.port))
            await site.wait_for(lambda paths: "/hold" in paths, 15)  # a renderer runs the page's script
            procs = browser_processes(dyn.browser.pid)
            site.release.set()
            res = await asyncio.wait_for(render, 20)
        finally:
            await dyn.close()
            await http.close()
    assert res.error is None and b"<title>released</title>" in res.body
    assert len(procs) >= 3 and any("--type=renderer" in cmd for _, cmd in procs.values()), procs
    assert expected != 0
    for pid, (uids, cmd) in procs.items():  # real, effective, saved and filesystem uids
        assert uids == [expected] * 4, (pid, uids, cmd[:120])
        assert "--no-sandbox" not in cmd.split(), (pid, cmd[:200])
    assert not os.path.exists(dyn.browser.profile)  # removed at close


@pytest.mark.async_timeout(60)
async def test_the_profile_is_the_browser_users_and_the_environment_is_not_the_crawlers(work_dir, monkeypatch):
    require_service("chromium", "apt-get install chromium")
    import pwd

    monkeypatch.setenv("LARBIN_TEST_SECRET", "s3cret")
    expected = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else os.getuid()
    browser = Browser(str(work_dir))
    try:
        await browser.start()
        st = os.stat(browser.profile)
        assert (st.st_uid, st.st_mode & 0o777) == (expected, 0o700)
        log = os.stat(os.path.join(browser.profile, "chromium.log"), follow_symlinks=False)
        assert (log.st_uid, log.st_mode & 0o777) == (os.geteuid(), 0o600)
        with open(f"/proc/{browser.pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        assert b"LARBIN_TEST_SECRET" not in env and env[b"HOME"] == browser.profile.encode()
    finally:
        await browser.close()
    assert not os.path.exists(browser.profile)


@pytest.mark.skipif(os.geteuid() != 0, reason="Chromium changes user only when the crawler runs as root")
async def test_a_profile_the_browser_user_cannot_reach_is_one_line_naming_the_directory(work_dir):
    require_service("chromium", "apt-get install chromium")
    private = work_dir / "private"
    private.mkdir(mode=0o700)
    browser = Browser(str(private / "state"))
    try:
        with pytest.raises(BrowserUnavailable) as info:
            await browser.start()
    finally:
        await browser.close()
    message = str(info.value)
    assert "\n" not in message and "dynamicUser nobody cannot reach" in message
    assert f"may not enter {private} (drwx------ root)" in message and "o+x" in message


def test_dynamic_user_and_sandbox_keys_and_who_runs_chromium():
    import pwd

    from larbin_py.config import ConfigError, format_config, parse_config_text
    from larbin_py.net.browser import run_as

    c = parse_config_text("dynamicUser larbin-chromium\ndynamicSandbox off\n", require_start_urls=False)
    assert (c.dynamic_user, c.dynamic_sandbox) == ("larbin-chromium", False)
    assert parse_config_text(format_config(c), require_start_urls=False) == c
    default = parse_config_text("", require_start_urls=False)
    assert (default.dynamic_user, default.dynamic_sandbox) == ("nobody", True)
    with pytest.raises(ConfigError, match=r"larbin.conf:1: dynamicUser: expected a user name or uid"):
        parse_config_text("dynamicUser ../etc\n", filename="larbin.conf", require_start_urls=False)
    with pytest.raises(ConfigError, match=r"dynamicSandbox: is a switch"):
        parse_config_text("dynamicSandbox maybe\n", require_start_urls=False)
    # as root: the user looked up, never uid 0; not root: the crawler's own user
    assert run_as("nobody", 0).uid == pwd.getpwnam("nobody").pw_uid != 0
    assert run_as(str(pwd.getpwnam("nobody").pw_uid), 0).name == "nobody"
    assert run_as("root", 1000) is None
    for user, words in (("root", "is uid 0"), ("0", "is uid 0"), ("no-such-user-larbin", "no such user")):
        with pytest.raises(BrowserUnavailable, match=words):
            run_as(user, 0)


#: Chromium's start in a container whose seccomp profile forbids the namespaces (Docker's
#: default), as users report it.
DOCKER_SANDBOX_LOG = ("Failed to move to new namespace: PID namespaces supported, Network namespace supported, "
                      "but failed: errno = Operation not permitted\n"
                      "[1868:1868:0311/120334.394798:FATAL:zygote_host_impl_linux.cc(206)] Check failed: . : "
                      "Operation not permitted (1)")


def test_chromiums_sandbox_messages_are_recognized():
    from larbin_py.net.browser import sandbox_complaint, start_failure

    # this machine's Chromium 156 with no user namespace to make (as the test below provokes)
    debian = ("[10097:10097:1127/124645.994473:ERROR:content/browser/zygote_host/zygote_host_impl_linux.cc:130]"
              " No usable sandbox! If this is a Debian system, please install the chromium-sandbox package to "
              "solve this problem. If you want to live dangerously and need an immediate workaround, you can "
              "try using --no-sandbox.")
    dbus = ("[8359:8394:1127/124532.263296:ERROR:dbus/bus.cc:405] Failed to connect to the bus: Failed to "
            "connect to socket /run/dbus/system_bus_socket: No such file or directory")
    # a profile nobody may enter: the browser aborts, its zygote complains after it (not the sandbox)
    singleton = ("[10546:10546:1127/124703.721362:ERROR:chrome/app/chrome_main_delegate.cc:624] Failed to "
                 "create a ProcessSingleton for your profile directory. This means that running multiple "
                 "instances would start multiple browser processes rather than opening a new window in the "
                 "existing process. Aborting now to avoid profile corruption.\n"
                 "[10567:10567:0100/000000.767443:ERROR:content/zygote/zygote_linux.cc:662] write: Broken pipe (32)\n"
                 "[1:1:0100/000000.779503:ERROR:content/zygote/zygote_main_linux.cc:197] Failed sending zygote "
                 "boot message: Broken pipe (32)")
    assert sandbox_complaint(dbus + "\n" + debian) == "No usable sandbox!"
    assert sandbox_complaint(DOCKER_SANDBOX_LOG) == (
        "Failed to move to new namespace: PID namespaces supported, Network namespace supported, but failed: "
        "errno = Operation not permitted")
    assert sandbox_complaint(DOCKER_SANDBOX_LOG.split("\n")[1]) == "Check failed: . : Operation not permitted (1)"
    assert sandbox_complaint(dbus) is None and sandbox_complaint(singleton) is None
    line = start_failure(debian, path="/usr/bin/chromium", detail="exited", who=None, sandbox=True,
                         profile="/x/browser")
    assert line.startswith("Chromium's sandbox cannot start (No usable sandbox!)") and "dynamicSandbox off" in line
    # with the sandbox off the same words are not blamed on it
    assert "sandbox cannot start" not in start_failure(debian, path="/usr/bin/chromium", detail="exited",
                                                       who=None, sandbox=False, profile="/x/browser")


def test_a_profile_out_of_reach_is_named_before_chromiums_words_for_it(work_dir):
    """Chromium 150 ends a start with an unreachable profile as a container's forbidden sandbox
    does (the zygote's failed check): the directory is named, not the sandbox."""
    from larbin_py.net.browser import RunAs, start_failure

    chromium_150 = (
        "chrome_crashpad_handler: --database is required\n"
        "[16051:16051:1128/154952.575692:ERROR:third_party/crashpad/crashpad/util/file/filesystem_posix.cc:63]"
        " mkdir : No such file or directory (2)\n"
        "[16051:16051:1128/154952.613570:FATAL:content/browser/zygote_host/zygote_host_impl_linux.cc:207] "
        "Check failed: . : No such file or directory (2)")
    other = RunAs("other", os.geteuid() + 1, os.getegid() + 1)  # owns nothing here
    private = work_dir / "private"
    private.mkdir(mode=0o700)
    shut_out = str(private / "state" / "browser")
    line = start_failure(chromium_150, path="/usr/bin/chromium", detail="exited", who=other, sandbox=True,
                         profile=shut_out)
    assert line.startswith(f"dynamicUser other cannot reach Chromium's profile {shut_out}: it may not enter "
                           f"{private} (drwx------ ") and "sandbox" not in line
    # a profile within reach: the same failed check is the sandbox's, as in a container
    reachable = str(work_dir / "state" / "browser")
    assert start_failure(chromium_150.rsplit("\n", 1)[1], path="/usr/bin/chromium", detail="exited",
                         who=other, sandbox=True, profile=reachable).startswith(
        "Chromium's sandbox cannot start as other (Check failed: . : No such file or directory (2))")
    assert start_failure(DOCKER_SANDBOX_LOG, path="/usr/bin/chromium", detail="exited", who=other, sandbox=True,
                         profile=reachable).startswith("Chromium's sandbox cannot start as other (Failed to move")
    # setpriv's own failure comes first: Chromium never ran
    line = start_failure("setpriv: setresuid failed: Operation not permitted\n" + DOCKER_SANDBOX_LOG,
                         path="/usr/bin/chromium", detail="exited", who=other, sandbox=True, profile=shut_out)
    assert line.startswith("cannot run Chromium as dynamicUser other (setpriv: setresuid failed")


#: Runs its arguments in a user namespace where no further user namespace can be made (its
#: user.max_user_namespaces is 0): Chromium's sandbox then cannot start, as in a container that
#: forbids it.  As root the namespace maps every uid to itself (Chromium still runs as nobody).
NO_USER_NAMESPACES = r'''
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.geteuid(), os.getegid()
r, w = os.pipe()
r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        os.write(2, b"unshare(CLONE_NEWUSER) failed\n")
        os._exit(97)
    os.write(w, b"1")
    os.read(r2, 1)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")
    os.execvp(sys.argv[1], sys.argv[1:])
os.read(r, 1)
if uid == 0:
    maps = {"uid_map": "0 0 4294967295", "gid_map": "0 0 4294967295"}
else:
    with open(f"/proc/{pid}/setgroups", "w") as f:
        f.write("deny")
    maps = {"uid_map": f"{uid} {uid} 1", "gid_map": f"{gid} {gid} 1"}
for name, line in maps.items():
    with open(f"/proc/{pid}/{name}", "w") as f:
        f.write(line)
os.write(w2, b"1")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
'''


def test_a_sandbox_that_cannot_start_stops_the_crawl_with_exit_2_and_one_line(work_dir):
    require_service("chromium", "apt-get install chromium")
    import subprocess
    import sys

    conf = work_dir / "larbin.conf"
    conf.write_text(f"startUrl http://127.0.0.1:9/\ndynamicPages\n  http://127.0.0.1:9/\nend\n"
                    f"stateDir {work_dir}/state\nsaveDir {work_dir}/save\nhttpPort 0\n")
    done = subprocess.run([sys.executable, "-c", NO_USER_NAMESPACES, sys.executable, "-m", "larbin_py",
                           "-c", str(conf)], capture_output=True, text=True, timeout=60)
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, lines
    who = " as nobody" if os.geteuid() == 0 else ""
    assert lines[0].startswith(f"larbin_py: Chromium's sandbox cannot start{who} (No usable sandbox!): "), lines
    assert "user namespaces" in lines[0] and "dynamicSandbox off" in lines[0]
    assert not (work_dir / "state" / "browser").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="Chromium changes user only when the crawler runs as root")
def test_root_that_cannot_change_user_stops_the_crawl_with_exit_2_and_one_line(work_dir):
    require_service("chromium", "apt-get install chromium")
    import subprocess
    import sys

    conf = work_dir / "larbin.conf"
    conf.write_text(f"startUrl http://127.0.0.1:9/\ndynamicPages\n  http://127.0.0.1:9/\nend\n"
                    f"stateDir {work_dir}/state\nsaveDir {work_dir}/save\nhttpPort 0\n")
    # root, as in a container started with --cap-drop SETUID --cap-drop SETGID
    done = subprocess.run([shutil.which("setpriv"), "--bounding-set=-setuid,-setgid", "--", sys.executable, "-m",
                           "larbin_py", "-c", str(conf)], capture_output=True, text=True, timeout=60)
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("larbin_py: cannot run Chromium as dynamicUser nobody (setpriv: "), lines
    assert "without CAP_SETUID/CAP_SETGID" in lines[0]


WEBRTC = b"""<!DOCTYPE html><html><head><title>rtc</title></head><body><script>
let pending = 3;
// Keeps the render going until all is said: one request always in flight or just
// started (an interval's timer may be throttled in a background tab past the idle time).
function keep() { if (pending > 0) fetch('/tick').then(keep, keep); }
keep();
function say(x) { fetch('/log?' + encodeURIComponent(x)); --pending; }
function attempt(where, w) {
  try {
    const pc = new w.RTCPeerConnection({iceServers: [{urls: 'stun:127.0.0.1:UDP'}]});
    pc.createDataChannel('x');
    pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === 'complete') say(where + ':gathered'); };
    pc.createOffer().then(o => pc.setLocalDescription(o)).catch(e => say(where + ':failed'));
  } catch (e) { say(where + ':' + e.name); }
}
attempt('page', window);
attempt('frame', document.body.appendChild(document.createElement('iframe')).contentWindow);
try { new WebTransport('https://127.0.0.1:UDP/'); say('webtransport:made'); }
catch (e) { say('webtransport:' + e.name); }
</script></body></html>"""


@pytest.mark.async_timeout(60)
@pytest.mark.parametrize("layer", ["init script and flags", "flags alone"])
async def test_a_rendered_page_sends_nothing_to_a_stun_server(work_dir, monkeypatch, layer):
    require_service("chromium", "apt-get install chromium")
    import socket

    if layer == "flags alone":  # the APIs left in the page: Chromium's flags must stop the datagrams
        monkeypatch.setattr(dynamic_mod, "INIT_SCRIPT", "0")
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    page = WEBRTC.replace(b"UDP", str(udp.getsockname()[1]).encode())
    async with PageSite({"/": page, "/tick": b"", "/log": b""}) as site:
        http, dyn = renderer(site, work_dir, timeout=15.0)
        try:
            res = await dyn.fetch(site.base + "/", "127.0.0.1", site.port)
        finally:
            await dyn.close()
            await http.close()
    said = {p[len("/log?"):].replace("%3A", ":") for p in site.paths if p.startswith("/log?")}
    if layer == "flags alone":  # the page got as far as it could: gathering ended, with nothing gathered
        assert said == {"page:gathered", "frame:gathered", "webtransport:made"}, (said, res.render_reason)
    else:  # the APIs are gone, in the page and in a frame it makes
        assert said == {"page:TypeError", "frame:TypeError", "webtransport:ReferenceError"}, said
    received = []
    while True:  # loopback delivers at once: what the page sent before it spoke is here
        try:
            received.append(udp.recv(2048))
        except BlockingIOError:
            break
    udp.close()
    assert received == []


@pytest.mark.async_timeout(120)
async def test_renders_keep_no_page_alive_once_they_end(work_dir, monkeypatch):
    """Every render used to leave a callback on the connection's ``closed`` future holding its page
    (up to maxPageSize) until the browser died.  24 renders, counted twice (the leak kept 12, then
    24, against a tolerance of 4): a page's render costs Chromium ~150 ms of CPU (a navigation, a
    renderer process now and then), so 500 here would take a minute of a 2-core machine; the
    count of live pages must not grow at all."""
    require_service("chromium", "apt-get install chromium")
    import gc

    from larbin_py.net.http import FetchResult

    monkeypatch.setattr(dynamic_mod, "IDLE", 0.0)  # tiny pages without scripts: nothing to wait for
    monkeypatch.setattr(dynamic_mod, "TAB_PAGES", 10**6)  # no tab recycled: the renders alone

    def alive() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, FetchResult))

    page = b"<!DOCTYPE html><html><body><a href='/next'>next</a>" + b"x" * 2000 + b"</body></html>"
    async with PageSite({"/": page}) as site:
        http, dyn = renderer(site, work_dir, tabs=4, timeout=20.0)

        async def render(_i) -> str:
            res = await dyn.fetch(site.base + "/", "127.0.0.1", site.port)
            return res.render_reason if res.error is None else res.error

        try:
            await dyn.start()
            before = alive()
            reasons = Counter(await asyncio.gather(*(render(i) for i in range(12))))
            half = alive()
            reasons.update(await asyncio.gather(*(render(i) for i in range(12))))
            after = alive()
        finally:
            await dyn.close()
            await http.close()
    assert reasons == {"ok": 24}, reasons
    assert half - before <= 4 and after - before <= 4, (before, half, after)  # each page freed with its render


@pytest.mark.async_timeout(60)
async def test_a_tab_that_cannot_open_is_an_outcome_not_an_exception(work_dir):
    require_service("chromium", "apt-get install chromium")
    import signal

    async with PageSite({"/": b"<!DOCTYPE html><html><body><a href='/a'>a</a></body></html>"}) as site:
        http, dyn = renderer(site, work_dir, timeout=1.5)
        try:
            await dyn.start()
            pid = dyn.browser.pid
            os.kill(pid, signal.SIGSTOP)  # a browser that does not answer (a machine under load)
            try:
                loop = asyncio.get_running_loop()
                t0 = loop.time()
                res = await dyn.fetch(site.base + "/", "127.0.0.1", site.port)
                took = loop.time() - t0
            finally:
                os.kill(pid, signal.SIGCONT)
            assert res.error == "noConnection" and "no tab could be opened" in res.error_detail, res.error_detail
            assert res.body == res.static_body and dyn.stats["unrendered"] == {"noTab": 1}
            assert took < 1.5 + 2.0, took  # bounded by dynamicTimeout, not a fixed 10 s
            dyn.timeout = 10.0
            again = await dyn.fetch(site.base + "/", "127.0.0.1", site.port)
            assert again.error is None and again.render_reason == "ok" and dyn.browser.starts == 1
        finally:
            await dyn.close()
            await http.close()


BIG = (b"<!DOCTYPE html><html><head><title>big</title></head><body><a href='/first'>first</a>"
       b"<p id='big' hidden></p><script>"  # hidden: 150 M characters to lay out would take minutes
       b"document.getElementById('big').textContent = '\\u00e9'.repeat(150 * 1024 * 1024);</script>"
       b"</body></html>")  # 300 MB of UTF-8 once serialized


@pytest.mark.async_timeout(90)
async def test_a_300_mb_dom_comes_back_cut_and_the_render_beside_it_goes_on(work_dir):
    require_service("chromium", "apt-get install chromium")
    async with PageSite({"/big": BIG, "/held": HOLDING}) as site:
        http, dyn = renderer(site, work_dir, tabs=2, timeout=30.0, max_page_size=1_000_001)
        try:
            beside = asyncio.ensure_future(dyn.fetch(site.base + "/held", "127.0.0.1", site.port))
            await site.wait_for(lambda paths: "/hold" in paths, 20)  # it renders, and goes on until released
            big = await dyn.fetch(site.base + "/big", "127.0.0.1", site.port)
            site.release.set()
            other = await asyncio.wait_for(beside, 30)
        finally:
            await dyn.close()
            await http.close()
    assert big.error is None and big.render_reason == "ok", (big.error_detail, big.render_reason)
    assert 1_000_000 <= len(big.body) <= 1_000_001 and dyn.counters["renderTooBig"] == 1
    text = big.body.decode("utf-8")  # cut between two characters
    assert text.startswith("<!DOCTYPE html>\n<html><head><title>big</title>") and 'href="/first"' in text
    assert text.endswith("\u00e9" * 1000)
    assert other.error is None and other.render_reason == "ok" and b"<title>released</title>" in other.body
    assert dyn.browser.starts == 1 and dyn.counters["crashes"] == 0


@pytest.mark.async_timeout(60)
async def test_an_answer_over_the_message_limit_fails_only_its_own_command(work_dir, monkeypatch):
    require_service("chromium", "apt-get install chromium")
    from larbin_py.net import cdp

    monkeypatch.setattr(cdp, "MAX_MESSAGE", 1 << 20)
    browser = Browser(str(work_dir))
    try:
        conn = await browser.start()
        tid = (await conn.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        s = conn.session((await conn.send("Target.attachToTarget", {"targetId": tid, "flatten": True}))["sessionId"])
        big = s.send("Runtime.evaluate", {"expression": "'x'.repeat(3 << 20)", "returnByValue": True}, timeout=20)
        small = s.send("Runtime.evaluate", {"expression": "6 * 7", "returnByValue": True}, timeout=20)
        got = await asyncio.gather(big, small, return_exceptions=True)
        assert isinstance(got[0], cdp.CDPTooLarge) and "Runtime.evaluate" in str(got[0]), got[0]
        assert got[1]["result"]["value"] == 42
        assert not conn.is_closed and conn.oversized == 1
        assert (await conn.send("Browser.getVersion"))["product"]
    finally:
        await browser.close()


SERIALIZED = """<!DOCTYPE html><html lang="fr"><head><title>a &amp; b</title><style>p > a { color: red }</style>
</head><body><!-- a comment --><p class="x" data-v='quote " &amp; nbsp&nbsp;and <tag>'>text &lt;tag&gt; &amp;
caf\u00e9 \U0001F600&nbsp;end<br><img src="/i.png" alt=""><a href="/l?a=1&amp;b=2">link</a></p>
<template><b>inside</b></template><svg viewBox="0 0 10 10"><foreignObject><p>fo</p></foreignObject>
<circle cx="5" cy="5" r="4"></circle></svg><math><mi>x</mi></math><textarea>raw &lt; text</textarea>
<script>var s = "<b>" && 1 < 2;</script><noscript><p>ns</p></noscript><table><tr><td>c</td></tr></table>
</body></html>"""


@pytest.mark.async_timeout(60)
async def test_the_dom_serialized_in_the_page_is_its_outer_html_and_cut_between_characters(work_dir):
    require_service("chromium", "apt-get install chromium")
    browser = Browser(str(work_dir))
    try:
        conn = await browser.start()
        tid = (await conn.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        s = conn.session((await conn.send("Target.attachToTarget", {"targetId": tid, "flatten": True}))["sessionId"])

        async def value(expression):
            got = await s.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
            return got["result"]["value"]

        async def serialized(limit: int, chunk: int = 1 << 20) -> tuple[str, bool]:
            head = await value(dynamic_mod._SERIALIZE_JS % {"max": limit})
            parts, done = [], False
            while not done:
                text, done = await value(dynamic_mod._CHUNK_JS % {"chunk": chunk})
                parts.append(text)
            return "".join(parts), head["cut"]

        await s.send("Page.setDocumentContent", {"frameId": tid, "html": SERIALIZED})
        outer = ("(document.doctype ? '<!DOCTYPE ' + document.doctype.name + '>\\n' : '')"
                 " + document.documentElement.outerHTML")
        # deeper than a recursion could go (hidden: no style or layout for the renderer to work out)
        await value("let e = document.body.appendChild(document.createElement('div')); e.hidden = true;"
                    " for (let i = 0; i < 20000; i++) e = e.appendChild(document.createElement('i'));"
                    " e.textContent = 'deep'; 1")
        expected = await value(outer)
        assert await serialized(10**9) == (expected, False)
        whole = expected.encode("utf-8")
        for limit in (1, 150, 151, 152, 153, 200, len(whole) - 1):
            text, cut = await serialized(limit)
            got = text.encode("utf-8")
            assert cut and len(got) <= limit and whole.startswith(got) and len(got) > limit - 4, limit
        # a slice that would end between the two halves of a surrogate pair keeps the pair whole
        at = expected.index("\U0001F600")
        units = len(expected[:at].encode("utf-16-le")) // 2  # the pair's first code unit
        limit = len(expected[:at + 10].encode("utf-8"))
        assert await serialized(limit, chunk=units + 1) == (expected[:at + 10], True)
    finally:
        await browser.close()
