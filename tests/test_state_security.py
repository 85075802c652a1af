"""The state and its secrets, end to end: one writer per stateDir, owner-only
files, secrets shown as ``***``.

Crawls run as real processes (``python -m larbin_py``) under umask 022 (a
usual default), against the sim or a cookie-setting site served by the
test's own event loop.  A crawl that must stay alive while a second process
is refused beside it is frozen with SIGSTOP (it writes nothing meanwhile, so
what the refused process wrote, if anything, shows), then continued with
SIGCONT and checked against the sim's ground truth; a distributed crawl
(whose leases would run out if frozen) is held instead by a seed the test
answers only when it is done (:class:`GateSite`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from larbin_py import owner_only, statelock
from larbin_py.config import format_config
from larbin_py.demo import crawl_rules
from larbin_py.redact import redact_text, redact_url
from larbin_py.sim import Sim, SimConfig
from larbin_py.sim.web import DEFAULT_ROBOTS_MIX
from larbin_py.statelock import StateLocked, lock_state_dir, lock_worker

from conftest import require_service
from test_cookies import CookieSite, crawl_config
from test_dist_zygote import process_tree
from helpers.crawl import ROBOTS_PATHS, TEST_CRAWL_DELAY, make_config

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def umask_022() -> None:
    os.umask(0o022)


async def start(tmp_path: Path, name: str, *args: str) -> asyncio.subprocess.Process:
    """``python -m larbin_py ARGS`` under umask 022, its output in ``tmp_path/NAME.out``."""
    with open(tmp_path / f"{name}.out", "wb") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "larbin_py", *args, cwd=tmp_path, env=ENV, preexec_fn=umask_022,
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT)


async def finish(proc: asyncio.subprocess.Process, timeout: float) -> int:
    """The exit code; a process still running after ``timeout`` s is killed (and the test fails)."""
    try:
        return await asyncio.wait_for(proc.wait(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"process {proc.pid} still ran after {timeout} s") from None


async def refused(tmp_path: Path, name: str, *args: str) -> str:
    """Run a process that must be refused at once: its one line (exit 2 asserted)."""
    proc = await start(tmp_path, name, *args)
    code = await finish(proc, 30)
    text = (tmp_path / f"{name}.out").read_text()
    assert code == 2, text[-3000:]
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


async def until(predicate, timeout: float = 60.0, what: str = "") -> None:
    """Wait for ``predicate()`` to hold (checked every 10 ms), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        await asyncio.sleep(0.01)


def stopped(pid: int) -> bool:
    """Every thread of ``pid`` stopped (SIGSTOP taken: it writes nothing until SIGCONT)."""
    try:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
    except FileNotFoundError:
        return False
    return bool(states) and all(s in ("T", "t") for s in states)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and folder under ``root`` (itself too): inode, mode, size, mtime, ctime."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for path in [dirpath, *(os.path.join(dirpath, n) for n in filenames)]:
            st = os.lstat(path)
            found[os.path.relpath(path, root)] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns,
                                                  st.st_ctime_ns)
    return found


def not_private(root: Path) -> list[str]:
    """What under ``root`` (itself too) is not a 0600 file or a 0700 folder."""
    bad = []
    for dirpath, dirnames, filenames in os.walk(root):
        for path in [dirpath, *(os.path.join(dirpath, n) for n in filenames)]:
            st = os.lstat(path)
            want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            if not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode):
                want = stat.S_IMODE(st.st_mode) & 0o700  # a socket: owner bits only
            if stat.S_IMODE(st.st_mode) != want:
                bad.append(f"{os.path.relpath(path, root)} {stat.S_IMODE(st.st_mode):04o}")
    return bad


def fds_to(pid: int, folder: Path) -> set[str]:
    """The names of the files in ``folder`` that process ``pid`` holds open."""
    names = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if os.path.dirname(target) == str(folder):
            names.add(os.path.basename(target))
    return names


#: Robots profiles but those that make a crawl wait (a timeout is 30 s here, see below; a Crawl-delay).
ROBOTS_MIX = {k: v for k, v in DEFAULT_ROBOTS_MIX.items() if k not in ("error", "timeout", "delay")}


