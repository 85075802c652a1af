"""Issue 22: the analysis stage's parts without a crawl: the durable queue,
the backoff, the alerts, the analyzers' specs, and the stage's retry logic
on a pool that fails on demand (no processes)."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys

import pytest

from larbin_py.analysis.alerts import ALERTS_LOG, Alerts
from larbin_py.analysis.analyzers import AnalyzerSpec, PageView, meta_of, parse_analyzer
from larbin_py.analysis.pool import TaskFailed
from larbin_py.analysis.analyzer_process import format_answer, parse_task
from larbin_py.analysis.queue import QueueDamage, TaskQueue, queue_name, spool_name
from larbin_py.analysis.retry import Backoff
from larbin_py.analysis.stage import AnalysisStage
from larbin_py.config import parse_config_text


# -- the queue ------------------------------------------------------------------
def test_a_reload_gives_back_exactly_the_tasks_not_marked_done_or_failed(tmp_path):
    q = TaskQueue(str(tmp_path))
    a = q.add("http://a/", 1, ["links", "meta"], b"<html>A</html>", status=200, content_type="text/html")
    b = q.add("http://b/", 2, ["links"], b"BB")
    assert q.body(a[1]) == b"<html>A</html>" and q.body(b[0]) == b"BB"
    q.finished(a[0])
    mark = q.mark()
    q.tried(a[1], "error: boom")
    q.tried(a[1], "timeout")
    q.failed(b[0])
    assert q.confirm(mark) == []
    # a finished task not yet covered by a checkpoint is still live
    q.finished(a[1])
    q.close(remove_if_empty=False)
    r = TaskQueue(str(tmp_path), reload=True)
    assert [(t.url, t.analyzer, t.depth, t.tries) for t in r.resumed] == [("http://a/", "meta", 1, 2)]
    assert r.body(r.resumed[0]) == b"<html>A</html>"
    # new tasks get new ids, in a new generation
    c = r.add("http://c/", 0, ["links"], b"C")
    assert c[0].id > a[1].id and c[0].gen == a[0].gen + 1


def test_a_line_cut_by_a_crash_ends_the_reading_of_its_generation(tmp_path):
    q = TaskQueue(str(tmp_path))
    q.add("http://a/", 1, ["links"], b"A")
    q.add("http://b/", 1, ["links"], b"B")
    q.close(remove_if_empty=False)
    path = tmp_path / queue_name(1)
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # the second line cut short
    r = TaskQueue(str(tmp_path), reload=True)
    assert [t.url for t in r.resumed] == ["http://a/"] and r.damaged == 1


def test_a_body_cut_short_in_its_spool_is_damage_not_a_wrong_body(tmp_path):
    q = TaskQueue(str(tmp_path))
    task = q.add("http://a/", 1, ["links"], b"0123456789")[0]
    q.close(remove_if_empty=False)
    os.truncate(tmp_path / spool_name(1), 4)
    r = TaskQueue(str(tmp_path), reload=True)
    with pytest.raises(QueueDamage):
        r.body(task)


def test_generations_rotate_and_go_once_their_tasks_are_done(tmp_path):
    q = TaskQueue(str(tmp_path), segment_bytes=10)
    first = q.add("http://a/", 0, ["links"], b"x" * 12)[0]
    second = q.add("http://b/", 0, ["links"], b"y" * 12)[0]
    assert (first.gen, second.gen) == (1, 2)
    q.finished(first)
    assert q.confirm(q.mark()) == [1]
    q.drop([1])
    assert not (tmp_path / queue_name(1)).exists() and not (tmp_path / spool_name(1)).exists()
    q.finished(second)
    q.confirm(q.mark())
    q.close()
    assert not os.path.exists(tmp_path)  # nothing live: the queue's files and folder are gone


def test_a_plain_start_clears_an_earlier_queue_once_it_writes_and_not_before(tmp_path):
    q = TaskQueue(str(tmp_path / "q"))
    q.add("http://a/", 0, ["links"], b"A")
    q.close(remove_if_empty=False)
    before = sorted(os.listdir(tmp_path / "q"))
    fresh = TaskQueue(str(tmp_path / "q"))
    assert fresh.resumed == [] and sorted(os.listdir(tmp_path / "q")) == before  # a failed start changes nothing
    fresh.add("http://b/", 0, ["links"], b"B")
    fresh.close(remove_if_empty=False)
    assert [t.url for t in TaskQueue(str(tmp_path / "q"), reload=True).resumed] == ["http://b/"]
    assert not os.path.exists(tmp_path / "nothing") and TaskQueue(str(tmp_path / "nothing")).live == 0
    assert not os.path.exists(tmp_path / "nothing")  # nothing written until a task comes


# -- backoff and alerts ---------------------------------------------------------
def test_backoff_doubles_and_stops_after_the_retries():
    b = Backoff(retries=3, base=0.5, cap=1.5)
    assert [b.delay(n) for n in range(6)] == [0.0, 0.5, 1.0, 1.5, None, None]
    assert Backoff(retries=0).delay(1) is None


async def test_an_alert_is_a_json_line_a_count_and_a_command_with_its_details(tmp_path):
    out = tmp_path / "cmd.out"
    script = f"import sys,os; open({str(out)!r},'a').write(sys.argv[1]+' '+os.environ['LARBIN_ALERT']+' '+sys.stdin.read()+'\\n')"
    alerts = Alerts(str(tmp_path), (sys.executable, "-c", script, "{analyzer}@{url}"), clock=lambda: 1000.0)
    alerts.raise_alert("analysisFailed", url="http://a/", analyzer="m", tries=4, error="boom")
    await alerts.aclose()
    line = json.loads((tmp_path / ALERTS_LOG).read_text())
    assert line == {"time": 1000.0, "kind": "analysisFailed", "url": "http://a/", "analyzer": "m", "tries": 4,
                    "error": "boom"}
    ran = out.read_text().split(" ", 1)
    assert ran[0] == "m@http://a/" and ran[1].count('"error": "boom"') == 2
    assert alerts.count == 1 and alerts.command_runs == 1 and alerts.command_failures == 0
    assert alerts.stats()["recent"][0]["url"] == "http://a/"


async def test_a_failing_alert_command_is_counted_and_said_once(tmp_path):
    import io

    err = io.StringIO()
    alerts = Alerts(str(tmp_path), (sys.executable, "-c", "raise SystemExit(3)"), err=err)
    alerts.raise_alert("analysisFailed", url="http://a/")
    alerts.raise_alert("analysisFailed", url="http://b/")
    await alerts.aclose()
    assert alerts.command_failures == 2 and err.getvalue().count("exited with status 3") == 1
    assert len((tmp_path / ALERTS_LOG).read_text().splitlines()) == 2


# -- analyzers ------------------------------------------------------------------
def test_analyzer_specs_match_urls_and_types():
    spec = parse_analyzer(["m", "urls=/docs/", "types=text/html,text/plain", "meta"])
    assert spec.wants("http://a/docs/x", "text/html; charset=utf-8")
    assert not spec.wants("http://a/other", "text/html") and not spec.wants("http://a/docs/", "image/png")
    assert AnalyzerSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match="regular expression"):
        parse_analyzer(["m", "urls=(", "meta"])


def test_meta_reads_title_description_canonical_language_robots_and_links():
    body = (b'<html lang="fr"><head><title>T</title><meta name="description" content="D">'
            b'<meta name="robots" content="noindex"><link rel="canonical" href="/c"></head>'
            b'<body><a href="/x">x</a><a href="/y">y</a></body></html>')
    rec = meta_of(PageView("http://a/p", 200, "text/html", "utf-8", body, 0), {})
    assert rec["title"] == "T" and rec["description"] == "D" and rec["language"] == "fr"
    assert rec["robots"] == "noindex" and rec["canonical"] == "http://a/c" and rec["outlinks"] == 2
    assert len(rec["sha1"]) == 40


# -- the stage's retries, on a pool that fails on demand ------------------------
class ScriptedPool:
    """A pool whose tries fail as told: ``plan[url]`` = failures before success (-1: always).

    It answers on the next loop iteration through the callback, as the real one does."""

    size = 1
    on_slot = None

    def __init__(self, plan: dict[str, int]) -> None:
        self.plan = plan
        self.tries: list[str] = []

    def free(self):
        return 1

    def submit(self, line, job, done):
        msg = parse_task(line.decode().rstrip("\n"))
        url = msg["u"]
        self.tries.append(url)
        left = self.plan.get(url, 0)
        if left != 0:
            self.plan[url] = left - 1
            answer = TaskFailed("error", f"boom {url}")
        else:
            answer = format_answer(msg["ids"][0], [{"links": [url + "x"], "nofollow": 0, "meta_nofollow": False,
                                                    "error": None}])
        asyncio.get_running_loop().call_soon(done, job, answer)
        return True

    async def close(self):
        pass

    def stats(self):
        return {}


class Offers:
    def __init__(self):
        self.offered = []

    def offer(self, page_url, depth, links, **kw):
        self.offered.append((page_url, depth, tuple(links)))


async def test_a_task_is_retried_with_backoff_then_alerted_once_and_marked_failed(tmp_path):
    import collections
    import types

    config = parse_config_text("", require_start_urls=False).replace(
        state_dir=str(tmp_path / "state"), save_dir=str(tmp_path / "save"), analysis_retries=2,
        analysis_backoff=0.001)
    pool = ScriptedPool({"http://ok/": 0, "http://flaky/": 2, "http://bad/": -1})
    stage = AnalysisStage(config, pool=pool, durable=False)
    fr = Offers()
    counts = types.SimpleNamespace(page_errors=collections.Counter(), rejected=collections.Counter())
    tasks = []
    stage.attach(fr, counts, lambda coro: tasks.append(asyncio.get_running_loop().create_task(coro)))
    for url, depth in (("http://ok/", 1), ("http://flaky/", 2), ("http://bad/", 3)):
        stage.submit(url, depth, b"<html></html>")
    assert stage.pending == 3
    while stage.pending:  # one task stands for the pending ones, batch after batch
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert sorted(fr.offered) == [("http://flaky/", 2, ("http://flaky/x",)), ("http://ok/", 1, ("http://ok/x",))]
    assert pool.tries.count("http://bad/") == 3 and pool.tries.count("http://flaky/") == 3
    assert stage.pending == 0 and stage.failed == 1 and stage.finished == 2
    assert stage.failed_tries["error"] == 5
    alerts = [json.loads(line) for line in (tmp_path / "state" / ALERTS_LOG).read_text().splitlines()]
    assert [(a["url"], a["tries"], a["analyzer"]) for a in alerts] == [("http://bad/", 3, "links")]
    assert "boom http://bad/" in alerts[0]["error"]
    await stage.close()
    assert not os.path.exists(tmp_path / "state" / "analysis")  # nothing live is left


class HeldPool(ScriptedPool):
    """A pool that answers only when the test says (``answer(i)``), synchronously."""

    def __init__(self) -> None:
        super().__init__({})
        self.jobs = []

    def submit(self, line, job, done):
        self.jobs.append((parse_task(line.decode().rstrip("\n")), job, done))
        return True

    def answer(self, i: int) -> None:
        msg, job, done = self.jobs[i]
        done(job, format_answer(msg["ids"][0], [{"links": [], "nofollow": 0, "meta_nofollow": False,
                                                 "error": None}]))


async def test_the_last_answer_between_two_drain_tasks_ends_the_wait(tmp_path):
    """An answer that comes after one drain task ended and before the next one
    first ran still wakes it: with nothing pending, no task is left waiting
    (it was: the crawl never ended)."""
    import types

    config = parse_config_text("", require_start_urls=False).replace(
        state_dir=str(tmp_path / "state"), save_dir=str(tmp_path / "save"))
    pool = HeldPool()
    stage = AnalysisStage(config, pool=pool, durable=False)
    counts = types.SimpleNamespace(page_errors=collections.Counter(), rejected=collections.Counter())
    tasks = []
    stage.attach(Offers(), counts, lambda coro: tasks.append(asyncio.get_running_loop().create_task(coro)))
    stage.submit("http://a/", 1, b"<html></html>")
    stage.submit("http://b/", 1, b"<html></html>")
    await asyncio.sleep(0)  # the first drain task waits
    pool.answer(0)
    await asyncio.sleep(0)  # it ends and spawns the next, whose first step comes after this one's
    assert len(tasks) == 2 and not tasks[1].done()
    pool.answer(1)
    assert stage.pending == 0
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    await stage.close()


def test_metrics_count_alerts_and_failed_tries():
    from larbin_py.web.metrics import render_metrics

    snap = {"analysis": {"pending": 4, "finished": 10, "failed": 1, "failed_tries": {"crash": 2, "error": 3},
                         "alerts": {"count": 1, "recent": []}}}
    text = render_metrics(snap)
    assert "larbin_alerts_total 1" in text and "larbin_analysis_pending 4" in text
    assert 'larbin_analysis_tries_failed_total{reason="crash"} 2' in text
    assert "larbin_alerts_total" not in render_metrics({})  # inline analysis: no such series


def test_the_queue_names_its_live_files_for_the_checkpoint_to_sync(tmp_path):
    q = TaskQueue(str(tmp_path), segment_bytes=4)
    assert q.sync_paths() == []  # nothing written yet
    q.add("http://a/", 0, ["links"], b"AAAAA")
    q.add("http://b/", 0, ["links"], b"B")
    assert q.sync_paths() == [str(tmp_path / n) for n in (spool_name(1), queue_name(1), spool_name(2), queue_name(2))]


# -- the queue's seam ------------------------------------------------------------
def test_the_task_queue_implements_the_analysis_queue_protocol(tmp_path):
    from larbin_py.analysis.interfaces import AnalysisQueue
    from test_frontier_seams import _conforms

    q = TaskQueue(str(tmp_path / "q"))
    assert isinstance(q, AnalysisQueue)
    assert _conforms(q, AnalysisQueue) == []

    class Odd:  # every name, but add lacks the headers keyword and live is a method
        resumed = []
        tried = finished = failed = mark = confirm = drop = sync_paths = close = TaskQueue.close
        spool_dir = TaskQueue.spool_dir

        def add(self, url, depth, analyzers, body, *, status=None, content_type=None, charset=None, saved=None):
            ...

        def live(self):
            return 0

    problems = _conforms(Odd(), AnalysisQueue)
    assert "add: keyword headers missing" in problems and "live is not a property" in problems


async def test_the_stage_takes_any_analysis_queue(tmp_path):
    """The stage uses the queue it is given (the Redis swap): tasks go through it."""
    import types

    config = parse_config_text("", require_start_urls=False).replace(
        state_dir=str(tmp_path / "state"), save_dir=str(tmp_path / "save"))

    class Recording(TaskQueue):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.calls = []

        def add(self, url, *a, **kw):
            self.calls.append(url)
            return super().add(url, *a, **kw)

    queue = Recording(str(tmp_path / "elsewhere"))
    stage = AnalysisStage(config, pool=ScriptedPool({}), durable=False, queue=queue)
    fr = Offers()
    counts = types.SimpleNamespace(page_errors=collections.Counter(), rejected=collections.Counter())
    tasks = []
    stage.attach(fr, counts, lambda coro: tasks.append(asyncio.get_running_loop().create_task(coro)))
    assert stage.submit("http://a/", 1, b"<html></html>")
    while stage.pending:
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert queue.calls == ["http://a/"] and fr.offered == [("http://a/", 1, ("http://a/x",))]
    await stage.close()


def test_the_page_view_headers_and_one_parse(tmp_path):
    from larbin_py.analysis.analyzers import format_headers, parse_headers

    raw = [(b"Content-Type", b"text/html; charset=utf-8"), (b"X-Thing", b"a\r\nb"), (b"Set-Cookie", b"k=v")]
    headers = parse_headers(format_headers(raw))
    assert headers == [("content-type", "text/html; charset=utf-8"), ("x-thing", "a  b"), ("set-cookie", "k=v")]
    body = b"<html><head><title>T</title></head><body><a href='/x'>x</a></body></html>"
    page = PageView("http://a/p", 200, "text/html", "utf-8", body, 2, "/save/a/p", headers)
    assert page.header("CONTENT-TYPE") == "text/html; charset=utf-8" and page.header("none", 7) == 7
    assert page.saved == "/save/a/p" and page.depth == 2
    first = page.extracted({})
    assert first.links == ["http://a/x"]
    assert page.tree is first.root and page.tree.findtext(".//title") == "T"  # the links' parse, shared
    assert meta_of(page, {})["outlinks"] == 1 and page.extracted({}) is first


def test_an_answer_carries_which_links_the_page_embeds():
    from larbin_py.analysis.analyzer_process import parse_answer

    result = {"links": ["http://a.test/1", "http://a.test/f.html", "http://a.test/i.png"], "nofollow": 2,
              "meta_nofollow": False, "error": None, "embeds": ["http://a.test/i.png", "http://a.test/f.html"]}
    (got,) = parse_answer(format_answer(7, [result]), ["links"])
    assert got["links"] == result["links"] and set(got["embeds"]) == {"http://a.test/i.png", "http://a.test/f.html"}
    (plain,) = parse_answer(format_answer(7, [dict(result, embeds=[])]), ["links"])
    assert plain["links"] == result["links"] and plain["embeds"] == [] and plain["nofollow"] == 2


def test_a_page_with_the_links_analyzer_alone_keeps_no_tree():
    from larbin_py.analysis.analyzer_process import wants_tree

    specs = {"links": AnalyzerSpec("links", "links"), "m": AnalyzerSpec("m", "meta")}
    assert not wants_tree(["links"], specs)
    assert wants_tree(["links", "m"], specs) and wants_tree(["m"], specs)
    assert wants_tree(["unknown"], specs)  # not known here: kept, as before
    body = b'<html><body><p id="x"><a href="/y">y</a></p></body></html>'
    page = PageView("http://a/p", 200, "text/html", "utf-8", body, 0)
    page.keep_tree = False
    assert page.extracted().links == ["http://a/y"] and page.extracted().root is None
    shared = PageView("http://a/p", 200, "text/html", "utf-8", body, 0)  # the default: kept, ids and all
    assert shared.extracted().links == ["http://a/y"]
    assert shared.tree is shared.extracted().root and [e.tag for e in shared.tree.xpath("id('x')")] == ["p"]
