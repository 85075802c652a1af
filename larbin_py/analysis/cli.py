"""``python -m larbin_py analyze -c larbin.conf [--analyzer NAME] [--workers N]``.

Runs the analyzers over what an earlier crawl saved -- the index of
``saveDir`` (mirror or save: the page files; warc: the response records) --
as a stage of its own: the same analysis processes, durable queue (in
``stateDir/analyze``), retries with backoff and alerts as during a crawl.
Pages are read one at a time (a thread reads, the loop feeds the
processes) and ``analysisQueueMax`` bounds the pages read ahead.  Without
``types=``, an analyzer takes the HTML pages, as during a crawl.

It holds ``stateDir/lock`` while it runs, as a crawl does
(larbin_py.statelock): started beside a crawl, a launcher or another
``analyze`` on the same stateDir, it exits 2 naming that process.

Exit codes: 0 every task succeeded; 1 some failed (each raised an alert);
2 a usage or configuration error, stateDir in use, or nothing to analyse.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from ..config import ConfigError, load_config
from ..output.base import INDEX_NAME, parse_index_line
from .analyzers import AnalyzerSpec
from .stage import AnalysisStage, specs_from_config

__all__ = ["main"]


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _Usage(f"{message} (try analyze --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="larbin analyze", description="Run the analyzers over the pages an earlier crawl saved.")
    p.add_argument("-c", "--config", metavar="FILE", default="larbin.conf", help="the crawl's configuration")
    p.add_argument("--analyzer", metavar="NAME", action="append", default=[],
                   help="run only this analyzer (repeatable; 'meta' is built in); default: every configured one")
    p.add_argument("--workers", metavar="N", type=int, default=None,
                   help="analysis processes (default: analysisWorkers, at least 1)")
    return p


def select(config, names: list[str]) -> list[AnalyzerSpec]:
    """The analyzers to run: those named (``meta`` built in), or every configured one."""
    configured = {s.name: s for s in specs_from_config(config) if s.kind != "links"}
    if not names:
        if not configured:
            raise _Usage("no analyzer configured (an 'analyzer NAME KIND ...' line), and none named")
        return list(configured.values())
    out = []
    for name in names:
        if name in configured:
            out.append(configured[name])
        elif name == "meta":
            out.append(AnalyzerSpec("meta", "meta"))
        else:
            known = ", ".join(sorted(configured)) or "none"
            raise _Usage(f"--analyzer {name}: not configured (configured: {known}; built in: meta)")
    return out


def _html(ctype: str | None) -> bool:
    t = (ctype or "").split(";")[0].strip().lower()
    return t in ("text/html", "application/xhtml+xml")


def read_saved(save_dir: str):
    """``(url, status, content type, body)`` of each page in saveDir's index, in order."""
    index = os.path.join(save_dir, INDEX_NAME)
    warcs: dict[str, object] = {}
    try:
        with open(index, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line:
                    continue
                entry = parse_index_line(line)
                path = os.path.join(save_dir, entry["path"])
                if entry.get("offset") is None:
                    with open(path, "rb") as page:
                        body = page.read()
                else:
                    body = _warc_body(warcs, path, entry["offset"])
                yield entry["url"], entry["status"], entry["content_type"], body
    finally:
        for fh in warcs.values():
            fh.close()


def _warc_body(files: dict, path: str, offset: int) -> bytes:
    from warcio.archiveiterator import ArchiveIterator

    fh = files.get(path)
    if fh is None:
        fh = files[path] = open(path, "rb")
    fh.seek(offset)
    for record in ArchiveIterator(fh):
        return record.content_stream().read()
    return b""


async def run(config, specs: list[AnalyzerSpec], workers: int, err) -> int:
    cfg = config.replace(analysis_workers=workers)
    stage = AnalysisStage(cfg, err=err, durable=False, specs=specs, queue_dir="analyze")
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task] = set()
    room = asyncio.Event()

    def spawn(coro) -> None:
        task = loop.create_task(coro)
        tasks.add(task)
        task.add_done_callback(lambda t: (tasks.discard(t), room.set()))

    stage.attach(None, None, spawn)
    stage.start(loop)
    pages = 0
    reader = read_saved(config.save_dir)
    try:
        while True:
            item = await asyncio.to_thread(next, reader, None)
            if item is None:
                break
            url, status, ctype, body = item
            wanted = [s for s in specs if (s.wants(url, ctype) if s.types else _html(ctype) and s.wants(url, ctype))]
            if not wanted:
                continue
            while stage.full():
                room.clear()
                await room.wait()
            stage.user = wanted
            stage.submit(url, 0, body, status=status, content_type=ctype)
            pages += 1
        while stage.pending:  # one engine-like task stands for the pending ones, batch after batch
            room.clear()
            if not tasks:
                break
            await room.wait()
    finally:
        for t in tasks:
            t.cancel()
        await stage.close()
    print(f"larbin_py analyze: {pages} pages, {stage.finished} tasks done, {stage.failed} failed "
          f"(alerts in {stage.alerts.path}), {sum(stage.failed_tries.values())} tries failed", file=err)
    return 1 if stage.failed else 0


def main(argv) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.workers is not None and args.workers < 1:
            raise _Usage(f"--workers must be 1 or more, got {args.workers}")
        config = load_config(args.config, require_start_urls=False)
        specs = select(config, args.analyzer)
        if not os.path.exists(os.path.join(config.save_dir, INDEX_NAME)):
            raise _Usage(f"no index in saveDir {config.save_dir!r}: nothing saved to analyse "
                         "(outputMode mirror, save or warc)")
    except (_Usage, ConfigError) as exc:
        print(f"larbin: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    import uvloop

    from ..statelock import StateDirError, lock_state_dir

    try:  # its queue and alerts are in stateDir: one writer at a time (larbin_py.statelock)
        lock = lock_state_dir(config.state_dir, "analyze")
    except StateDirError as exc:
        print(f"larbin: {exc}", file=sys.stderr)
        return 2
    if lock.warning:
        print(f"larbin: {lock.warning}", file=sys.stderr)
    workers = args.workers if args.workers is not None else max(1, config.analysis_workers)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(run(config, specs, workers, sys.stderr))
    finally:
        lock.release()
