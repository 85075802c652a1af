"""The seen store on disk (larbin_py.frontier.sieve): exact, crash-safe, merging off the loop.

Small thresholds make a few thousand fingerprints go through many seals,
compactions and merges; a Python set is the truth.  The crash tests kill a
process with SIGKILL in the middle of a merge and reopen its state the way
``--reload`` does (the log cut back to the last commit, then loaded).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from larbin_py.frontier import sieve as sieve_mod
from larbin_py.frontier.interfaces import SeenStore
from larbin_py.frontier.seen import SeenSet
from larbin_py.frontier.sieve import RUN_NAME, Sieve, open_seen

SMALL = dict(first_merge=600, ratio=2, seal_at=150, hot_size=64)


def batches(seed: int, count: int, size: int = 60, again: float = 0.4):
    """Random batches: new fingerprints, and ones met before (in this batch or earlier)."""
    rng = random.Random(seed)
    met: list[int] = []
    for _ in range(count):
        batch = []
        for _ in range(rng.randrange(1, size)):
            if met and rng.random() < again:
                batch.append(rng.choice(met))
            else:
                fp = rng.getrandbits(64)
                met.append(fp)
                batch.append(fp)
        yield batch


def check_against_a_set(store, seed: int, count: int, truth: set[int] | None = None, *, log=None) -> set[int]:
    truth = set() if truth is None else truth
    for batch in batches(seed, count):
        expected, here = [], set()
        for fp in batch:
            expected.append(fp not in truth and fp not in here)
            here.add(fp)
        assert store.add_many(batch) == expected
        truth |= here
        if log is not None:  # a commit: the log written, and said so
            store.flush()
            store.committed(os.path.getsize(log))
    return truth


@pytest.mark.parametrize("background", [False, True])
def test_exact_against_a_set_across_seals_and_merges(tmp_path, background):
    store = Sieve(str(tmp_path), background=background, **SMALL)
    truth = check_against_a_set(store, 1, 400)
    store.wait_merges()
    assert store.merges >= 2 and store._run is not None and store._run.count > 1000
    assert len(store) == len(truth)
    # every one seen, and fresh ones not: through the run, the chunks and the recent set
    assert all(fp in store for fp in truth)
    rng = random.Random(99)
    fresh = [rng.getrandbits(64) for _ in range(500)]
    assert store.add_many(fresh) == [fp not in truth for fp in fresh]
    assert store.run_tests > 0 and store.run_misses < store.run_tests
    store.close()
    assert isinstance(store, SeenStore)


@pytest.mark.parametrize("make", [lambda d: SeenSet(hot_size=8),
                                  lambda d: Sieve(d, first_merge=50, seal_at=40, hot_size=8, background=False)])
def test_a_hot_fingerprint_stays_seen_when_the_hot_cache_overflows(tmp_path, make):
    """A batch answered partly from the hot cache and overflowing it (a bug: those were answered new)."""
    store = make(str(tmp_path))
    old = list(range(1, 101))
    store.add_many(old)
    if isinstance(store, SeenSet):
        store.merge()
    else:
        store.merge()
    store.add_many(old[:8])  # now hot
    again = old[:8] + old[50:60]  # 8 from the hot cache + 10 found in the store: 18 > 8
    assert store.add_many(again) == [False] * 18
    assert len(store) == 100


def test_merges_wait_for_the_commits_and_the_run_never_covers_more(tmp_path):
    log = str(tmp_path / "seen.log")
    store = Sieve(str(tmp_path), background=False, **SMALL)
    store.open_log(log)
    truth = check_against_a_set(store, 2, 100)
    assert store._run is None and store.merges == 0  # nothing committed: all in RAM
    store.flush()
    store.committed(os.path.getsize(log))
    check_against_a_set(store, 3, 5, truth)
    assert store._run is not None
    assert 8 * store._run.covers <= os.path.getsize(log)
    store.close()


def reopen_cut(tmp_path, cut: int, **kw) -> Sieve:
    """--reload: the log cut back to a commit's length, then the store loaded."""
    log = str(tmp_path / "seen.log")
    if os.path.getsize(log) > cut:
        os.truncate(log, cut)
    return Sieve.load(str(tmp_path), log, **{**SMALL, **kw})


def logged(tmp_path) -> list[int]:
    return np.fromfile(str(tmp_path / "seen.log"), dtype="<u8").tolist()


