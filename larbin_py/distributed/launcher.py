"""``--workers N``: N worker processes on this machine, one crawl, one summary.

The launcher (docs/distributed.md, "Running it"):

1. resolves ``redisUrl``: ``auto`` (or no redisUrl with N > 1) starts a
   private redis-server on a unix socket under ``stateDir/redis``
   (:class:`~larbin_py.distributed.redis_server.RedisServer`; a missing binary is
   exit 2 with the apt-get hint); a Redis that cannot be reached is exit 2
   naming the URL;
2. checks the crawl in Redis: a fresh start that finds a crawl named
   ``crawlName`` (its ``meta``) refuses without ``--reload`` (exit 2), as a
   used stateDir does; the first worker to join creates it, and every
   joiner is checked against it (``RedisIO.join_crawl``: a worker whose
   settings differ exits 2 naming them, which stops the crawl);
3. writes the workers' configuration, ``stateDir/launcher.conf`` (the
   effective configuration with the resolved redisUrl, no servers), and
   starts each worker as ``python -m larbin_py -c stateDir/launcher.conf
   --worker --worker-id wK`` would run, its output prefixed ``[wK]``: forked
   from the zygote that :func:`launch_main` started before its event loop
   (:mod:`larbin_py.distributed.zygote`: the imports are paid once), or with
   ``exec`` when there is none;
4. supervises them: a worker that dies (a crash, a kill) has a try counted
   against each request it had running (its ``stateDir/inflight-<wK>``,
   larbin_py.distributed.inflight), and is started again with the same workerId
   when ``respawn`` is on (at most :data:`MAX_RESPAWNS` times in
   :data:`RESPAWN_WINDOW` seconds), else its partitions are taken over by
   the others; a worker that cannot be started again is said and left
   dead; a worker that exits 2 (a usage or configuration error) stops the
   crawl with exit 2;
5. keeps the crawl's records for a recrawl (larbin_py.distributed.records):
   a fresh start writes generation 1 in ``stateDir/.workers/.generation.json``,
   a crawl that ends is marked finished there; ``--recrawl`` (the private
   Redis only) empties Redis of the finished crawl, writes the next
   generation and queues every page of the last one again, with its
   token, before the workers start (done again by a ``--reload`` when it
   was cut short), and removes the last generation's records once the
   recrawl has finished;
6. serves the whole crawl's stats on ``httpPort``
   (:class:`~larbin_py.distributed.cluster_stats.ClusterSource`);
7. forwards SIGINT/SIGTERM to the workers (which stop as one process does)
   and, once every worker has ended, prints one summary for the crawl (each
   worker's pages over all its lives, how long Redis's failures paused the
   crawl and why, the URLs forgotten as workerCrash) and exits with the
   usual codes: 0 the crawl ended, 1 it failed, 2 usage, 130/143
   interrupted/terminated.

Workers run in their own process group (a Ctrl-C reaches them once, through
the launcher) and die with the launcher (``PR_SET_PDEATHSIG``), so a killed
launcher leaves no orphan crawling on.

The worker side lives in ``larbin_py.distributed.crawl_worker``: ``async def
run_worker(config, *, reload) -> int``, called by ``--worker``
(:func:`worker_main`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Sequence

from ..state import StateError
from .inflight import count_crashes, inflight_path
from .redis_server import RedisServer, RedisServerError
from .redisio import CRASH_LIMIT, CrawlExists, DistError, RedisFailed, RedisIO, Totals
from .shared import SHARED_KEYS, crawl_meta  # noqa: F401 (re-exported: the launcher's callers use them)
from .prctl import set_pdeathsig
from .records import Generation, read_generation, remove_previous, write_generation
from .records import reset as reset_records
from .records import seed as seed_records
from .zygote import Zygote

__all__ = ["Launcher", "WorkerProc", "resolve_redis_url", "crawl_meta", "default_worker_id",
           "ip_lease_hold", "worker_main", "launch_main", "run_with_zygote", "SHARED_KEYS", "MAX_RESPAWNS", "RESPAWN_WINDOW"]

#: A worker that dies this many times within RESPAWN_WINDOW seconds is left dead.
MAX_RESPAWNS = 5
RESPAWN_WINDOW = 60.0

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
SIGNAL_EXITS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def default_worker_id() -> str:
    """``<hostname>-<pid>``, made a valid name."""
    host = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname()) or "host"
    return f"{host.lstrip('._-') or 'host'}-{os.getpid()}"[:64]


def ip_lease_hold(config) -> float:
    """``ipLeaseHold``, 0 meaning max(10 s, 5 x waitDuration)."""
    return config.ip_lease_hold or max(10.0, 5.0 * config.wait_duration)


def auto_socket(config) -> str:
    return os.path.join(os.path.abspath(config.state_dir), "redis", "redis.sock")


def resolve_redis_url(config, workers: int = 1) -> str:
    """The Redis URL a crawl uses: ``auto`` (or none with N > 1) is the private server's socket."""
    if config.redis_url == "auto" or (not config.redis_url and workers > 1):
        return "unix://" + auto_socket(config)
    return config.redis_url


