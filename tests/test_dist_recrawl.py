"""``--workers 2 --recrawl``: a distributed crawl visited again with conditional requests.

A tree served by a real nginx (its access log says what was asked and
answered), crawled by the launcher's two workers on their private Redis;
then files changed and deleted, and the recrawl: exactly the changed pages
fetched with 200 and rewritten, the deleted ones gone, every other page a
304 asked with its validators whichever worker asks it, its file untouched,
the crawl reaching every page it reached before, the verdicts counted once
each in Redis with the acks.  A worker that cannot read the links log its
token names asks plainly; a worker SIGKILLed mid-recrawl hands its
partitions over and nothing is lost.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import shutil
import signal
from collections import Counter

import pytest

from larbin_py.distributed.launcher import Launcher
from larbin_py.distributed.records import read_generation, worker_root
from larbin_py.distributed.redisio import RedisIO
from larbin_py.frontier.store import decode_record
from larbin_py.records import links_path, records_path

from helpers.distributed import LEASE_TTL, wait_for
from helpers.nginx import served
from test_recrawl import Site, change_and_delete, check_answers, check_mirror_is_the_tree, pages_of, tree

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class DistSite(Site):
    """The crawls of one served tree by ``--workers 2`` (the launcher, in this process)."""

    def __init__(self, tmp_path, web, srv, **changes) -> None:
        super().__init__(tmp_path, web, srv, partitions=16, lease_ttl=LEASE_TTL, **changes)
        self.env = dict(os.environ, PYTHONPATH=HERE)

    def launcher(self, *, recrawl: bool = False) -> tuple[Launcher, io.StringIO]:
        out = io.StringIO()
        return Launcher(self.config, 2, out=out, env=self.env, recrawl=recrawl), out

    async def run(self, *, recrawl: bool = False):
        self.srv.clear()
        launcher, out = self.launcher(recrawl=recrawl)
        code = await launcher.run()
        assert code == 0, out.getvalue()[-3000:]
        return launcher, out.getvalue(), self.srv.requests()


def verdicts_of(text: str) -> dict[str, int]:
    """The launcher summary's recrawl line: ``{verdict: n}``."""
    line = next(x for x in text.splitlines() if x.startswith("  recrawl "))
    out = {k: int(v) for v, k in re.findall(r"(\d+) not (modified)", line)}
    out = {"notModified": out["modified"]}
    out.update({k: int(v) for k, v in re.findall(r"(unchanged|changed|new|gone|kept) (\d+)", line)})
    return out


def recorded(state_dir: str, worker: str, generation: int) -> set[str]:
    with open(records_path(worker_root(state_dir, worker), generation), "rb") as f:
        return {decode_record(line).url for line in f}