def sim_config(seed: int, hosts: int = 20) -> SimConfig:
    """A small sim.  The crawls here run with 30 s timeouts, so that a SIGSTOP of
    a few seconds times nothing out."""
    return SimConfig(seed=seed, hosts=hosts, pages_per_host=(3, 8), hosts_per_ip=4, dns=True,
                     robots_agent="larbin_py", trap=False, extras=False, robots_mix=ROBOTS_MIX,
                     crawl_delay=TEST_CRAWL_DELAY)


def page_requests(sim) -> list[str]:
    return [r.url for r in sim.log.requests if r.path not in ROBOTS_PATHS]


def write_conf(tmp_path: Path, config, name: str = "larbin.conf") -> str:
    path = tmp_path / name
    path.write_text(format_config(config))
    return str(path)


# ---------------------------------------------------------------- owner-only state


@pytest.mark.async_timeout(120)
async def test_a_crawl_under_umask_022_keeps_its_state_owner_only_and_its_pages_as_before(tmp_path):
    """Cookies, an httpToken, the analysis spool, a mirror: every file under
    stateDir 0600 and every folder 0700 (stateDir made 0755 beforehand too),
    while saveDir keeps 0644 / 0755.  The analyzer waits for a file the test
    makes, so the spool is looked at while it holds the pages."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o755)  # made by hand, or by an older version
    gate = tmp_path / "gate.sh"
    gate.write_text(f'while [ ! -e "{tmp_path}/go" ]; do sleep 0.01; done\n')
    log: list = []
    async with CookieSite("127.0.0.1", "a", log) as site:
        config = crawl_config(tmp_path, [site.url], output_mode="mirror", http_port=free_port(),
                              http_token="s3cretTOKEN-1", analysis_workers=1, checkpoint_interval=0.2,
                              analyzers=(("gate", "urls=/next$", "exec", "sh", str(gate)),))
        proc = await start(tmp_path, "crawl", "-c", write_conf(tmp_path, config))

        def spooled() -> bool:  # /next fetched and waiting at the gate: its body in the spool
            return (any(path == "/next" for _ip, path, _c in log) and (state / "cookies.json").exists()
                    and (state / "analysis").is_dir()
                    and any(n.startswith("bodies-") for n in os.listdir(state / "analysis")))
        try:
            await until(spooled, 60, "/next fetched, the jar saved, the analysis queued")
            proc.send_signal(signal.SIGSTOP)
            await until(lambda: stopped(proc.pid), 10, "the crawl stopped")
            spool = os.listdir(state / "analysis")
            assert any(n.startswith("bodies-") for n in spool) and any(n.startswith("queue-") for n in spool)
            assert not_private(state) == []
        finally:
            proc.send_signal(signal.SIGCONT)
            (tmp_path / "go").touch()
        code = await finish(proc, 90)
    out = (tmp_path / "crawl.out").read_text()
    assert code == 0, out[-3000:]
    assert ("127.0.0.1", "/next", "a=1; gone=1") in log  # the jar was used
    names = set(os.listdir(state))
    assert {"cookies.json", "checkpoint.json", "seen.log", "robots.log", "frontier"} <= names, names
    assert any(n.startswith("journal-") for n in names) and any(n.startswith("carry-") for n in names), names
    assert not_private(state) == []
    save = tmp_path / "save"
    pages = [p for p in save.rglob("*") if p.is_file()]
    assert len(pages) >= 3
    assert {stat.S_IMODE(p.stat().st_mode) for p in pages} == {0o644}
    assert {stat.S_IMODE(p.stat().st_mode) for p in save.rglob("*") if p.is_dir()} | \
        {stat.S_IMODE(save.stat().st_mode)} == {0o755}


def test_owner_only_files_lose_the_bits_an_older_version_left(tmp_path):
    """A log or a temporary file found 0644 (an older version's, a crash's) is
    made 0600 when a writer opens it; nested folders are all 0700."""
    old = tmp_path / "seen.log"
    old.write_bytes(b"x")
    old.chmod(0o644)
    os.close(owner_only.opener(str(old), os.O_WRONLY | os.O_APPEND))
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    owner_only.makedirs(str(tmp_path / "frontier" / "main"))
    assert stat.S_IMODE((tmp_path / "frontier").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "frontier" / "main").stat().st_mode) == 0o700


def test_a_shared_sticky_folder_is_not_chmodded(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with lock_state_dir(str(shared), "crawl") as lock:
        assert "sticky" in lock.warning
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


# ---------------------------------------------------------------- one writer per stateDir


def test_analyze_is_refused_beside_a_crawl_and_its_alerts_are_owner_only(tmp_path, capsys):
    from larbin_py.cli import main

    from test_analysis_cli import saved_crawl

    script = tmp_path / "check.py"
    script.write_text("import sys\nsys.exit(0 if sys.argv[1].endswith(('p1', 'p2', 'p3', 'p4', 'p5')) else 4)\n")
    config, conf = saved_crawl(tmp_path, "mirror",
                               analyzers=(("check", "exec", sys.executable, str(script), "{url}"),))
    state = tmp_path / "state"
    with lock_state_dir(str(state), "crawl"):
        before = snapshot(state)
        assert main(["analyze", "-c", conf]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"is in use by process {os.getpid()} (crawl, since " in err, err
        assert snapshot(state) == before
    assert main(["analyze", "-c", conf]) == 1  # one page fails for good: an alert
    assert stat.S_IMODE((state / "alerts.log").stat().st_mode) == 0o600
    assert not_private(state) == []


@pytest.mark.slow
@pytest.mark.async_timeout(240)
async def test_a_second_start_or_reload_beside_a_running_crawl_is_refused_and_writes_nothing(tmp_path):
    async with Sim(sim_config(41)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.1, pages_connexions=20,
                             timeout_page=30.0, connect_timeout=30.0)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        first = await start(tmp_path, "first", "-c", conf)
        await sim.log.wait_for(lambda log: len(page_requests(sim)) >= len(truth.must_request) // 3, timeout=120)
        first.send_signal(signal.SIGSTOP)
        try:
            await until(lambda: stopped(first.pid), 10, "the crawl stopped")
            state = tmp_path / "state"
            before = snapshot(state)
            for name, args in (("reload", ("--reload",)), ("plain", ())):
                line = await refused(tmp_path, name, "-c", conf, *args)
                assert f"is in use by process {first.pid} (crawl, since " in line, line
            assert snapshot(state) == before  # nothing created, modified or removed
        finally:
            first.send_signal(signal.SIGCONT)
        code = await finish(first, 180)
        assert code == 0, (tmp_path / "first.out").read_text()[-3000:]
        fetched = page_requests(sim)
        assert set(fetched) == truth.must_request and len(fetched) == len(set(fetched))
    assert not (tmp_path / "state" / "lock").exists()  # released at the end


@pytest.mark.slow
@pytest.mark.async_timeout(240)
async def test_after_a_sigkill_reload_takes_the_lock_and_holds_it_against_a_plain_start(tmp_path):
    async with Sim(sim_config(42)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.1, pages_connexions=20,
                             checkpoint_interval=0.5, timeout_page=30.0, connect_timeout=30.0)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        lock = tmp_path / "state" / "lock"
        killed = await start(tmp_path, "killed", "-c", conf)
        await sim.log.wait_for(lambda log: len(page_requests(sim)) >= len(truth.must_request) // 3, timeout=120)
        killed.kill()
        assert await killed.wait() == -signal.SIGKILL
        assert json.loads(lock.read_text())["pid"] == killed.pid  # its line stays; its flock went with it
        reload = await start(tmp_path, "reload", "-c", conf, "--reload")
        await until(lambda: statelock.read_holder(str(lock)).get("pid") == reload.pid, 30, "the reload's lock")
        reload.send_signal(signal.SIGSTOP)
        try:
            await until(lambda: stopped(reload.pid), 10, "the reload stopped")
            line = await refused(tmp_path, "plain", "-c", conf)
            assert f"is in use by process {reload.pid} (crawl, since " in line, line
        finally:
            reload.send_signal(signal.SIGCONT)
        code = await finish(reload, 180)
        out = (tmp_path / "reload.out").read_text()
        assert code == 0 and "continuing the crawl saved in" in out, out[-3000:]
        assert set(page_requests(sim)) == truth.must_request
    assert not lock.exists()


FORKER = r"""
import os, sys
from larbin_py.statelock import lock_state_dir
lock = lock_state_dir(sys.argv[1], "crawl")
child = os.fork()
if child == 0:
    held = sorted(os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{fd}"))
    os.write(1, f"child {os.getpid()} {lock.held} {any(p.endswith('/lock') for p in held)}\n".encode())
    sys.stdin.read()  # until the test closes its end
    lock.release()  # an inherited lock: a no-op
    os._exit(0)
os.write(1, f"parent {os.getpid()}\n".encode())  # one write each: the two lines never mix
sys.stdin.read()
"""


@pytest.mark.async_timeout(60)
async def test_a_forked_child_does_not_keep_its_parents_lock(tmp_path):
    """The zygote's case: a child forked after the lock holds no fd on it, so a
    killed parent's lock is free at once although the child lives on."""
    state = tmp_path / "state"
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", FORKER, str(state), env=ENV,
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    lines = {}
    for _ in range(2):
        who, pid, *rest = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().split()
        lines[who] = (int(pid), rest)
    child, (held, has_fd) = lines["child"][0], lines["child"][1]
    assert (held, has_fd) == ("False", "False")
    with pytest.raises(StateLocked) as refusal:
        lock_state_dir(str(state), "crawl")
    assert refusal.value.holder["pid"] == proc.pid and f"process {proc.pid} (crawl" in str(refusal.value)
    proc.kill()
    await proc.wait()
    os.kill(child, 0)  # the child still runs
    with lock_state_dir(str(state), "crawl") as lock:
        assert lock.held and statelock.read_holder(lock.path)["pid"] == os.getpid()
    proc.stdin.close()  # the child's stdin too: it ends
    await until(lambda: ended(child), 30, "the child's end")


def ended(pid: int) -> bool:
    """Process ``pid`` is gone, or a zombie (its new parent reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_the_lock_is_per_open_file_and_leaves_no_trace(tmp_path):
    """Two acquisitions in one process exclude each other (flock, not fcntl:
    per open file); the release removes the file and the folder it made."""
    state = tmp_path / "new" / "state"
    first = lock_state_dir(str(state), "crawl")
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "lock").stat().st_mode) == 0o600
    with pytest.raises(StateLocked, match=rf"in use by process {os.getpid()} \(crawl, since "):
        lock_state_dir(str(state), "analyze")
    worker = lock_worker(str(state), "w1")  # its own file: the stateDir lock does not block it
    with pytest.raises(StateLocked, match=r"workerId w1 is in use there by process \d+ \(worker w1, since "):
        lock_worker(str(state), "w1")
    worker.release()
    first.release()
    first.release()  # idempotent
    assert not state.exists() and (tmp_path / "new").exists()


def test_a_holder_ending_while_another_opens_its_file_is_not_a_double_lock(tmp_path, monkeypatch):
    """The race of the release: B opens the lock file, A releases (removes it),
    B's flock then succeeds on a file nobody can find.  B must start over on
    the file at the path, so that a third process is excluded by B."""
    state = str(tmp_path / "state")
    a = lock_state_dir(state, "crawl")
    real = owner_only.opener
    calls = []

    def racing_opener(path, flags):
        fd = real(path, flags)
        calls.append(path)
        if len(calls) == 1:
            a.release()  # A ends between B's open and B's flock
        return fd
    monkeypatch.setattr(statelock.owner_only, "opener", racing_opener)
    b = lock_state_dir(state, "crawl")
    monkeypatch.undo()
    assert len(calls) == 2
    assert os.path.samestat(os.fstat(b._fd), os.stat(b.path))
    with pytest.raises(StateLocked):
        lock_state_dir(state, "crawl")
    b.release()


class GateSite:
    """A site on 127.0.0.1 whose ``/`` is answered only once :attr:`release` is
    set (its robots.txt is a 404): a crawl that has it as a seed cannot end
    before.  :attr:`arrived` is set when its ``/`` is asked for."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def __aenter__(self) -> "GateSite":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/"
        return self

    async def __aexit__(self, *exc) -> None:
        self.release.set()
        self.server.close()

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.split(b" ", 2)[1] == b"/robots.txt":
                    status, body = b"404 Not Found", b""
                else:
                    self.arrived.set()
                    await self.release.wait()
                    status, body = b"200 OK", b"<html>the gate</html>"
                writer.write(b"HTTP/1.1 %s\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
                             % (status, len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.mark.slow
@pytest.mark.async_timeout(240)
async def test_a_launcher_holds_stateDir_its_workers_their_own_part_and_launcher_conf_keeps_no_token(tmp_path):
    """``--workers 2`` (a private redis-server, an httpToken), under umask 022:
    a second launcher and a second worker w1 are refused naming the holders;
    the zygote and the workers hold no fd on the launcher's lock; the crawl
    then ends exactly; launcher.conf is 0600 without the token, every file
    under stateDir (the redis folder too) 0600.  A seed held by the test
    (:class:`GateSite`) keeps the crawl running meanwhile."""
    require_service("redis-server", "apt-get install redis-server")
    from helpers.distributed import worker_config

    async with Sim(sim_config(43, hosts=12)) as sim, GateSite() as gate:
        config = worker_config(tmp_path, sim, "auto", "", timeout_page=60.0, http_port=free_port(),
                               http_token="s3cretTOKEN-2")
        truth = sim.truth(crawl_rules(config, sim.seeds))
        config = config.replace(start_urls=config.start_urls + (gate.url,))
        conf = write_conf(tmp_path, config, "launch.conf")
        state = tmp_path / "state"
        launcher = await start(tmp_path, "launcher", "-c", conf, "--workers", "2")
        workers: dict[str, int] = {}

        def up() -> bool:
            tree = process_tree(launcher.pid)
            workers.update({comm.split()[1]: pid for pid, (_pp, comm) in tree.items() if comm.startswith("larbin w")})
            return len(workers) == 2 and all((state / f"{w}.lock").exists() for w in workers)
        try:
            await asyncio.wait_for(gate.arrived.wait(), 60)
            await until(up, 30, "two workers holding their locks")
            tree = process_tree(launcher.pid)
            assert fds_to(launcher.pid, state) >= {"lock"}
            for pid, (_ppid, comm) in tree.items():
                held = fds_to(pid, state) & ({"lock"} | {f"{w}.lock" for w in workers})
                expected = {f"{comm.split()[1]}.lock"} if comm.startswith("larbin w") else set()
                assert held == expected, (comm, held)
            for name, args in (("second", ()), ("second-reload", ("--reload",))):
                line = await refused(tmp_path, name, "-c", conf, "--workers", "2", *args)
                assert f"is in use by process {launcher.pid} (launcher, since " in line, line
            scratch = os.lstat(state / "w1").st_ino
            line = await refused(tmp_path, "twin", "-c", str(state / "launcher.conf"), "--worker", "--worker-id", "w1")
            assert f"workerId w1 is in use there by process {workers['w1']} (worker w1, since " in line, line
            assert os.lstat(state / "w1").st_ino == scratch  # its scratch folder not emptied and made again
            assert launcher.returncode is None  # (the gate held the crawl: all the above was beside it)
        finally:
            gate.release.set()
        code = await finish(launcher, 180)
        out = (tmp_path / "launcher.out").read_text()
        assert code == 0, out[-3000:]
        assert set(page_requests(sim)) == truth.must_request
    text = (state / "launcher.conf").read_text()
    assert "s3cretTOKEN" not in text and "httpToken (not set)" in text
    assert "s3cretTOKEN" not in out
    assert stat.S_IMODE((state / "launcher.conf").stat().st_mode) == 0o600
    assert os.listdir(state / "redis"), "the private redis-server wrote its files"
    assert not_private(state) == []
    assert not any(name.endswith(".lock") or name == "lock" for name in os.listdir(state))


# ---------------------------------------------------------------- secrets shown as ***


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "larbin_py", *args], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("line", [
    "redisUrl redis://:s3cret@host:1/x/y",
    "redisUrl redis+sentinel://:s3cret@host:99999/mymaster",  # (a port out of range)
    "redisUrl redis://user:s3cret@host:99999/0",
    "proxy http://u:s3cret@h:0",  # a port out of range
    "proxy https://u:s3cret@h:1",  # not an http proxy
    "proxy http://u:s3cret@h:1/path",
    "proxy u:s3cret@h 1",
    "httpToken two-s3cret words",
    "httpToken s3cret\x01token",
    "waitDuration redis://u:s3cret@h/0",
])
def test_a_refused_value_never_shows_its_secret(tmp_path, line):
    conf = tmp_path / "larbin.conf"
    conf.write_text(f"startUrl http://127.0.0.1:1/\n{line}\n")
    for args in (("-c", str(conf)), ("analyze", "-c", str(conf))):
        proc = cli(tmp_path, *args)
        assert proc.returncode == 2, proc.stderr
        assert "s3cret" not in proc.stderr and "***" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and f"larbin.conf:2: {line.split()[0]}: " in proc.stderr


def test_print_config_shows_every_secret_as_stars(tmp_path):
    conf = tmp_path / "larbin.conf"
    conf.write_text("startUrl http://u:s3cret@127.0.0.1:1/\nredisUrl redis://admin:s3cret@127.0.0.1:6379/2\n"
                    "httpToken s3cretTOKEN\nzkAuth digest crawler:s3cretZKpw\n")
    proc = cli(tmp_path, "-c", str(conf), "--print-config")
    assert proc.returncode == 0, proc.stderr
    assert "s3cret" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert "redisUrl redis://admin:***@127.0.0.1:6379/2" in lines
    assert "zkAuth digest crawler:***" in lines
    assert "httpToken ***" in lines and "startUrl http://u:***@127.0.0.1:1/" in lines
    bad_set = cli(tmp_path, "--set", "redis://:s3cret@h:1/0", "--print-config")  # no KEY=: echoed, hidden
    assert bad_set.returncode == 2 and "s3cret" not in bad_set.stderr and "redis://:***@h:1/0" in bad_set.stderr


def test_an_unreachable_redis_is_named_without_its_password(tmp_path):
    """A password with an unencoded '@': the whole userinfo is hidden, not up to its first '@'."""
    conf = tmp_path / "larbin.conf"
    conf.write_text(f"startUrl http://127.0.0.1:1/\nredisUrl redis://u:pa@s3cret@127.0.0.1:{free_port()}/0\n")
    proc = cli(tmp_path, "-c", str(conf), "--workers", "2")
    assert proc.returncode == 2, proc.stderr
    assert "s3cret" not in proc.stderr and f"redis://u:***@127.0.0.1:" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value, shown", [
    ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
    ("redis://user:s3cret@h/0", "redis://user:***@h/0"),
    ("redis://s3cret@h/0", "redis://***@h/0"),  # no ':': it may be the password, hidden whole
    ("redis://u:p@s3cret@h/0", "redis://u:***@h/0"),
    ("redis://:pa/s3cret@h/0", "redis://:***@h/0"),  # an unencoded '/': hidden all the same
    ("redis://h:6379/0?password=s3cret&db=1", "redis://h:6379/0?password=***&db=1"),
    ("u:s3cret@proxy.example", "u:***@proxy.example"),
    ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ("redis://h:6379/0?author=me", "redis://h:6379/0?author=me"),
])
def test_redact_url(value, shown):
    assert redact_url(value) == shown


def test_redact_text_hides_urls_userinfo_and_keeps_the_rest():
    text = ("got 'http://u:s3cret@h:1/' from demo@localhost.invalid, see http://a.example/#top "
            "and rediss://tok@h/0?x=1&access_token=s3cret")
    assert redact_text(text) == ("got 'http://u:***@h:1/' from demo@localhost.invalid, see http://a.example/#top "
                                 "and rediss://***@h/0?x=1&access_token=***")
