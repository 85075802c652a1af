"""The command line: exit codes, one-line errors, and the wiring to the engine.

Subprocess tests run ``python -m larbin_py`` for real; the in-process tests
replace ``larbin_py.engine`` by a fake module so that they test the wiring
(which config and flags reach ``crawl_main``) without running a crawl.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import larbin_py
from larbin_py import __main__ as entry
from larbin_py import cli
from larbin_py.cli import main
from larbin_py.config import ConfigError, parse_config_text

ROOT = Path(__file__).resolve().parent.parent
SEED = "startUrl http://a.example/\n"


def run(*args: str, cwd: Path, script: str | None = None, preexec=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "larbin_py", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
                          preexec_fn=preexec)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# ---------------------------------------------------------------- subprocess


def test_version(tmp_path):
    proc = run("--version", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"larbin_py {larbin_py.__version__}"


def test_help(tmp_path):
    proc = run("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for option in ("--config", "--reload", "--demo", "--seed", "--set", "--version"):
        assert option in proc.stdout


def test_unknown_key_exits_2_with_file_line_key(tmp_path):
    conf = tmp_path / "my.conf"
    conf.write_text(SEED + "# two\nwaitDuraton 3\n")
    line = one_line_error(run("-c", str(conf), cwd=tmp_path))
    assert line.endswith(f"{conf}:3: waitDuraton: unknown key (did you mean waitDuration?)")


def test_missing_default_file_exits_2(tmp_path):
    line = one_line_error(run(cwd=tmp_path))
    assert line.endswith("larbin.conf: cannot read: No such file or directory")


def test_no_start_url_exits_2(tmp_path):
    (tmp_path / "larbin.conf").write_text("waitDuration 3\n")
    line = one_line_error(run(cwd=tmp_path))
    assert line.endswith("larbin.conf: startUrl: no start URL (add a 'startUrl URL' line, or pass --seed URL)")


def test_bad_set_exits_2(tmp_path):
    (tmp_path / "larbin.conf").write_text(SEED)
    line = one_line_error(run("--set", "waitDuration=1", "--set", "waitDuration=-1", cwd=tmp_path))
    assert line.endswith("--set:2: waitDuration: expected a number of seconds in [0, 3600], got '-1'")
    line = one_line_error(run("--set", "novalue", cwd=tmp_path))
    assert "expected KEY=VALUE, got 'novalue'" in line


def test_unknown_option_exits_2_on_one_line(tmp_path):
    line = one_line_error(run("--frobnicate", cwd=tmp_path))
    assert "--frobnicate" in line and "--help" in line


def test_print_config_of_the_shipped_file(tmp_path):
    proc = run("-c", str(ROOT / "larbin.conf"), "--print-config", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    config = parse_config_text(proc.stdout, require_start_urls=False)
    assert config.output_mode == "mirror" and config.http_port == 8081


SIGINT_SCRIPT = """
import signal, sys, threading, time
import larbin_py.cli as cli
def crawl_main(config, *, reload=False, demo=False, **kw):
    # to this thread: os.kill(getpid()) may land on another thread (pycares keeps one),
    # whose flag the main thread can miss just before a signal.pause() that then never ends
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    while True:  # a crawl under way; the KeyboardInterrupt arrives from the handler
        time.sleep(0.05)
cli.crawl_main = crawl_main
from larbin_py.__main__ import main
raise SystemExit(main(sys.argv[1:]))
"""


def _foreground() -> None:
    """(A child, before exec.) SIGINT as a shell's foreground job has it: a test run started
    in the background (``&`` in a script) has it ignored, and the crawl rightly keeps it so."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_during_the_crawl_exits_130(tmp_path):
    (tmp_path / "larbin.conf").write_text(SEED)
    proc = run(cwd=tmp_path, script=SIGINT_SCRIPT, preexec=_foreground)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "larbin: interrupted"


def test_a_crawl_started_with_sigint_blocked_still_hears_it(tmp_path):
    """A parent that held SIGINT blocked across its fork: the crawl unblocks it at its start."""
    import signal
    (tmp_path / "larbin.conf").write_text(SEED)
    proc = run(cwd=tmp_path, script=SIGINT_SCRIPT,
               preexec=lambda: (_foreground(), signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})))
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "larbin: interrupted"


# ---------------------------------------------------------------- in-process, fake engine


class FakeEngine:
    def __init__(self, result=0, exc: BaseException | None = None):
        self.calls: list[tuple] = []
        self.result, self.exc = result, exc

    def crawl_main(self, config, *, reload=False, demo=False, recrawl=False):
        self.calls.append((config, reload, demo))
        self.recrawl = recrawl
        if self.exc is not None:
            raise self.exc
        return self.result


@pytest.fixture
def fake_engine(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)

    def install(**kw) -> FakeEngine:
        fake = FakeEngine(**kw)
        monkeypatch.setattr(cli, "crawl_main", fake.crawl_main)
        return fake

    return install