@pytest.mark.async_timeout(240)
async def test_workers_recrawl_with_validators_rewrite_only_what_changed_and_ask_plainly_without_the_links(
        tmp_path):
    web = tree(seed=23, hosts=4, pages=20)
    async with served(web, web.port) as srv:
        site = DistSite(tmp_path, web, srv)
        _, _, before = await site.run()
        index1 = site.index()
        assert len(index1) >= 60
        check_mirror_is_the_tree(site, index1)
        state = site.config.state_dir
        assert read_generation(state).finished
        # each worker recorded the pages it fetched, each page once
        by_worker = {w: recorded(state, w, 1) for w in ("w1", "w2")}
        assert by_worker["w1"] and by_worker["w2"] and not by_worker["w1"] & by_worker["w2"]
        assert by_worker["w1"] | by_worker["w2"] == set(index1)
        fetched = sorted(index1)
        changed, deleted = change_and_delete(site, fetched)
        mtimes = site.mtimes()

        launcher, text, after = await site.run(recrawl=True)
        # the server's account: every page of the first crawl asked again, each URL once, nothing
        # that crawl did not ask (what only the deleted pages linked to is not asked now)
        asked_now = Counter(r[0] for r in pages_of(after))
        assert set(fetched) <= set(asked_now) <= {r[0] for r in pages_of(before)}
        assert max(asked_now.values()) == 1
        check_answers(after, fetched, changed, deleted)
        # the mirror: only the changed files rewritten, the deleted ones gone
        index2 = site.index()
        assert sorted(index2) == sorted(set(fetched) - set(deleted))
        now = site.mtimes()
        assert sorted(u for u in now if now[u] != mtimes[u]) == sorted(changed)
        check_mirror_is_the_tree(site, index2)
        # the verdicts, counted in Redis with the acks
        unchanged = len(fetched) - 13
        assert verdicts_of(text) == {"unchanged": unchanged, "notModified": unchanged, "changed": 10, "new": 0,
                                     "gone": 3, "kept": 0}, text[-2000:]
        assert launcher.final.recrawl == {"unchanged": unchanged, "notModified": unchanged, "changed": 10,
                                          "gone": 3}
        gen = read_generation(state)
        assert (gen.generation, gen.previous, gen.finished) == (2, 1, True)
        assert not os.path.exists(records_path(worker_root(state, "w1"), 1))  # the revisited generation went

        # w2's links log out of reach (another machine's, say): the pages only w2 recorded
        # are asked plainly, fetched whole, and still lead where they led
        only_w2 = recorded(state, "w2", 2) - recorded(state, "w1", 2)
        away = tmp_path / "away.log"
        shutil.move(links_path(worker_root(state, "w2"), 2), away)
        launcher, text, again = await site.run(recrawl=True)
        # (the deleted pages' records went with them: only a link leads there again)
        asked_now = Counter(r[0] for r in pages_of(again))
        assert set(asked_now) - set(deleted) == {r[0] for r in pages_of(after)} - set(deleted)
        assert max(asked_now.values()) == 1
        asked = {r[0]: r for r in pages_of(again)}
        plain = {u for u in index2 if not (asked[u][3] or asked[u][4])}
        assert only_w2 and plain == only_w2
        assert all(asked[u][2] == 200 for u in only_w2) and all(asked[u][2] == 304 for u in set(index2) - only_w2)
        assert sorted(site.index()) == sorted(index2)
        r = launcher.final.recrawl
        assert r == {"unchanged": len(index2), "notModified": len(index2) - len(only_w2)}, r


@pytest.mark.async_timeout(240)
async def test_a_worker_killed_mid_recrawl_hands_its_partitions_over_and_nothing_is_lost(tmp_path):
    web = tree(seed=24, hosts=4, pages=20)
    async with served(web, web.port) as srv:
        site = DistSite(tmp_path, web, srv, respawn=False, wait_duration=0.05, pages_connexions=4)
        await site.run()
        index1 = site.index()
        fetched = sorted(index1)
        changed, deleted = change_and_delete(site, fetched)
        mtimes = site.mtimes()
        srv.clear()
        launcher, out = site.launcher(recrawl=True)
        run = asyncio.ensure_future(launcher.run())
        victim = launcher.workers[0]

        async def holding():
            """w1 owns partitions with entries read and not acked, some of its pages acked."""
            assert not run.done(), out.getvalue()[-3000:]
            if victim.proc is None or not launcher.url:
                return None
            rio = await RedisIO(launcher.url, site.config.crawl_name, partitions=16).connect()
            try:
                rows = [r for r in (await rio.view(rows=True)).rows if r.owner == "w1"]
            finally:
                await rio.close()
            held = sum(r.pending for r in rows)
            return held if held >= 2 and sum(r.fetched for r in rows) >= 5 else None
        held = await wait_for(holding, 60, "w1 never held entries read and not acked")
        victim.proc.send_signal(signal.SIGKILL)
        code = await asyncio.wait_for(run, 180)
        text = out.getvalue()
        assert code == 0, text[-3000:]
        assert victim.exits == [-signal.SIGKILL], victim.exits  # not respawned: w2 took its partitions over
        print(f"w1 held {held} entries read and not acked when killed")
        after = srv.requests()
        # every page reached again (some asked twice: those w1 held when it died)
        assert {r[0] for r in pages_of(after)} >= set(fetched)
        index2 = site.index()
        assert sorted(index2) == sorted(set(fetched) - set(deleted))
        check_mirror_is_the_tree(site, index2)
        now = site.mtimes()
        assert {u for u in now if now[u] != mtimes[u]} == set(changed)
        # the verdicts add up: one per page of the last crawl, counted by the ack that removed it
        t = launcher.final
        assert t.balanced and t.queued == 0, t
        r = t.recrawl
        assert r.get("changed", 0) == 10 and r.get("gone", 0) == 3, r
        assert r.get("unchanged", 0) == len(fetched) - 13 and r.get("new", 0) == 0, r