def test_reload_gives_the_log_back_exactly_and_goes_on(tmp_path):
    log = str(tmp_path / "seen.log")
    store = Sieve(str(tmp_path), background=True, **SMALL)
    store.open_log(log)
    commits = []
    for i, batch in enumerate(batches(4, 300)):
        store.add_many(batch)
        store.flush()
        commits.append(os.path.getsize(log))
        if i % 7 == 0:
            store.committed(commits[-1])
    store.wait_merges()
    covers = 8 * store._run.covers
    store.close()
    # cut back to a commit after the run's coverage: the log's prefix is what is seen, no more
    cut = next(c for c in commits if c > covers + 800)
    prefix = logged(tmp_path)[: cut // 8]
    later = logged(tmp_path)[cut // 8:]
    back = reopen_cut(tmp_path, cut)
    assert not back.rebuilt and 8 * back._run.covers == covers
    assert len(back) == len(prefix)
    assert back.add_many(prefix) == [False] * len(prefix)
    assert back.add_many(later) == [True] * len(later)  # cut away: new again
    back.close()


def test_a_run_ahead_of_the_log_is_rebuilt_and_a_torn_tail_dropped(tmp_path):
    log = str(tmp_path / "seen.log")
    store = Sieve(str(tmp_path), background=False, **SMALL)
    store.open_log(log)
    check_against_a_set(store, 5, 200, log=log)  # every commit lets the run take all
    store.merge()
    covers = 8 * store._run.covers
    store.close()
    cut = covers - 8 * 100  # a machine crash lost the log's end after the run took it
    prefix = logged(tmp_path)[: cut // 8]
    lost = logged(tmp_path)[cut // 8:]
    with open(log, "r+b") as f:
        f.truncate(cut)
        f.seek(cut)
        f.write(b"\x01\x02\x03")  # a torn record
    back = Sieve.load(str(tmp_path), log, **SMALL)
    assert back.rebuilt and back.dropped_bytes == 3 and os.path.getsize(log) == cut
    assert back.add_many(prefix) == [False] * len(prefix)
    assert back.add_many(lost) == [True] * len(lost)
    back.close()


def test_a_damaged_run_is_rebuilt(tmp_path):
    log = str(tmp_path / "seen.log")
    store = Sieve(str(tmp_path), background=False, **SMALL)
    store.open_log(log)
    check_against_a_set(store, 6, 100, log=log)
    store.merge()
    store.close()
    with open(tmp_path / RUN_NAME, "r+b") as f:
        f.seek(4096 + 8 * 10)
        f.write(b"\xff" * 8)  # one fingerprint changed: the CRC no longer holds
    back = Sieve.load(str(tmp_path), log, **SMALL)
    every = logged(tmp_path)
    assert back.rebuilt and back.add_many(every) == [False] * len(every)
    back.close()


CHILD = textwrap.dedent("""
    import os, sys, time, random
    sys.path.insert(0, {root!r})
    from larbin_py.frontier import sieve as sv
    where = sys.argv[2]
    real = os.replace if where == "before-rename" else sv._sync_dir
    merges = [0]
    def stall(*args):
        merges[0] += 1
        if merges[0] == 3:  # the third merge: say so, and wait for the kill
            os.write(1, b"merging\\n")  # one write a line: print writes its pieces apart,
            time.sleep(60)
        return real(*args)
    if where == "before-rename":
        sv.os.replace = stall
    else:
        sv._sync_dir = stall
    d = sys.argv[1]
    log = os.path.join(d, "seen.log")
    store = sv.Sieve(d, first_merge=600, ratio=2, seal_at=150)
    store.open_log(log)
    rng = random.Random(7)
    for i in range(100000):
        store.add_many([rng.getrandbits(64) for _ in range(50)])
        store.flush()
        size = os.path.getsize(log)
        os.write(1, b"commit %d\\n" % size)  # and the merge thread writes while this loop does
        store.committed(size)
        time.sleep(0.001)
""")


@pytest.mark.parametrize("where", ["before-rename", "after-rename"])
def test_sigkill_during_a_merge_loses_nothing_committed(tmp_path, where):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(root=root))
    state = tmp_path / "state"
    state.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(state), where], stdout=subprocess.PIPE, text=True)
    last = 0
    try:
        for line in proc.stdout:
            if line.startswith("commit"):
                last = int(line.split()[1])
            elif line.startswith("merging"):
                break
        else:
            pytest.fail("the child ended before its third merge")
        # more commits may come while the merge waits: read a few more
        for _ in range(5):
            line = proc.stdout.readline()
            if line.startswith("commit"):
                last = int(line.split()[1])
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert (where == "before-rename") == os.path.exists(state / (RUN_NAME + ".tmp"))
    every = logged(state)
    prefix, after = every[: last // 8], every[last // 8:]
    back = reopen_cut(state, last)  # the journal's cut to the last commit
    assert not back.rebuilt and back._run is not None and 8 * back._run.covers <= last
    assert not os.path.exists(state / (RUN_NAME + ".tmp"))
    assert len(back) == len(prefix)
    assert back.add_many(prefix) == [False] * len(prefix)
    assert back.add_many(after) == [True] * len(after)
    back.close()


def test_open_seen_picks_the_store_and_each_reads_the_others_log(tmp_path):
    d = str(tmp_path)
    log = os.path.join(d, "seen.log")
    first = open_seen("array", d)
    assert isinstance(first, SeenSet)
    first.open_log(log)
    truth = check_against_a_set(first, 8, 50)
    first.close()
    for kind in ("disk", "auto", "array"):
        back = open_seen(kind, d, reload=True)
        assert isinstance(back, SeenSet if kind == "array" else Sieve)
        assert len(back) == len(truth) and all(fp in back for fp in truth)
        back.close()
    assert isinstance(open_seen("auto", d), Sieve)


def test_a_batch_reads_one_block_per_key_at_most(tmp_path):
    """The bound on a batch's disk work: the run is touched only for keys the filter lets through."""
    store = Sieve(str(tmp_path), background=False, first_merge=1000, seal_at=1000)
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**64, size=20000, dtype=np.uint64)
    for i in range(0, keys.size, 1000):
        store.add_many(keys[i:i + 1000].tolist())
    store.merge()
    assert store._run.count == keys.size and not store._chunks
    before, misses = store.run_tests, store.run_misses
    fresh = rng.integers(0, 2**64, size=5000, dtype=np.uint64).tolist()
    assert store.add_many(fresh) == [True] * 5000
    passed = store.run_tests - before
    assert passed == store.run_misses - misses and passed < 5000 * 0.04  # the filter's false positives only
    store._hot.clear()
    old = keys[:200].tolist()
    before = store.run_tests
    assert store.add_many(old) == [False] * 200
    assert store.run_tests - before == 200  # one block each
    store.close()


SMALL_SIEVE_CRAWLER = ("import sys; from larbin_py.frontier import sieve; "
                       "sieve.SEAL_AT = sieve.DISK_FIRST_MERGE = 16; "
                       "from larbin_py.cli import main; sys.exit(main(sys.argv[1:]))")


async def start_small_sieve_crawler(conf: str, *args: str, cwd: str) -> asyncio.subprocess.Process:
    """The crawler, its sieve merging every 16 URLs (so a small sim crawl goes through many merges)."""
    from helpers.state import ROOT

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    err = open(os.path.join(cwd, "crawler.err"), "ab")
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", SMALL_SIEVE_CRAWLER, "-c", conf, *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=err)


@pytest.mark.slow
@pytest.mark.async_timeout(200)
async def test_a_crawl_on_the_disk_sieve_killed_twice_then_reloaded_fetches_the_ground_truth(tmp_path):
    from collections import Counter

    from larbin_py.demo import crawl_rules
    from larbin_py.sim import Sim
    from helpers.crawl import make_config
    from helpers.state import check_mirror, page_requests, sim_config, write_conf

    async with Sim(sim_config(33)) as sim:
        config = make_config(tmp_path, sim, output_mode="mirror", wait_duration=0.05, pages_connexions=20,
                             checkpoint_interval=60.0, seen_store="disk")
        truth = sim.truth(crawl_rules(config, sim.seeds))
        total = len(truth.must_request)
        conf = write_conf(tmp_path, config)
        args: tuple[str, ...] = ()
        for fraction in (0.3, 0.6):
            proc = await start_small_sieve_crawler(conf, *args, cwd=str(tmp_path))
            await sim.log.wait_for(lambda log: len(page_requests(log)) >= int(fraction * total), timeout=120)
            proc.kill()
            assert await proc.wait() == -signal.SIGKILL
            assert os.path.exists(tmp_path / "state" / RUN_NAME)  # the sieve had merged into its run
            args = ("--reload",)
        proc = await start_small_sieve_crawler(conf, "--reload", cwd=str(tmp_path))
        assert await asyncio.wait_for(proc.wait(), 150) == 0, (tmp_path / "crawler.err").read_text()
        fetched = page_requests(sim.log)
        assert set(fetched) == truth.must_request  # no URL lost to a false "seen"
        twice = sum(n - 1 for n in Counter(fetched).values() if n > 1)
        assert twice <= 2 * config.pages_connexions  # a kill costs the requests in flight
        check_mirror(config.save_dir, truth)


def test_a_merge_that_cannot_write_keeps_everything_and_flush_reports_it(tmp_path, monkeypatch):
    import errno

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    log = str(tmp_path / "seen.log")
    store = Sieve(str(tmp_path), background=True, **SMALL)
    store.open_log(log)
    monkeypatch.setattr(sieve_mod.os, "replace", full)
    truth = check_against_a_set(store, 9, 60, log=None)
    store.flush()
    store.committed(os.path.getsize(log))
    check_against_a_set(store, 10, 60, truth)  # a merge starts, fails; the answers stay exact
    store.wait_merges()
    assert store.failed is not None and store.failed.filename.endswith(RUN_NAME + ".tmp")
    with pytest.raises(OSError, match="No space"):
        store.flush()
    assert all(fp in store for fp in truth) and len(store) == len(truth)
    store.close()