def test_recrawl_reaches_crawl_main_or_the_launcher_and_excludes_reload_demo_and_a_shared_redis(
        fake_engine, tmp_path, capsys, monkeypatch):
    fake = fake_engine(result=0)
    conf = tmp_path / "c.conf"
    conf.write_text("stateDir st\n")  # a recrawl needs no start URL: the last crawl's are in stateDir
    assert main(["-c", str(conf), "--recrawl"]) == 0 and fake.recrawl is True
    from larbin_py.distributed import launcher

    launched = []
    monkeypatch.setattr(launcher, "launch_main", lambda config, n, **kw: launched.append((n, kw["recrawl"])) or 0)
    assert main(["-c", str(conf), "--recrawl", "--workers", "2"]) == 0 and launched == [(2, True)]
    shared = tmp_path / "shared.conf"
    shared.write_text("stateDir st\nredisUrl redis://127.0.0.1:1/0\n")
    for conf_path, extra, why in ((conf, ["--reload"], "exclude each other"), (conf, ["--demo"], "--demo"),
                                  (conf, ["--worker"], "--worker"), (shared, ["--workers", "2"], "shared")):
        assert main(["-c", str(conf_path), "--recrawl", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err, err
    assert len(fake.calls) == 1 and len(launched) == 1


def test_entry_point_is_the_cli_main():
    assert entry.main is main


def test_config_and_flags_reach_crawl_main(fake_engine, tmp_path):
    fake = fake_engine(result=0)
    conf = tmp_path / "c.conf"
    conf.write_text(SEED + "waitDuration 5\n")
    code = main(["-c", str(conf), "--set", "waitDuration=0.25", "--set", "outputMode=4",
                 "--seed", "https://b.example/"])
    assert code == 0
    [(config, reload, demo)] = fake.calls
    assert (reload, demo) == (False, False)
    assert config.wait_duration == 0.25 and config.output_mode == "warc"
    assert config.start_urls == ("http://a.example/", "https://b.example/")
    assert config.source == str(conf)


def test_crawl_failure_gives_1(fake_engine):
    fake = fake_engine(result=1)
    Path("larbin.conf").write_text(SEED)
    assert main([]) == 1 and len(fake.calls) == 1


def test_keyboard_interrupt_gives_130(fake_engine, capsys):
    fake_engine(exc=KeyboardInterrupt())
    Path("larbin.conf").write_text(SEED)
    assert main([]) == 130
    assert capsys.readouterr().err.strip() == "larbin: interrupted"


def test_engine_crash_gives_1_with_the_traceback(fake_engine, capsys):
    fake_engine(exc=RuntimeError("boom"))
    Path("larbin.conf").write_text(SEED)
    assert main([]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and "internal error" in err


def test_config_error_from_the_engine_gives_2(fake_engine, capsys):
    fake_engine(exc=ConfigError("larbin.conf", None, "stateDir", "in use by another crawl"))
    Path("larbin.conf").write_text(SEED)
    assert main([]) == 2
    assert capsys.readouterr().err.strip() == "larbin: larbin.conf: stateDir: in use by another crawl"


def test_demo_without_a_file_uses_the_builtin_config(fake_engine):
    fake = fake_engine()
    assert main(["--demo", "--set", "waitDuration=0"]) == 0
    [(config, reload, demo)] = fake.calls
    assert demo and not reload
    assert config.source == "<demo>" and config.start_urls == () and config.wait_duration == 0.0


def test_demo_with_the_local_file_uses_it(fake_engine):
    fake = fake_engine()
    Path("larbin.conf").write_text("waitDuration 7\n")
    assert main(["--demo"]) == 0
    assert fake.calls[0][0].wait_duration == 7.0 and fake.calls[0][2] is True


def test_demo_with_an_explicit_missing_file_is_an_error(fake_engine, capsys):
    fake = fake_engine()
    assert main(["--demo", "-c", "absent.conf"]) == 2
    assert fake.calls == []
    assert capsys.readouterr().err.strip() == "larbin: absent.conf: cannot read: No such file or directory"


def test_reload_needs_no_start_url(fake_engine):
    fake = fake_engine()
    Path("larbin.conf").write_text("waitDuration 1\n")
    assert main(["--reload"]) == 0
    assert fake.calls[0][1:] == (True, False)


def test_seed_alone_satisfies_start_url(fake_engine):
    fake = fake_engine()
    Path("larbin.conf").write_text("waitDuration 1\n")
    assert main(["--seed", "http://s.example/"]) == 0
    assert fake.calls[0][0].start_urls == ("http://s.example/",)
    assert main(["--seed", "s.example"]) == 2
    assert len(fake.calls) == 1


def test_config_errors_never_reach_the_engine(fake_engine, capsys):
    fake = fake_engine()
    Path("larbin.conf").write_text(SEED + "pagesConnexions 0\n")
    assert main([]) == 2
    assert fake.calls == []
    assert capsys.readouterr().err.strip() == \
        "larbin: larbin.conf:2: pagesConnexions: expected an integer in 1..100000, got '0'"


# ---------------------------------------------------------------- servers that cannot listen (issue 18 §5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def held_port() -> socket.socket:
    """A listening socket on 127.0.0.1: its port is in use."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def quick_conf(tmp_path: Path, http_port: int, extra: str = "") -> Path:
    """A crawl that ends at once: its one start URL refuses connections."""
    conf = tmp_path / "larbin.conf"
    conf.write_text(f"startUrl http://127.0.0.1:{free_port()}/\ndnsServers 127.0.0.1:9\n"
                    f"outputMode mirror\nretries 0\nconnectTimeout 2\nignoreRobots\n"
                    f"httpPort {http_port}\n{extra}")
    return conf


def crawl_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "end of work" in proc.stderr


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_stats_port_in_use_stops_the_start_and_leaves_nothing(tmp_path):
    with held_port() as sock:
        port = sock.getsockname()[1]
        conf = quick_conf(tmp_path, port)
        line = one_line_error(run("-c", str(conf), cwd=tmp_path))
        assert line == f"larbin_py: cannot listen on 127.0.0.1:{port} (httpPort, httpBind): address already in use"
    assert not (tmp_path / "state").exists() and not (tmp_path / "save").exists()
    crawl_ok(run("-c", str(conf), cwd=tmp_path))  # a plain start works at once


def test_a_port_in_use_on_reload_keeps_the_checkpoint(tmp_path):
    port = free_port()
    conf = quick_conf(tmp_path, port)
    crawl_ok(run("-c", str(conf), cwd=tmp_path))
    before = tree(tmp_path / "state")
    assert "checkpoint.json" in before
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        line = one_line_error(run("-c", str(conf), "--reload", cwd=tmp_path))
        assert line == f"larbin_py: cannot listen on 127.0.0.1:{port} (httpPort, httpBind): address already in use"
    assert tree(tmp_path / "state") == before
    proc = run("-c", str(conf), "--reload", cwd=tmp_path)
    crawl_ok(proc)
    assert "continuing the crawl saved in" in proc.stderr


@pytest.mark.parametrize("bind", ["999.999.999.999", "no-such-host.invalid"])
def test_an_httpbind_that_cannot_be_listened_on_stops_the_start(tmp_path, bind):
    port = free_port()
    conf = quick_conf(tmp_path, port, f"httpBind {bind}\nhttpToken 0123456789abcdef\n")
    line = one_line_error(run("-c", str(conf), cwd=tmp_path))
    assert line.startswith(f"larbin_py: cannot listen on {bind}:{port} (httpPort, httpBind): unknown host name")
    assert not (tmp_path / "state").exists()
    crawl_ok(run("-c", str(conf), "--set", "httpBind=127.0.0.1", cwd=tmp_path))


def test_an_input_port_beyond_loopback_without_a_token_is_refused(tmp_path):
    conf = quick_conf(tmp_path, 0, f"inputPort {free_port()}\nhttpBind 0.0.0.0\n")
    line = one_line_error(run("-c", str(conf), cwd=tmp_path))
    assert line.endswith("larbin.conf:8: inputPort: httpBind 0.0.0.0 is not a loopback address, so the "
                         "input port needs an httpToken (or inputPort 0)")
    assert not (tmp_path / "state").exists()
    crawl_ok(run("-c", str(conf), "--set", "httpBind=127.0.0.1", cwd=tmp_path))


def test_an_output_that_cannot_open_leaves_a_fresh_state_dir_empty(tmp_path):
    (tmp_path / "save").write_text("a file where saveDir should be")
    conf = quick_conf(tmp_path, 0)
    proc = run("-c", str(conf), cwd=tmp_path)
    assert proc.returncode == 1 and "cannot open the output" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "state").exists()
    (tmp_path / "save").unlink()
    crawl_ok(run("-c", str(conf), cwd=tmp_path))


def test_a_closed_crawl_exits_without_the_teardown_its_output_flushed(tmp_path):
    """Issue 37: after a crawl's shutdown (``crawl_closed``) the process ends with
    os._exit: atexit handlers run and what was printed is flushed, but the
    interpreter's teardown (objects freed one by one) is skipped; without a closed
    crawl it exits normally."""
    script = """
import atexit, sys
from larbin_py import cli

class Finalized:
    def __del__(self):
        print("teardown", flush=True)

keep = [Finalized()]
keep.append(keep)  # a cycle: freed only by the interpreter's teardown
atexit.register(lambda: print("atexit", flush=True))
sys.stdout.write("summary, not flushed yet")
cli.crawl_closed = sys.argv[1] == "closed"
cli.exit_now(3)
"""
    for state, teardown in (("closed", False), ("other", True)):
        proc = subprocess.run([sys.executable, "-c", script, state], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 3, proc.stderr
        assert "summary, not flushed yet" in proc.stdout and "atexit" in proc.stdout
        assert ("teardown" in proc.stdout) is teardown, (state, proc.stdout)
