"""Crash safety and --reload, end to end on the sim.

The crawler runs as a real process (``python -m larbin_py -c FILE``) against
a sim served by the test's own event loop; the test kills it with SIGKILL or
SIGTERM at chosen points of the sim's request log and restarts it with
``--reload``.  The sim's log is the ground truth of what was fetched.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import random
import signal
import sys
from collections import Counter
from urllib.parse import urlsplit

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.engine import Engine
from larbin_py.output import OutputError, make_output
from larbin_py.sim import Sim

from helpers.crawl import ROBOTS_PATHS, files_under, make_config, read_index
from helpers.state import ROOT, check_mirror, page_requests, sim_config, start_crawler, write_conf

pytestmark = pytest.mark.slow


@pytest.mark.async_timeout(280)
async def test_three_sigkills_then_reload_fetch_the_ground_truth(tmp_path):
    rng = random.Random(4)
    async with Sim(sim_config(31)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.1,
                             pages_connexions=20, checkpoint_interval=0.5)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        total = len(truth.must_request)
        conf = write_conf(tmp_path, config)
        refetch_bound = 0
        args: tuple[str, ...] = ()
        for fraction in sorted(rng.uniform(0.1, 0.85) for _ in range(3)):
            proc = await start_crawler(conf, *args, cwd=str(tmp_path))
            target = int(fraction * total)
            await sim.log.wait_for(lambda log: len(page_requests(log)) >= target, timeout=120)
            proc.kill()
            assert await proc.wait() == -signal.SIGKILL
            with open(tmp_path / "state" / "checkpoint.json") as f:
                last = json.load(f)["time"]
            # what a kill may cost: requests since the last checkpoint, and those in flight at it
            since = sum(1 for r in sim.log.requests if r.path not in ROBOTS_PATHS and r.wall >= last)
            refetch_bound += since + config.pages_connexions
            args = ("--reload",)
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 200) == 0, (tmp_path / "crawler.err").read_text()
        fetched = page_requests(sim.log)
        assert set(fetched) == truth.must_request
        twice = sum(n - 1 for n in Counter(fetched).values() if n > 1)
        assert twice <= refetch_bound
        check_mirror(config.save_dir, truth)
        err = (tmp_path / "crawler.err").read_text()
        assert err.count("continuing the crawl saved in") == 3


STALL_FIRST_CHECKPOINT = '''
import runpy, sys, time
import larbin_py.journal as journal
journal.write_checkpoint = lambda *args, **kw: time.sleep(3600)  # the first checkpoint never ends
sys.argv = ["larbin_py", *sys.argv[1:]]
runpy.run_module("larbin_py", run_name="__main__", alter_sys=True)
'''


@pytest.mark.async_timeout(200)
async def test_a_crawl_killed_before_its_first_checkpoint_is_started_again_by_reload(tmp_path):
    """The first checkpoint is written beside the first requests: a crawl killed before it
    ends (here it never does) kept nothing, and --reload starts it again from its seeds
    (it said "nothing to continue" and a plain start refused the folder: a dead end).
    Twice: the start, then its --reload, each killed before its first checkpoint."""
    async with Sim(sim_config(35)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.1, pages_connexions=6)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        env = dict(os.environ, PYTHONPATH=ROOT)
        state = tmp_path / "state"
        before = 0
        for args in ((), ("--reload",)):
            asked = len(page_requests(sim.log))
            with open(tmp_path / "cut.err", "ab") as err:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", STALL_FIRST_CHECKPOINT, "-c", conf, *args, cwd=str(tmp_path), env=env,
                    stdout=asyncio.subprocess.DEVNULL, stderr=err)
            await sim.log.wait_for(lambda log: len(page_requests(log)) >= asked + 3, timeout=60)
            proc.kill()
            assert await proc.wait() == -signal.SIGKILL
            before, cut_at = len(page_requests(sim.log)), len(sim.log.requests)
            assert not (state / "checkpoint.json").exists() and (state / "seen.log").exists()
        assert (tmp_path / "cut.err").read_text().count("was cut before its first checkpoint") == 1
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 150) == 0, (tmp_path / "crawler.err").read_text()
        err = (tmp_path / "crawler.err").read_text()
        assert "was cut before its first checkpoint" in err and "starts again from its seeds" in err, err
        assert "Traceback" not in err
        fetched = page_requests(sim.log)
        assert set(fetched) == truth.must_request
        twice = sum(n - 1 for n in Counter(fetched).values() if n > 1)
        assert twice <= before  # only what the cut starts had asked
        check_mirror(config.save_dir, truth)
        # the crawl log: none of the cut start's lines; one per page URL, one per robots.txt answer
        with open(state / "crawl.log", encoding="utf-8") as f:
            urls = [line.split("\t")[3] for line in f if line.strip()]
        pages = [u for u in urls if urlsplit(u).path not in ROBOTS_PATHS]
        assert len(pages) == len(set(pages))
        robots_asked_again = Counter(r.url for r in sim.log.requests[cut_at:] if r.path in ROBOTS_PATHS)
        assert Counter(u for u in urls if urlsplit(u).path in ROBOTS_PATHS) == robots_asked_again


def test_what_a_cut_start_leaves_is_removed_but_not_a_recrawl_s_start_or_what_is_not_the_crawl_s(tmp_path):
    from larbin_py.crawl_state import clear_cut_start
    from larbin_py.state import StateError

    state = tmp_path / "state"
    for name in ("seen.log", "robots.log", "journal-00000000.log", "carry-00000001.log", "crawl.log",
                 "frontier/main/seg-0", "records/records-00000001.log", "analysis/queue.log",
                 "lock", "cookies.json", "notes.txt"):
        (state / name).parent.mkdir(parents=True, exist_ok=True)
        (state / name).write_text("x")
    line = clear_cut_start(str(state), str(state / "crawl.log"))
    assert "starts again from its seeds" in line
    assert sorted(p.name for p in state.iterdir()) == ["cookies.json", "lock", "notes.txt"]
    (state / "records").mkdir()
    (state / "records" / "recrawl.json").write_text("{}")
    (state / "seen.log").write_text("x")
    with pytest.raises(StateError, match="start it again with --recrawl"):
        clear_cut_start(str(state), None)
    assert (state / "seen.log").exists()  # nothing removed


@pytest.mark.async_timeout(200)
async def test_sigterm_then_reload_fetches_nothing_twice(tmp_path):
    async with Sim(sim_config(32)) as sim:
        config = make_config(tmp_path, sim, output_mode="warc", wait_duration=0.1, pages_connexions=20)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        proc = await start_crawler(conf, cwd=str(tmp_path))
        await sim.log.wait_for(lambda log: len(page_requests(log)) >= len(truth.must_request) // 3, timeout=120)
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 60) == 143
        # a plain start refuses the folder now
        again = await start_crawler(conf, cwd=str(tmp_path))
        assert await asyncio.wait_for(again.wait(), 60) == 2
        assert "--reload" in (tmp_path / "crawler.err").read_text()
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 200) == 0
        fetched = page_requests(sim.log)
        assert set(fetched) == truth.must_request
        assert len(fetched) == len(set(fetched)), [u for u, n in Counter(fetched).items() if n > 1][:5]
        index = read_index(config.save_dir)
        assert set(index) == set(truth.saved)


class FullDisk:
    """An output that fails with ENOSPC after ``pages`` writes (a full disk)."""

    def __init__(self, real, pages: int):
        self.real, self.left = real, pages

    def write(self, doc):
        if self.left <= 0:
            raise OutputError(f"cannot write {doc.url}: no space left on device (ENOSPC)", errno=errno.ENOSPC)
        self.left -= 1
        return self.real.write(doc)

    def __getattr__(self, name):
        return getattr(self.real, name)


@pytest.mark.async_timeout(200)
async def test_a_full_disk_stops_cleanly_and_reload_continues(tmp_path):
    async with Sim(sim_config(33)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.05, checkpoint_interval=0.3)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        err = open(tmp_path / "err.txt", "w+")
        first = Engine(config, output=FullDisk(make_output(config), 40), err=err)
        summary = await first.run()
        assert summary.failed and "no space left on device" in summary.failed
        assert summary.pages < len(truth.saved)
        err.seek(0)
        assert "no space left on device" in err.read()
        second = Engine(config, reload=True, err=err)
        summary = await second.run()
        assert summary.failed is None and summary.stop_reason == "end of work"
        assert set(page_requests(sim.log)) == truth.must_request
        check_mirror(config.save_dir, truth)
        assert summary.pages == len(truth.saved)


@pytest.mark.async_timeout(200)
async def test_what_follows_the_last_commit_is_cut_and_a_torn_journal_line_reported(tmp_path):
    async with Sim(sim_config(34)) as sim:
        config = make_config(tmp_path, sim, output_mode="stats", wait_duration=0.05, limit_page=60)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        await Engine(config).run()
        state = tmp_path / "state"
        main = state / "frontier" / "main"
        last = sorted(os.listdir(main))[-1]
        with open(main / last, "ab") as f:  # appended after the last commit, then cut by a crash
            f.write(b"0123abcd 3 3 http://torn.sim.test/half-a-rec")
        [journal] = [n for n in os.listdir(state) if n.startswith("journal-")]
        with open(state / journal, "ab") as f:  # a commit line cut by the crash
            f.write(b'0badc0de {"done":[["http://never.sim.test/","')
        err = open(tmp_path / "err.txt", "w+")
        summary = await Engine(config.replace(limit_page=0), reload=True, err=err).run()
        err.seek(0)
        text = err.read()
        assert "damaged state dropped" in text and "journal 1 records" in text
        assert summary.stop_reason == "end of work"
        assert set(page_requests(sim.log)) == truth.must_request
        assert not any("torn.sim.test" in r.url for r in sim.log.requests)


def test_an_incompatible_state_is_refused(tmp_path):
    from larbin_py.state import StateError, read_checkpoint

    state = tmp_path / "state"
    state.mkdir()
    (state / "checkpoint.json").write_text(json.dumps({"format": "larbin_py-state", "version": 99}))
    with pytest.raises(StateError, match="version 99"):
        read_checkpoint(str(state))
    (state / "checkpoint.json").write_text("{ torn")
    with pytest.raises(StateError, match="unreadable"):
        read_checkpoint(str(state))
    assert files_under(state) == {"checkpoint.json"}


def limit_file_size(limit: int):
    """A preexec_fn: files the child writes stop at ``limit`` bytes (EFBIG, not SIGXFSZ)."""
    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # ignored dispositions survive exec
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


async def crawl_process(conf: str, *args: str, cwd: str, preexec=None) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbin_py", "-c", conf, *args, cwd=cwd, env=env, preexec_fn=preexec,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 150)
    return proc.returncode, err.decode()


@pytest.mark.async_timeout(280)
@pytest.mark.parametrize("hosts,ignore_robots,interval,failing,workers", [
    (60, False, 0.3, "robots.log", 0),  # robots.txt answers' log, at a checkpoint
    (150, True, 30.0, "frontier", 0),  # a URL store, flushed by a page's links (a task)
    (20, True, 30.0, "analysis/bodies-00000001.bin", 1),  # the analysis queue's spool (issue 22)
])
async def test_a_state_file_that_cannot_grow_stops_cleanly_and_reload_finishes(tmp_path, hosts, ignore_robots,
                                                                               interval, failing, workers):
    """RLIMIT_FSIZE makes the real state writes fail with EFBIG, as a full disk
    does with ENOSPC: one clear line naming the file, the summary, exit 1."""
    sim_cfg = dataclasses.replace(sim_config(35), hosts=hosts)
    wait = 0.05
    if failing.startswith("analysis/"):
        # The spool must pass the limit before the URL stores (whose lines carry how each
        # URL was found): pages of 8-16 kB fill it in two pages once the analysis process
        # runs, and until it does (pages parsed on the loop) 20 hosts at 5 pages/s each
        # add their links slowly.
        sim_cfg = dataclasses.replace(sim_cfg, body_size=(8_000, 16_000))
        wait = 0.2
    async with Sim(sim_cfg) as sim:
        config = make_config(tmp_path, sim, output_mode="stats", wait_duration=wait,
                             checkpoint_interval=interval, ignore_robots=ignore_robots, analysis_workers=workers)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        code, err = await crawl_process(conf, cwd=str(tmp_path), preexec=limit_file_size(16 * 1024))
        line = check_clean_write_failure(code, err, tmp_path / "state" / failing, "file too large (EFBIG)")
        assert "ulimit -f" in line
        assert len(set(page_requests(sim.log))) < len(truth.must_request)
        code, err = await crawl_process(conf, "--reload", cwd=str(tmp_path))
        assert code == 0, err
        assert "continuing the crawl saved in" in err and "end of work" in err
        assert set(page_requests(sim.log)) == truth.must_request


def check_clean_write_failure(code: int, err: str, path, reason: str) -> str:
    """Exit 1, one line naming ``path`` and ``reason``, the summary, no traceback."""
    assert code == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    [line] = [line for line in err.splitlines() if line.startswith("larbin_py: cannot write")]
    assert f"{path}: {reason}" in line and "--reload" in line, line
    assert "URLs taken" in err and "FAILED: cannot write" in err  # the summary
    return line


@pytest.mark.async_timeout(280)
async def test_a_full_disk_under_the_seen_log_stops_cleanly_and_reload_finishes(tmp_path):
    """ENOSPC for real: seen.log made a link to /dev/full on a --reload."""
    async with Sim(sim_config(36)) as sim:
        config = make_config(tmp_path, sim, output_mode="stats", wait_duration=0.05, checkpoint_interval=0.3)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        code, err = await crawl_process(conf, "--set", "limitPage=60", cwd=str(tmp_path))
        assert code == 0, err
        seen = tmp_path / "state" / "seen.log"
        kept = seen.read_bytes()
        seen.unlink()
        seen.symlink_to("/dev/full")
        code, err = await crawl_process(conf, "--reload", cwd=str(tmp_path))
        check_clean_write_failure(code, err, seen, "no space left on device (ENOSPC)")
        seen.unlink()
        seen.write_bytes(kept)
        code, err = await crawl_process(conf, "--reload", cwd=str(tmp_path))
        assert code == 0, err
        assert "end of work" in err
        assert set(page_requests(sim.log)) == truth.must_request


@pytest.mark.async_timeout(200)
async def test_a_segment_cut_before_the_checkpoint_position_is_reported_and_the_crawl_goes_on(tmp_path):
    """A store segment cut short (before the checkpoint's read position): --reload
    says which file and what was lost, keeps the rest, and ends its crawl."""
    async with Sim(sim_config(37)) as sim:
        config = make_config(tmp_path, sim, output_mode="stats", wait_duration=0.05, ram_urls=50)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        code, err = await crawl_process(conf, "--set", "limitPage=100", cwd=str(tmp_path))
        assert code == 0, err
        first = set(page_requests(sim.log))
        with open(tmp_path / "state" / "checkpoint.json") as f:
            seg, off = json.load(f)["frontier"]["stores"]["main"]
        assert off > 200, off  # URLs wait on disk: the read position is inside the log
        segment = tmp_path / "state" / "frontier" / "main" / f"seg-{seg:08d}.log"
        with open(segment, "r+b") as f:
            f.truncate(off // 2 + 3)  # in the middle of a record, before the read position
        kept = segment.read_bytes().rfind(b"\n") + 1  # up to the last whole record
        assert 0 < kept < off // 2 + 3
        code, err = await crawl_process(conf, "--reload", cwd=str(tmp_path))
        assert code == 0, err
        assert "Traceback" not in err
        assert (f"larbin_py: damaged state: {segment}: {kept} bytes, cut before the checkpoint's "
                f"read position (byte {off}): whatever was queued after that point is lost, the rest of "
                "the store is kept") in err
        assert "end of work" in err and "queued 0 + in flight 0" in err
        fetched = set(page_requests(sim.log))
        assert first < fetched <= truth.must_request  # the crawl went on with what was kept