@dataclass
class WorkerProc:
    """One supervised worker."""

    wid: str
    proc: asyncio.subprocess.Process | None = None
    starts: list[float] = field(default_factory=list)  # monotonic times of each start
    exits: list[int] = field(default_factory=list)  # every exit code (negative: killed by that signal)
    pumps: list[asyncio.Task] = field(default_factory=list)
    state: str = "starting"

    @property
    def respawns(self) -> int:
        return max(0, len(self.starts) - 1)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


class Launcher:
    """Spawn, supervise and sum up N workers of one crawl."""

    def __init__(self, config, workers: int, *, reload: bool = False, recrawl: bool = False, out=None,
                 command: Callable[[str, str, bool], Sequence[str]] | None = None,
                 env: dict[str, str] | None = None, zygote: Zygote | None = None) -> None:
        self.config = config
        self.n = workers
        self.reload = reload
        self.recrawl = recrawl
        #: The records' generation (larbin_py.distributed.records), None: a crawl without them.
        self.generation: Generation | None = None
        self.out = out if out is not None else sys.stderr
        self.command = command or self.default_command
        self.env = env
        # a zygote forks the default command only (a test's command or env is exec'd)
        self.zygote = zygote if command is None and env is None else None
        self.workers = [WorkerProc(f"w{k}") for k in range(1, workers + 1)]
        self.redis: RedisServer | None = None
        self.io: RedisIO | None = None
        self.url = ""
        self.conf_path = os.path.join(os.path.abspath(config.state_dir), "launcher.conf")
        self.stopping: int | None = None  # the signal that asked to stop
        self.usage_error: str | None = None
        self.source = None
        self.http = None
        self.started = time.monotonic()
        self.final: Totals | None = None
        self.figures: dict[str, dict] = {}
        self.crashed_urls: list[str] = []
        self.index_lines: int | None = None
        self._changed = asyncio.Event()

    # --- the worker command -------------------------------------------------
    @staticmethod
    def worker_args(wid: str, conf_path: str, reload: bool) -> list[str]:
        """A worker's command line after ``python -m larbin_py``."""
        return ["-c", conf_path, "--worker", "--worker-id", wid] + (["--reload"] if reload else [])

    def default_command(self, wid: str, conf_path: str, reload: bool) -> list[str]:
        return [sys.executable, "-m", "larbin_py", *self.worker_args(wid, conf_path, reload)]

    def say(self, message: str) -> None:
        print(f"larbin_py: {message}", file=self.out, flush=True)

    # --- running ------------------------------------------------------------------
    async def run(self) -> int:
        try:
            code = await self._prepare()
            if code is not None:
                return code
            return await self._supervise()
        finally:
            await self._cleanup()

    async def _prepare(self) -> int | None:
        c = self.config
        if c.url_input or c.input_port:
            self.say("urlInput and inputPort are not available with --workers: give URLs to a worker "
                     "started with --worker, or as startUrl")
            return EXIT_USAGE
        self.url = resolve_redis_url(c, self.n)
        if self.recrawl:
            refusal = self._recrawl_refusal()
            if refusal is not None:
                self.say(refusal)
                return EXIT_USAGE
        os.makedirs(c.state_dir, exist_ok=True)
        if self.url == "unix://" + auto_socket(c):
            try:
                # started from this thread (it dies with the thread that forked
                # it): nothing else runs yet, so the wait for PONG may block
                self.redis = RedisServer(os.path.dirname(auto_socket(c))).start()
            except RedisServerError as exc:
                self.say(f"redisUrl auto: {exc}")
                return EXIT_USAGE
        try:
            self.io = await RedisIO(self.url, c.crawl_name, partitions=c.partitions,
                                    seen_buckets=c.seen_buckets).connect()
            # The first worker to join creates the crawl (meta) with its
            # settings and every other one is checked against it: the
            # launcher only refuses a fresh start over an existing crawl.
            if self.recrawl:  # the finished crawl's queue, seen sets and counters go: a new crawl
                await self.io.drop_crawl()
            if await self.io.read_crawl() is not None and not self.reload:
                raise CrawlExists(f"a crawl named {c.crawl_name!r} already exists in Redis at "
                                  f"{self.io.url_shown}: start with --reload to continue it, "
                                  "or choose another crawlName")
            # the workers started together: each acquires once it sees them all
            await self.io.set_expect([w.wid for w in self.workers])
            await self._records()
        except DistError as exc:
            self.say(str(exc))
            return EXIT_USAGE
        except (StateError, OSError) as exc:
            self.say(f"the records of the crawl: {exc}")
            return EXIT_USAGE
        from ..config import format_config
        from ..owner_only import opener

        # no servers, so no httpToken; the Redis password stays (the workers need it): mode 0600
        worker_config = c.replace(redis_url=self.url, http_port=0, input_port=0, print_stats=False,
                                  url_input=False, worker_id="", http_token=None)
        tmp = self.conf_path + ".tmp"
        with open(tmp, "w", encoding="utf-8", opener=opener) as f:
            f.write(format_config(worker_config))
        os.replace(tmp, self.conf_path)
        if c.http_port:
            from ..servers import listen_reason
            from ..web.server import StatsServer
            from .cluster_stats import ClusterSource

            self.source = ClusterSource(self.io, workers=[w.wid for w in self.workers],
                                        membership=getattr(self.config, "membership", "redis"))
            await self.source.refresh()
            self.source.start()
            try:
                self.http = StatsServer(self.source, host=c.http_bind, port=c.http_port, token=c.http_token,
                                        hosts=c.http_hosts)
                await self.http.start()
            except (OSError, ValueError) as exc:
                self.say(f"cannot listen on {c.http_bind}:{c.http_port} (httpPort, httpBind): {listen_reason(exc)}")
                self.http = None
                return EXIT_USAGE
            self.say(f"live stats of the crawl at http://{c.http_bind}:{self.http.port}/")
        return None

    def _recrawl_refusal(self) -> str | None:
        """Why ``--recrawl`` cannot start here (one line), or None."""
        c = self.config
        if self.url != "unix://" + auto_socket(c):
            return ("--recrawl with --workers needs the launcher's private Redis (redisUrl auto): a Redis "
                    "shared with workers started by hand is not recrawled (docs/recrawl.md)")
        if c.output_mode in ("save", "warc"):
            return (f"--recrawl with --workers keeps unchanged pages in a mirror: outputMode {c.output_mode} "
                    "is not recrawled in the distributed mode (docs/recrawl.md)")
        try:
            gen = read_generation(c.state_dir)
        except StateError as exc:
            return str(exc)
        if gen is None:
            return (f"{c.state_dir}: no distributed crawl with records to revisit (one started by --workers "
                    "N, which keeps them)")
        if not gen.finished:
            return (f"{c.state_dir}: the crawl there has not finished: continue it with --reload until it "
                    "ends, then --recrawl")
        return None

    async def _records(self) -> None:
        """The records' generation (see the module docstring, step 5), and a recrawl's seeding."""
        c = self.config
        if self.recrawl:
            done = read_generation(c.state_dir)
            self.generation = Generation(done.generation + 1, done.generation, seeded=False)
            if c.output_mode == "mirror":  # the workers' indexes start afresh: a page listed by who saves it now
                clear_indexes(c.save_dir)
            write_generation(c.state_dir, self.generation)
        elif self.reload:
            self.generation = read_generation(c.state_dir)
        else:
            reset_records(c.state_dir)
            self.generation = Generation(1)
            write_generation(c.state_dir, self.generation)
        gen = self.generation
        if gen is not None and gen.previous is not None and not gen.seeded:
            queued, refused = await seed_records(self.io, c, c.state_dir, gen.previous, say=self.say)
            gen.seeded = True
            write_generation(c.state_dir, gen)
            self.say(f"recrawl of generation {gen.previous}: {queued} URLs queued again"
                     + (f", {refused} refused by the rules now" if refused else ""))

    def _records_finished(self, code: int) -> None:
        """The crawl ended: its records are those of a finished crawl (the one it revisited goes)."""
        gen = self.generation
        if gen is None or code != EXIT_OK or self.stopping is not None:
            return
        try:
            gen.finished = True
            write_generation(self.config.state_dir, gen)
            if gen.previous is not None:
                remove_previous(self.config.state_dir, gen.previous)
        except OSError as exc:
            self.say(f"cannot mark the crawl's records finished: {exc}")

    async def _supervise(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in SIGNAL_EXITS:
            loop.add_signal_handler(sig, self.request_stop, sig)
        try:
            self.say(f"crawl {self.config.crawl_name!r}: {self.n} workers on Redis {self.io.url_shown}")
            for w in self.workers:
                await self._start(w)
            if self.source is not None:
                self.source.state = "running"
            while any(w.proc is not None for w in self.workers):
                self._changed.clear()
                await self._changed.wait()
        finally:
            for sig in SIGNAL_EXITS:
                loop.remove_signal_handler(sig)
        return await self._finish()

    async def _start(self, w: WorkerProc) -> None:
        reload = self.reload or bool(w.starts)
        w.proc = None
        if self.zygote is not None and self.zygote.alive:
            try:
                w.proc = await self.zygote.spawn(w.wid, self.worker_args(w.wid, self.conf_path, reload))
            except OSError as exc:
                self.say(f"worker {w.wid}: {exc}; starting it with exec")
        if w.proc is None:
            w.proc = await asyncio.create_subprocess_exec(
                *self.command(w.wid, self.conf_path, reload), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
                preexec_fn=set_pdeathsig, env=self.env)
        w.starts.append(time.monotonic())
        w.state = "running"
        self._state(w)
        w.pumps = [asyncio.ensure_future(self._pump(w, w.proc.stdout)),
                   asyncio.ensure_future(self._pump(w, w.proc.stderr))]
        asyncio.ensure_future(self._watch(w, w.proc))

    async def _pump(self, w: WorkerProc, stream) -> None:
        """Copy a worker's output, each line prefixed.  Read in chunks, not by
        readline (which drops a line longer than its buffer and raises): a pump
        that stopped would fill the pipe and block the worker."""
        pending = b""
        while True:
            chunk = await stream.read(1 << 16)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > 1 << 20:  # a line without end: copy it in pieces
                lines.append(pending)
                pending = b""
            for line in lines:
                self._line(w, line)
        if pending:
            self._line(w, pending)

    def _line(self, w: WorkerProc, line: bytes) -> None:
        self.out.write(f"[{w.wid}] {line.decode('utf-8', 'replace').rstrip()}\n")
        self.out.flush()

    async def _watch(self, w: WorkerProc, proc) -> None:
        code = await proc.wait()
        # The tries first, before the rest of its output: its analysis processes
        # hold its stderr open until they see it gone, and the partitions' next
        # owner must find the count made when it claims (larbin_py.distributed.inflight).
        if code not in (EXIT_OK, EXIT_USAGE, *SIGNAL_EXITS.values()):
            await self._count_tries(w)
        await asyncio.gather(*w.pumps, return_exceptions=True)
        w.exits.append(code)
        w.proc = None
        if code == EXIT_USAGE and self.stopping is None:
            self.usage_error = f"{w.wid} exited 2 (a usage or configuration error: see its lines above)"
            w.state = "exit 2"
            self.request_stop(signal.SIGTERM, quiet=True)
        elif code in (EXIT_OK, *SIGNAL_EXITS.values()) or self.stopping is not None:
            w.state = _exit_text(code)
        elif self.config.respawn and self._may_respawn(w):
            self.say(f"worker {w.wid} {_exit_text(code)}: starting it again")
            w.state = "respawning"
            self._state(w)
            try:
                await self._start(w)
            except Exception as exc:  # (no process could be made: fork or exec failed)
                w.proc = None
                w.state = f"not restarted ({type(exc).__name__})"
                self.say(f"worker {w.wid} could not be started again: {exc}; the others take its "
                         "partitions over")
        else:
            w.state = _exit_text(code)
            why = "respawn is off" if not self.config.respawn else f"it died {MAX_RESPAWNS + 1} times in {RESPAWN_WINDOW:g} s"
            self.say(f"worker {w.wid} {_exit_text(code)} ({why}): the others take its partitions over")
        self._state(w)
        self._changed.set()

    async def _count_tries(self, w: WorkerProc) -> None:
        """A dead worker's requests that were running: one try more each (see
        larbin_py.distributed.inflight).  Left for the worker's next start when Redis fails."""
        if self.io is None:
            return
        try:
            left, counted = await count_crashes(self.io, inflight_path(self.config.state_dir, w.wid))
        except (RedisFailed, OSError) as exc:
            self.say(f"worker {w.wid}: the tries of its death are not counted yet ({exc})")
            return
        if left:
            self.say(f"worker {w.wid}: {left} requests were running when it died: one try more each "
                     f"({counted} still queued)")

    def _may_respawn(self, w: WorkerProc) -> bool:
        recent = [t for t in w.starts if time.monotonic() - t < RESPAWN_WINDOW]
        return len(recent) <= MAX_RESPAWNS

    def _state(self, w: WorkerProc) -> None:
        if self.source is not None:
            self.source.worker_states[w.wid] = w.state

    def request_stop(self, sig: int = signal.SIGTERM, quiet: bool = False) -> None:
        """Stop every worker (SIGINT/SIGTERM forwarded; they stop as one process does)."""
        if self.stopping is None:
            self.stopping = sig
            if not quiet:
                self.say(f"stopping the {self.n} workers ({signal.Signals(sig).name})")
        if self.source is not None:
            self.source.state = "stopping"
        for w in self.workers:
            if w.proc is not None and w.proc.returncode is None:
                try:
                    w.proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    async def _finish(self) -> int:
        try:
            if self.io is not None:
                self.final = (await self.io.view()).totals
                t = self.io.tick()
                i, j = t.get_figures(), t.get_crashed()
                res = await t.execute()
                self.figures, self.crashed_urls = res[i], res[j]
        except DistError as exc:
            self.say(f"cannot read the final counters: {exc}")
        if self.source is not None:
            await self.source.refresh()
            self.source.state = "finished"
        self.merge_outputs()
        code = self.exit_code()
        self._records_finished(code)
        print(self.summary(code), file=self.out, flush=True)
        return code

    def merge_outputs(self) -> None:
        """A mirror's ``saveDir/index.tsv``: each page saved by any worker listed once
        (larbin_py.distributed.crawl_worker.merge_index over the workers' own indexes)."""
        self.index_lines = None
        if self.config.output_mode != "mirror" or not any(w.starts for w in self.workers):
            return
        try:
            from .crawl_worker import merge_index
        except ImportError:  # a build without the worker side has no worker outputs to merge
            return
        try:
            self.index_lines = merge_index(self.config.save_dir)
        except OSError as exc:
            self.say(f"cannot write {os.path.join(self.config.save_dir, 'index.tsv')}: {exc}")

    def exit_code(self) -> int:
        if self.usage_error is not None:
            return EXIT_USAGE
        if self.stopping is not None:
            return SIGNAL_EXITS.get(self.stopping, EXIT_FAILED)
        last = [w.exits[-1] for w in self.workers if w.exits]
        if any(code == EXIT_OK for code in last):
            return EXIT_OK  # the crawl ended (a dead worker's partitions were taken over)
        return EXIT_FAILED

    def summary(self, code: int) -> str:
        t = self.final or Totals()
        elapsed = time.monotonic() - self.started
        if self.usage_error:
            reason = self.usage_error
        elif self.stopping is not None:
            reason = f"stopped by {signal.Signals(self.stopping).name}"
        elif code == EXIT_OK:
            reason = "end of work"
        else:
            reason = "every worker failed"
        snaps = self.source.snapshots if self.source is not None else {}
        lines = [
            f"larbin_py: crawl {self.config.crawl_name!r} on {self.n} workers: {reason}",
            f"  pages fetched   {t.fetched}  ({t.fetched / elapsed if elapsed > 0 else 0.0:.1f} pages/s)",
            f"  elapsed         {elapsed:.1f} s",
            f"  URLs accepted   {t.accepted} = fetched {t.fetched} + forgotten {sum(t.forgotten.values())} "
            f"+ queued {t.queued}  ({'balanced' if t.balanced else 'NOT BALANCED'})",
        ]
        if t.forgotten:
            lines.append("  forgotten       " + ", ".join(f"{k} {v}" for k, v in sorted(t.forgotten.items())))
        if self.crashed_urls:
            shown = ", ".join(self.crashed_urls[:5])
            more = f" and {len(self.crashed_urls) - 5} more" if len(self.crashed_urls) > 5 else ""
            lines.append(f"  workerCrash     {shown}{more} (a worker died fetching each, {CRASH_LIMIT} times)")
        paused = self.paused()
        if paused:
            seconds, kinds = paused
            lines.append(f"  paused          {seconds:.1f} s while Redis failed ("
                         + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(kinds.items())) + ")")
        if self.generation is not None and self.generation.previous is not None:
            r = t.recrawl
            lines.append(f"  recrawl         unchanged {r.get('unchanged', 0)} ({r.get('notModified', 0)} not "
                         f"modified), changed {r.get('changed', 0)}, new {r.get('new', 0)}, gone "
                         f"{r.get('gone', 0)}, kept {r.get('kept', 0)}")
        if self.index_lines is not None:
            lines.append(f"  mirror index    {os.path.join(self.config.save_dir, 'index.tsv')}: "
                         f"{self.index_lines} pages")
        for w in self.workers:
            pages = (self.figures.get(w.wid) or {}).get("pages")
            if pages is None:
                pages = ((snaps.get(w.wid) or {}).get("pages") or {}).get("fetched")
            extra = f", respawned {w.respawns}x" if w.respawns else ""
            exits = ", ".join(_exit_text(c) for c in w.exits) or "never started"
            lines.append(f"  worker {w.wid:<8} {exits}{extra}" + (f"; {pages} pages" if pages is not None else ""))
        return "\n".join(lines)

    def paused(self) -> tuple[float, dict[str, float]] | None:
        """How long Redis's failures paused the crawl (the longest any worker was
        paused, over all its lives) and the seconds by kind (``OOM``, ``connection``...)."""
        longest, kinds = 0.0, {}
        for row in self.figures.values():
            paused = row.get("paused") or {}
            longest = max(longest, sum(paused.values()))
            for k, v in paused.items():
                kinds[k] = max(kinds.get(k, 0.0), v)
        return (longest, kinds) if longest > 0 else None

    async def _cleanup(self) -> None:
        for w in self.workers:  # an error path: nobody left behind
            if w.proc is not None and w.proc.returncode is None:
                w.proc.kill()
                await w.proc.wait()
        if self.source is not None:
            await self.source.stop()
        if self.http is not None:
            await self.http.close()
        if self.io is not None:
            await self.io.close()
        if self.redis is not None:
            self.redis.stop()