@pytest.mark.async_timeout(240)
async def test_a_recrawl_cut_short_while_seeding_is_refused_again_and_seeded_again_by_reload(tmp_path, monkeypatch):
    web = tree(seed=25, hosts=2, pages=20)
    async with served(web, web.port) as srv:
        site = DistSite(tmp_path, web, srv)
        await site.run()
        index1 = site.index()
        from larbin_py.distributed import launcher as launcher_mod

        async def cut_short(*args, **kw):
            raise OSError("seeding cut short")
        monkeypatch.setattr(launcher_mod, "seed_records", cut_short)
        launcher, out = site.launcher(recrawl=True)
        assert await launcher.run() == 2
        assert out.getvalue().count("\n") == 1 and "seeding cut short" in out.getvalue()
        gen = read_generation(site.config.state_dir)
        assert (gen.generation, gen.previous, gen.seeded, gen.finished) == (2, 1, False, False)
        monkeypatch.undo()
        launcher, out = site.launcher(recrawl=True)  # not finished: continue it first
        assert await launcher.run() == 2 and "continue it with --reload" in out.getvalue()
        srv.clear()
        out = io.StringIO()
        launcher = Launcher(site.config, 2, out=out, env=site.env, reload=True)
        assert await launcher.run() == 0, out.getvalue()[-3000:]
        assert f"recrawl of generation 1: {len(index1)} URLs queued again" in out.getvalue()
        asked = {r[0]: r[2] for r in pages_of(srv.requests())}
        assert all(asked[u] == 304 for u in index1)
        assert launcher.final.recrawl == {"unchanged": len(index1), "notModified": len(index1)}
        assert read_generation(site.config.state_dir).finished


@pytest.mark.async_timeout(240)
async def test_revisit_after_skips_young_pages_where_they_are_read_and_still_reaches_what_they_link_to(tmp_path):
    """revisitAfter: the worker that reads a young page's entry asks nothing, keeps its file and
    record, offers its stored links and acks it as notDue; the pages whose records were lost are
    reached through those links (fetched as new)."""
    web = tree(seed=26, hosts=2, pages=20)
    async with served(web, web.port) as srv:
        site = DistSite(tmp_path, web, srv)
        await site.run()
        index1 = site.index()
        mtimes = site.mtimes()
        # five records of w1 lost (their lines cut out): only the links of the others lead there
        path = records_path(worker_root(site.config.state_dir, "w1"), 1)
        with open(path, "rb") as f:
            lines = f.readlines()
        seeds = set(web.seeds)
        lost = [line for line in lines if decode_record(line).url not in seeds][:5]
        with open(path, "wb") as f:
            f.writelines(line for line in lines if line not in lost)
        lost_urls = {decode_record(line).url for line in lost}
        site.config = site.config.replace(revisit_after=3600)
        launcher, text, after = await site.run(recrawl=True)
        asked = {r[0]: r for r in pages_of(after)}
        # no page of the last crawl asked but the lost ones (what is no page, a redirect, a PDF not
        # kept, is asked as in any crawl: the stored links lead there)
        assert set(asked) & set(index1) == lost_urls
        assert all(asked[u][2] == 200 and not asked[u][3] for u in lost_urls)
        assert sorted(site.index()) == sorted(index1)
        now = site.mtimes()
        assert {u for u in now if now[u] != mtimes[u]} == lost_urls
        t = launcher.final
        assert t.recrawl == {"skipped": len(index1) - 5, "new": 5}, t.recrawl
        assert t.forgotten.get("notDue") == len(index1) - 5 and t.balanced
        # the skipped pages' records went on to the next generation, with their links
        assert recorded(site.config.state_dir, "w1", 2) | recorded(site.config.state_dir, "w2", 2) == set(index1)


@pytest.mark.parametrize("changes,why", [
    ({}, "no distributed crawl with records"),
    ({"output_mode": "warc"}, "outputMode warc"),
    ({"redis_url": "redis://127.0.0.1:1/0"}, "private Redis"),
])
async def test_what_a_distributed_recrawl_refuses_it_says_in_one_line(tmp_path, changes, why):
    from larbin_py.config import parse_config_text

    config = parse_config_text("", require_start_urls=False).replace(
        state_dir=str(tmp_path / "state"), save_dir=str(tmp_path / "save"), http_port=0, **changes)
    out = io.StringIO()
    assert await Launcher(config, 2, out=out, recrawl=True).run() == 2
    assert out.getvalue().count("\n") == 1 and why in out.getvalue(), out.getvalue()
    assert not os.path.exists(tmp_path / "state" / "redis")  # refused before any Redis is started
