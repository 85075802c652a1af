"""The command line: ``larbin`` / ``python -m larbin_py``.

``main(argv)`` reads the configuration, then hands it to
:func:`crawl_main`, the runner: it makes the uvloop event loop and runs the
engine (larbin_py.runner: signals, summary, exit code) or the demo.  The
engine, the demo and the synthetic web are imported only then, so a
configuration can be checked without them.  Exit codes:

* 0: the crawl finished (or ``--help``, ``--version``, ``--print-config``);
* 1: the crawl failed;
* 2: a usage or configuration error, or a stateDir in use by another
  process, reported as ONE line on stderr;
* 130: interrupted (SIGINT / Ctrl-C).

Before anything is written, a crawl, a demo and a launcher lock stateDir
(``stateDir/lock``, larbin_py.statelock; a worker locks its own part in
larbin_py.distributed.crawl_worker) and hold it to their end: a second process on the
same stateDir, ``--reload`` included, exits 2 at once naming the holder.
``--print-config`` shows secrets as ``***`` (larbin_py.redact), as every
error line does.

``--demo`` without ``-c``, when ``./larbin.conf`` does not exist, uses the
built-in demo configuration (``larbin_py.config.DEMO_CONFIG_TEXT``).  An
explicit ``-c FILE`` must exist, with ``--demo`` too.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
from typing import NoReturn, Sequence

from . import __version__
from .config import Config, ConfigError, demo_config, format_config, load_config
from .fastexit import fast_exit
from .redact import redact_text

__all__ = ["main", "build_parser", "crawl_main", "exit_now", "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE",
           "EXIT_INTERRUPTED"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

PROG = "larbin"
DEFAULT_CONFIG = "larbin.conf"


class _UsageError(Exception):
    """A command-line problem: the message is printed as one line (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (try --help)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``larbin``."""
    parser = _Parser(
        prog=PROG,
        description="larbin_py: a fast, polite, single-process web crawler (Larbin's design).",
        epilog="Exit codes: 0 finished, 1 crawl failed, 2 usage or configuration error, "
               "130 interrupted.  Every key is documented in the shipped larbin.conf.",
    )
    parser.add_argument("-c", "--config", metavar="FILE", default=None,
                        help=f"the configuration file (default: ./{DEFAULT_CONFIG})")
    parser.add_argument("--reload", action="store_true",
                        help="continue the crawl saved in stateDir instead of starting anew")
    parser.add_argument("--recrawl", action="store_true",
                        help="crawl again the finished crawl in stateDir: every page it fetched, asked with "
                             "its validators (with --workers N: the launcher's crawl; docs/recrawl.md)")
    parser.add_argument("--demo", action="store_true",
                        help="crawl the built-in synthetic web on loopback (no startUrl needed)")
    parser.add_argument("--seed", metavar="URL", action="append", default=[],
                        help="a start URL, added to the file's startUrl (repeatable)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                        type=_key_value, help="override a larbin.conf key (repeatable)")
    parser.add_argument("--workers", metavar="N", type=_workers, default=None,
                        help="run the crawl on N worker processes of this machine, coordinated through "
                             "Redis (redisUrl; N > 1 without it starts a private redis-server)")
    parser.add_argument("--worker", action="store_true",
                        help="run as one worker of the distributed crawl crawlName in redisUrl")
    parser.add_argument("--worker-id", metavar="ID", default=None,
                        help="this worker's name in the crawl (the workerId key)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the effective configuration in larbin.conf format and exit")
    parser.add_argument("--version", action="version", version=f"larbin_py {__version__}")
    return parser


def _workers(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1024:
        raise argparse.ArgumentTypeError(f"expected a number of workers in 1..1024, got {text!r}")
    return int(text)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _load(args: argparse.Namespace) -> Config:
    """The configuration the arguments ask for; raises ConfigError."""
    lenient = args.demo or args.reload or args.recrawl or bool(args.seed) or args.print_config or args.worker
    path = args.config
    if path is None:
        path = DEFAULT_CONFIG
        if args.demo and not os.path.exists(path):
            return demo_config(args.overrides, args.seed)
    return load_config(path, args.overrides, require_start_urls=not lenient,
                       extra_start_urls=args.seed)


def _with_worker_id(config: Config, worker_id: str) -> Config:
    """``--worker-id``, checked as the workerId key is (an error names --worker-id)."""
    try:
        return config.replace(worker_id=worker_id)
    except ConfigError as exc:
        raise ConfigError("--worker-id", None, "workerId", exc.message) from None


def _say(message: str) -> None:
    """One line on stderr; a URL's password in it shown as ``***`` (larbin_py.redact)."""
    print(f"{PROG}: {redact_text(message)}", file=sys.stderr, flush=True)


def _state_role(args: argparse.Namespace, config: Config) -> str | None:
    """What this process is to stateDir: the role its lock names, or None for
    a worker (which locks its own part of stateDir: larbin_py.distributed.crawl_worker)."""
    if args.worker:
        return None
    if args.workers is not None and (args.workers > 1 or config.redis_url):
        return "launcher"
    if args.demo:
        return "demo"
    return None if config.redis_url else "crawl"


def crawl_main(config: Config, *, reload: bool = False, demo: bool = False, recrawl: bool = False) -> int:
    """Run a crawl (or the demo) to its end on uvloop; the process exit code."""
    import asyncio

    import uvloop

    async def run() -> int:
        if demo:
            from .demo import run_demo

            return await run_demo(config)
        if reload and not config.can_reload:
            print("larbin_py: --reload needs canReload (it is off in the configuration)", file=sys.stderr)
            return EXIT_USAGE
        if recrawl and not config.can_reload:
            print("larbin_py: --recrawl needs canReload (the records of each page are kept with the journal)",
                  file=sys.stderr)
            return EXIT_USAGE
        if config.redis_url:  # one worker of a distributed crawl (larbin_py.distributed.crawl_worker)
            from .distributed.crawl_worker import run_worker

            return await run_worker(config, reload=reload)
        from .engine import Engine, StateDirInUse, StateError
        from .runner import run_engine

        try:
            engine = Engine(config, reload=reload, recrawl=recrawl)
        except (StateDirInUse, StateError) as exc:
            print(f"larbin_py: {exc}", file=sys.stderr)
            return EXIT_USAGE
        code = await run_engine(engine)
        global crawl_closed
        crawl_closed = True  # its shutdown closed every file and thread: see exit_now
        return code

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run())