def clear_indexes(save_dir: str) -> None:
    """Empty every worker's index of a mirror (``saveDir/.workers/<w>/index.tsv``): a recrawl
    lists each page anew, by the worker that saves or keeps it (a worker of the last crawl
    that does not run now would list its pages again otherwise)."""
    from ..output.base import INDEX_NAME

    root = os.path.join(save_dir, ".workers")
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    for name in names:
        path = os.path.join(root, name, INDEX_NAME)
        if os.path.isfile(path):
            os.truncate(path, 0)


def run_with_zygote(main: Callable[[Zygote | None], Awaitable[int]],
                    cli_main: Callable[[list[str]], int] | None) -> int:
    """Start the zygote (before any loop or thread; its children run
    ``cli_main(argv)``, None: no zygote), run ``main(zygote)`` on uvloop, then
    wait for the zygote: the exit code of ``main``."""
    import uvloop

    zygote = Zygote.start(cli_main) if cli_main is not None else None
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main(zygote))
    finally:
        if zygote is not None:
            zygote.close()


def launch_main(config, workers: int, *, reload: bool = False, recrawl: bool = False,
                cli_main: Callable[[list[str]], int] | None = None) -> int:
    """``--workers N`` on uvloop: the process exit code.  ``cli_main`` is the
    command line's ``main``, which the workers forked from the zygote run."""
    return run_with_zygote(lambda zygote: Launcher(config, workers, reload=reload, recrawl=recrawl,
                                                   zygote=zygote).run(), cli_main)


def worker_main(config, *, reload: bool = False) -> int:
    """``--worker``: run this process as one worker of the crawl (larbin_py.distributed.crawl_worker)."""
    import uvloop

    if not config.redis_url:
        print("larbin_py: --worker needs redisUrl (the Redis of the crawl to join)", file=sys.stderr)
        return EXIT_USAGE
    try:
        from .crawl_worker import run_worker
    except ImportError as exc:
        print(f"larbin_py: --worker: the worker side is missing from this build ({exc})", file=sys.stderr)
        return EXIT_USAGE
    config = config.replace(redis_url=resolve_redis_url(config),
                            worker_id=config.worker_id or default_worker_id())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(run_worker(config, reload=reload))
