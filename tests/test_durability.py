"""Issue 18 #2-#4: a crash costs only the requests in flight; disk work off the loop.

The crawler runs as a real process against a sim served by the test's own
loop and is killed with SIGKILL at random moments, each followed by
``--reload``; the sim's request log is the ground truth of what was served.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import time
from collections import Counter

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.engine import Engine
from larbin_py.output import INDEX_NAME, make_output
from larbin_py.output import writer as writer_mod
from larbin_py.sim import Sim

from helpers.state import check_mirror, page_requests, sim_config, start_crawler, write_conf
from helpers.crawl import loop_gaps, make_config

pytestmark = pytest.mark.slow


def conservation(err_text: str) -> tuple[int, int]:
    """(taken, fetched + forgotten + queued + in flight) from the last summary printed."""
    m = re.findall(r"URLs taken\s+(\d+) = fetched (\d+) \+ forgotten (\d+) \+ queued (\d+) \+ in flight (\d+)",
                   err_text)
    taken, fetched, forgotten, queued, in_flight = map(int, m[-1])
    assert queued == 0 and in_flight == 0
    return taken, fetched + forgotten


@pytest.mark.async_timeout(280)
@pytest.mark.parametrize("mode", ["mirror", "save"])
async def test_sigkills_cost_at_most_the_requests_in_flight(tmp_path, mode):
    rng = random.Random(18 if mode == "mirror" else 19)
    async with Sim(sim_config(41)) as sim:
        # Checkpoints far apart: without the journal a kill would cost everything since the last.
        # In save mode the sites' queues are small (3 URLs, 60 in all, parks of 15 in all): the
        # kills then find URLs in every place the frontier keeps them (FIFOs, parks, the wait lane).
        small = dict(max_urls_by_site=3, ram_urls=60) if mode == "save" else {}
        config = make_config(tmp_path, sim, output_mode=mode, wait_duration=0.05,
                             pages_connexions=8, checkpoint_interval=60.0, **small)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        total = len(truth.must_request)
        conf = write_conf(tmp_path, config)
        args: tuple[str, ...] = ()
        kills = 0
        for fraction in sorted(rng.uniform(0.15, 0.85) for _ in range(3)):
            proc = await start_crawler(conf, *args, cwd=str(tmp_path))
            target = int(fraction * total)
            await sim.log.wait_for(lambda log: len(page_requests(log)) >= target, timeout=120)
            proc.kill()
            assert await proc.wait() == -signal.SIGKILL
            kills += 1
            args = ("--reload",)
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 200) == 0, (tmp_path / "crawler.err").read_text()
        err = (tmp_path / "crawler.err").read_text()
        assert err.count("continuing the crawl saved in") == 3
        fetched = page_requests(sim.log)
        assert set(fetched) == truth.must_request  # full coverage, nothing lost
        twice = sum(n - 1 for n in Counter(fetched).values() if n > 1)
        # pagesConnexions bounds the requests in flight (and not yet committed) at a kill
        print(f"{mode}: {twice} pages served twice after {kills} kills")
        assert twice <= kills * config.pages_connexions, twice
        with open(os.path.join(config.save_dir, INDEX_NAME), encoding="utf-8") as f:
            lines = f.read().splitlines()
        assert len(lines) == len({line.split("\t", 1)[0] for line in lines}) == len(truth.saved)
        if mode == "mirror":
            check_mirror(config.save_dir, truth)  # every file named is whole, as served
        else:
            for line in lines:
                url, path = line.split("\t")[:2]
                with open(os.path.join(config.save_dir, path), "rb") as f:
                    assert f.read() == truth.saved[url], url
        taken, accounted = conservation(err)
        assert taken == accounted


class SlowDisk:
    """An output whose every write takes ``delay`` seconds (a slow disk)."""

    def __init__(self, real, delay: float):
        self.real, self.delay = real, delay
        self.threads: set[str] = set()

    def write(self, doc):
        import threading

        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)  # the disk, not the test, waits
        return self.real.write(doc)

    def __getattr__(self, name):
        return getattr(self.real, name)


@pytest.mark.async_timeout(120)
async def test_a_slow_disk_never_blocks_the_loop_and_the_gate_bounds_its_queue(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_mod, "MAX_BACKLOG", 4)
    async with Sim(sim_config(42)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.0,
                             pages_connexions=6, limit_page=40)
        disk = SlowDisk(make_output(config), 0.1)
        engine = Engine(config, output=disk)
        writer = lambda: engine.edge.writer.backlog if engine.edge.writer is not None else None  # noqa: E731
        async with loop_gaps(writer) as (gaps, backlog):
            summary = await engine.run()
        assert summary.failed is None
        assert summary.pages >= 40
        assert disk.threads == {"larbin-writer"}
        # 40 writes of 0.1 s took 4 s; the loop never waited for one of them: a write
        # on the loop would stop its 5 ms ticker for 0.1 s each time, 40 times (a loaded
        # machine may deschedule the loop as long a few times: not 40)
        assert sum(g >= 0.1 for g in gaps) <= 3, sorted(gaps)[-10:]
        # the gate held: a request starts only while requests running plus outcomes not yet
        # committed are under pagesConnexions, so the writer holds at most that many pages;
        # commits that find the writer behind (one running, one waiting) wait and grow
        # instead of queueing (records and crawl-log lines made one job each, 16 was seen);
        # plus a checkpoint and the cookie jar; the 4-job gate (MAX_BACKLOG) closes below that
        assert max(backlog) <= config.pages_connexions + 4, max(backlog)


def _commits(state_dir) -> list[dict]:
    """The commit lines of the journals in ``state_dir``, in order."""
    from larbin_py.journal import decode_commit, journal_name, _journal_serials

    records = []
    for n in _journal_serials(str(state_dir)):
        with open(os.path.join(state_dir, journal_name(n)), "rb") as f:
            records.extend(r for r in map(decode_commit, f) if r is not None)
    return records


@pytest.mark.async_timeout(200)
@pytest.mark.parametrize("damage", ["page missing", "page short", "store short"])
async def test_reload_drops_the_commits_a_machine_crash_left_without_their_files(tmp_path, damage):
    """A power loss keeps what the last checkpoint fsynced, and maybe the
    journal lines after it without what they cover: --reload checks each
    commit against the files and goes back to the last one wholly on disk;
    the pages of the commits dropped are fetched again and nothing is lost."""
    mode = "save" if damage == "page short" else "mirror"
    async with Sim(sim_config(43)) as sim:
        config = make_config(tmp_path, sim, output_mode=mode, wait_duration=0.05,
                             pages_connexions=8, checkpoint_interval=60.0)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        conf = write_conf(tmp_path, config)
        proc = await start_crawler(conf, cwd=str(tmp_path))
        await sim.log.wait_for(lambda log: len(page_requests(log)) >= len(truth.must_request) // 2, timeout=120)
        proc.kill()
        assert await proc.wait() == -signal.SIGKILL
        state = tmp_path / "state"
        commits = _commits(state)
        lengths = [int(c["output"]["index_length"]) for c in commits]
        # the commit to damage: in the middle, one that added index lines (and store records)
        middle = [k for k in range(len(commits) // 3, len(commits))
                  if k > 0 and lengths[k] > lengths[k - 1]
                  and tuple(commits[k]["stores"]["main"]) > tuple(commits[k - 1]["stores"]["main"])]
        assert middle, "no commit after the checkpoint to damage"
        k = middle[0]
        with open(os.path.join(config.save_dir, INDEX_NAME), "rb") as f:
            f.seek(lengths[k - 1])
            first_line = f.readline().decode()
        url, path = first_line.split("\t")[:2]  # the first page commit k covers
        target = os.path.join(config.save_dir, path)
        if damage == "page missing":
            os.unlink(target)  # its rename never reached the disk
        elif damage == "page short":
            os.truncate(target, os.path.getsize(target) // 2)  # its data only half written
        else:
            seg, off = commits[k]["stores"]["main"]
            segment = state / "frontier" / "main" / f"seg-{seg:08d}.log"
            os.truncate(segment, off - 1)  # the store lost the end of what commit k covers
            url = None
        before = Counter(page_requests(sim.log))
        proc = await start_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 150) == 0, (tmp_path / "crawler.err").read_text()
        err = (tmp_path / "crawler.err").read_text()
        assert f"{len(commits) - k} commits of the journal dropped" in err, err
        fetched = page_requests(sim.log)
        assert set(fetched) == truth.must_request  # nothing lost
        if url is not None:
            assert Counter(fetched)[url] == before[url] + 1  # the damaged page fetched again
        again = Counter(fetched) - before
        assert sum(again.values()) < len(truth.must_request)  # not the whole crawl again
        with open(os.path.join(config.save_dir, INDEX_NAME), encoding="utf-8") as f:
            lines = f.read().splitlines()
        assert len(lines) == len({line.split("\t", 1)[0] for line in lines}) == len(truth.saved)
        for line in lines:  # every file named is whole
            url, path = line.split("\t")[:2]
            with open(os.path.join(config.save_dir, path), "rb") as f:
                assert f.read() == truth.saved[url], url
        taken, accounted = conservation(err)
        assert taken == accounted


@pytest.mark.async_timeout(120)
@pytest.mark.parametrize("sync_commits", [False, True])
async def test_commits_are_fsynced_only_with_sync_commits(tmp_path, monkeypatch, sync_commits):
    """By default a commit is written into the kernel (a killed process keeps
    it) and fsynced at the next checkpoint; syncCommits fsyncs each one."""
    synced: list[str] = []
    real = os.fdatasync

    def fdatasync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    posts = []
    real_post = writer_mod.WriterThread._post
    monkeypatch.setattr(writer_mod.WriterThread, "_post",
                        lambda self, fn, *args: (posts.append(fn), real_post(self, fn, *args)))
    async with Sim(sim_config(44)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.02, pages_connexions=4,
                             checkpoint_interval=60.0, sync_commits=sync_commits)
        engine = Engine(config)
        summary = await engine.run()
        assert summary.failed is None and summary.pages > 50
    commits = engine.crawl_state.committer.commits
    journal_syncs = sum(1 for path in synced if os.path.basename(path).startswith("journal-"))
    page_syncs = sum(1 for path in synced if path.startswith(config.save_dir + os.sep)
                     and not path.endswith(INDEX_NAME))
    assert commits > 2 * engine.crawl_state.checkpoints + 10, commits
    if sync_commits:
        assert journal_syncs >= commits
    else:
        # the start's and the end's checkpoints: nothing per commit
        assert journal_syncs <= engine.crawl_state.checkpoints, (journal_syncs, commits)
    # each page file is synced once either way: by its commit or by a checkpoint
    assert page_syncs == summary.pages
    # a commit wakes the loop only when the gate waits for it (pagesConnexions 4 makes it wait at times)
    woken = sum(1 for fn in posts if fn == engine._pump_soon)
    assert len(posts) - woken <= engine.crawl_state.checkpoints + 2, (len(posts), woken)
    assert woken < commits, (woken, commits)


@pytest.mark.async_timeout(200)
async def test_a_full_disk_under_the_journal_names_it_and_reload_finishes(tmp_path):
    """ENOSPC for real on the journal (a link to /dev/full, made once the
    --reload has read the journals): the crawl stops with one line naming
    the journal; --reload then finishes the crawl."""
    from larbin_py.journal import journal_name

    async with Sim(sim_config(45)) as sim:
        config = make_config(tmp_path, sim, output_mode="stats", wait_duration=0.05, checkpoint_interval=60.0)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        summary = await Engine(config.replace(limit_page=60)).run()
        assert summary.failed is None
        state = tmp_path / "state"
        with open(state / "checkpoint.json") as f:
            serial = json.load(f)["serial"]
        err = open(tmp_path / "err.txt", "w+")
        engine = Engine(config, reload=True, err=err)
        journal = state / journal_name(serial + 1)  # the one its first checkpoint starts
        journal.symlink_to("/dev/full")
        summary = await engine.run()
        err.seek(0)
        text = err.read()
        assert summary.failed and f"{journal}: no space left on device (ENOSPC)" in summary.failed, text
        assert "Traceback" not in text
        journal.unlink()
        summary = await Engine(config, reload=True, err=err).run()
        assert summary.failed is None and summary.stop_reason == "end of work"
        assert set(page_requests(sim.log)) == truth.must_request


def test_a_journal_that_is_not_a_regular_file_is_damage_not_an_endless_read(tmp_path):
    from larbin_py.journal import journal_name, read_journals

    os.symlink("/dev/zero", tmp_path / journal_name(1))
    replay = read_journals(str(tmp_path), 1)
    assert replay.damaged == 1 and replay.commits == 0