#: A crawl of this process ran to its end through its own shutdown (run_engine returned).
crawl_closed = False


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` (the console script and ``python -m larbin_py``).

    After a crawl whose shutdown ran (:data:`crawl_closed`: its checkpoint,
    output, journal and queue closed and synced, its threads and processes
    ended), the ``atexit`` handlers run (an idle thread pool is joined
    there), stdout and stderr are flushed, and the process ends with
    ``os._exit``: the interpreter's teardown -- freeing every object of the
    crawl, module by module -- cost about 100 ms at every crawl's end and
    saved nothing.  Any other run (the demo, a launcher, a worker,
    ``analyze``, a crawl that raised) exits normally (larbin_py.fastexit).
    """
    if not crawl_closed:
        sys.exit(code)
    fast_exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["analyze"]:  # the analysis stage over an earlier crawl's pages (larbin_py.analysis.cli)
        from .analysis.cli import main as analyze_main

        return analyze_main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        _say(str(exc))
        return EXIT_USAGE
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK

    try:
        config = _load(args)
        if args.worker_id is not None:
            config = _with_worker_id(config, args.worker_id)
    except ConfigError as exc:
        _say(str(exc))
        return EXIT_USAGE
    if args.worker and args.workers is not None:
        _say("--worker and --workers exclude each other (try --help)")
        return EXIT_USAGE
    if args.recrawl and args.reload:
        _say("--recrawl starts a new crawl and --reload continues one: they exclude each other (try --help)")
        return EXIT_USAGE
    if args.recrawl and (args.demo or args.worker or
                         (config.redis_url and (config.redis_url != "auto" or args.workers is None))):
        _say("--recrawl is for a crawl of one process or of --workers N on their private Redis: not with "
             "--demo, --worker, or a redisUrl shared by workers started by hand (docs/recrawl.md)")
        return EXIT_USAGE

    if args.print_config:  # for a person to read: secrets as ***
        sys.stdout.write(format_config(config, redact=True))
        return EXIT_OK

    # One writer per stateDir (larbin_py.statelock): the lock before anything is written.
    role = _state_role(args, config)
    lock = None
    if role is not None:
        from .statelock import StateDirError, lock_state_dir

        try:
            lock = lock_state_dir(config.state_dir, role)
        except StateDirError as exc:
            _say(str(exc))
            return EXIT_USAGE
        if lock.warning:
            _say(lock.warning)
    if signal.getsignal(signal.SIGINT) is signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # A mask inherited blocked (a parent that held them across its fork) would make the
    # crawl deaf to the signals that stop it cleanly.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))
    try:
        if args.worker:
            from .distributed.launcher import worker_main

            code = worker_main(config, reload=args.reload)
        elif args.workers is not None and (args.workers > 1 or config.redis_url):
            if args.demo:
                from .demo import demo_workers_main

                code = demo_workers_main(config, args.workers, cli_main=main)
            else:
                from .distributed.launcher import launch_main

                code = launch_main(config, args.workers, reload=args.reload, recrawl=args.recrawl,
                                   cli_main=main)
        else:
            code = crawl_main(config, reload=args.reload, demo=args.demo, recrawl=args.recrawl)
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED
    except ConfigError as exc:
        _say(str(exc))
        return EXIT_USAGE
    except Exception:
        traceback.print_exc()
        _say("the crawl failed with an internal error (traceback above)")
        return EXIT_FAILED
    finally:
        if lock is not None:
            lock.release()
    if code is None:
        return EXIT_OK
    return code if isinstance(code, int) and not isinstance(code, bool) else EXIT_FAILED
