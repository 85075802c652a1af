"""The real Engine driven through its seams: a fake resolver, a fake fetcher,
in-memory stores.  No socket, no DNS server, no file in stateDir's stores:
what the engine does with each answer is checked against canned ones.
"""

from __future__ import annotations

from larbin_py.config import parse_config_text
from larbin_py.engine import Engine
from larbin_py.testing.fakes import MemorySeen, memory_stores
from larbin_py.frontier.interfaces import Fetcher, Resolver, SeenStore, UrlQueue
from larbin_py.frontier.stats import frontier_stats
from larbin_py.net.dns import DNSAnswer
from larbin_py.net.http import FetchResult

HTML = "text/html"


def page(*links: str) -> tuple[int, str, bytes, str | None]:
    body = "<html><body>" + "".join(f'<a href="{u}">x</a>' for u in links) + "</body></html>"
    return 200, HTML, body.encode(), None


#: url -> (status, content type, body, Location); anything else is a 404.
WEB = {
    "http://a.test/robots.txt": (200, "text/plain", b"User-agent: *\nDisallow: /secret\n", None),
    "http://a.test/": page("/p1", "/gone", "/moved", "/secret", "http://b.test/"),
    "http://a.test/p1": page("/", "/p2"),
    "http://a.test/p2": page(),
    "http://a.test/moved": (301, HTML, b"", "/target"),
    "http://a.test/target": page("/p1"),
    "http://b.test/": page("http://a.test/p1", "http://a.test/"),
}


class FakeResolver:
    """Every name has one address; counts the questions."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.stats = {"queries_sent": 0}
        self.closed = False

    async def resolve(self, name: str) -> DNSAnswer:
        self.asked.append(name)
        self.stats["queries_sent"] += 1
        return DNSAnswer(name, ("203.0.113.7",) if name == "a.test" else ("203.0.113.8",), None, 300.0, False)

    def close(self) -> None:
        self.closed = True


class FakeFetcher:
    """Answers from :data:`WEB`; records every request (url, ip, port)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int]] = []
        self.stats = {"connections_opened": 0, "reuses": 0, "h11_handovers": 0}
        self.closed = False

    async def fetch(self, url: str, ip: str, port: int, *, cookie: bytes | None = None, addresses=()) -> FetchResult:
        self.requests.append((url, ip, port))
        status, ctype, body, location = WEB.get(url, (404, HTML, b"not here", None))
        return FetchResult(url, ip, status=status, headers=[(b"content-type", ctype.encode())], body=body,
                           content_type=ctype, location=location, rtt=0.001, bytes_read=len(body))

    async def close(self) -> None:
        self.closed = True


def config(tmp_path):
    return parse_config_text("", require_start_urls=False).replace(
        start_urls=("http://a.test/",), save_dir=str(tmp_path / "save"), state_dir=str(tmp_path / "state"),
        http_port=0, output_mode="stats", can_reload=False, wait_duration=0.01, private_networks="allow",
        depth_in_site=5, depth_by_site=True)


def test_the_fakes_are_the_seams():
    assert isinstance(FakeResolver(), Resolver) and isinstance(FakeFetcher(), Fetcher)
    assert isinstance(MemorySeen(), SeenStore) and isinstance(memory_stores()("main", 10), UrlQueue)


async def test_an_engine_on_fakes_fetches_follows_and_counts_every_outcome(tmp_path):
    resolver, fetcher, seen, stores = FakeResolver(), FakeFetcher(), MemorySeen(), memory_stores()
    engine = Engine(config(tmp_path), resolver=resolver, fetcher=fetcher, stores=stores, seen=seen,
                    out=open("/dev/null", "w"), err=open("/dev/null", "w"))
    summary = await engine.run()
    asked = [url for url, _, _ in fetcher.requests]
    # robots.txt first on each host, once; the page it forbids is never asked for
    assert asked[0] == "http://a.test/robots.txt"
    assert asked.count("http://a.test/robots.txt") == 1 and asked.count("http://b.test/robots.txt") == 1
    assert asked.index("http://b.test/robots.txt") < asked.index("http://b.test/")
    assert "http://a.test/secret" not in asked
    # every page once, each to its host's address; the redirect's target fetched too
    pages = [u for u in asked if not u.endswith("/robots.txt")]
    assert sorted(pages) == sorted(["http://a.test/", "http://a.test/p1", "http://a.test/p2",
                                    "http://a.test/gone", "http://a.test/moved", "http://a.test/target",
                                    "http://b.test/"])
    assert all(ip == ("203.0.113.8" if url.startswith("http://b.test") else "203.0.113.7")
               for url, ip, _ in fetcher.requests)
    assert summary.pages == 5
    assert summary.forgotten == {"err40X": 1, "err30X": 1, "forbiddenRobots": 1}
    # links met again are refused as seen (the back links, b's link to a page queued before)
    assert summary.rejected["seen"] >= 3
    # conservation, and everything went through the injected stores
    fr = engine.frontier
    taken, accounted = fr.conservation()
    assert taken == accounted == 8 == summary.taken
    assert summary.queued == 0 and summary.in_flight == 0
    # one test-and-add per page's links (links met lately never reach it), not one per link
    assert len(seen) == 8 and 4 <= seen.batches < 8
    lanes = stores.lanes
    assert lanes["main"].pushed == 7 and lanes["priority"].pushed == 1  # the seed goes first
    assert all(lane.closed for lane in lanes.values())
    assert sorted(resolver.asked) == ["a.test", "b.test"]
    assert fetcher.closed and resolver.closed
    stats = frontier_stats(fr)
    assert stats["fetched"] == 5 and stats["taken"] == 8 and stats["seen"] == 8
    assert stats["hosts"]["busiest"] == [{"host": "a.test", "pages": 4}, {"host": "b.test", "pages": 1}]
    assert stats["hosts"]["failing"] == [{"host": "a.test", "errors": 2}]


async def test_the_checkpointer_is_a_strategy_the_engine_only_talks_to(tmp_path):
    """A crawl state swapped in (the distributed mode's seam): every terminal
    outcome reaches it once, the gate asks it, the checkpoints give it the
    engine's section, and it is closed; stateDir is never touched."""
    from larbin_py.crawl_state import CrawlState, LocalState
    from larbin_py.testing.state import MemoryState
    from larbin_py.journal import FETCHED

    state = MemoryState()
    assert isinstance(state, CrawlState) and isinstance(LocalState, type)
    fetcher = FakeFetcher()
    engine = Engine(config(tmp_path).replace(can_reload=True), resolver=FakeResolver(), fetcher=fetcher,
                    stores=memory_stores(), crawl_state=state, out=open("/dev/null", "w"),
                    err=open("/dev/null", "w"))
    summary = await engine.run()
    assert summary.pages == 5 and summary.failed is None
    urls = [url for url, _, _ in state.outcomes]
    assert len(urls) == len(set(urls)) == summary.taken == 8  # each URL's outcome once
    outcomes = {url: outcome for url, outcome, _ in state.outcomes}
    assert outcomes["http://a.test/gone"] == "err40X" and outcomes["http://a.test/secret"] == "forbiddenRobots"
    assert sum(1 for o in outcomes.values() if o == FETCHED) == 5
    # forbiddenRobots is decided without a request; the others came from one
    assert all(req == (o != "forbiddenRobots") for _, o, req in state.outcomes)
    assert state.gate_asked > 0 and state.opened and state.commits_closed and state.closed
    assert state.checkpoints == 2  # at the start and at the end: it keeps nothing, so no timer
    assert state.sections[-1]["requests"] == summary.requests and "page_digests" in state.sections[-1]
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())


async def test_a_closed_durability_gate_starts_nothing(tmp_path):
    from larbin_py.testing.state import MemoryState

    state = MemoryState()
    state.hold = True
    fetcher = FakeFetcher()
    engine = Engine(config(tmp_path).replace(limit_time=0.3), resolver=FakeResolver(), fetcher=fetcher,
                    stores=memory_stores(), crawl_state=state, out=open("/dev/null", "w"),
                    err=open("/dev/null", "w"))
    summary = await engine.run()
    assert fetcher.requests == [] and summary.requests == 0 and state.gate_asked > 0
    assert summary.stop_reason.startswith("limitTime")


def test_the_frontier_is_built_with_the_configurations_pruning(tmp_path):
    engine = Engine(config(tmp_path).replace(prune_after=7.5, keep_sites=3), resolver=FakeResolver(),
                    fetcher=FakeFetcher(), stores=memory_stores(), seen=MemorySeen())
    assert (engine.frontier.pruning.prune_after, engine.frontier.pruning.keep_sites) == (7.5, 3)
    engine.frontier.close()


def test_failures_keep_the_first_message_say_it_once_and_stop():
    import errno
    import io

    from larbin_py.failures import Failures
    from larbin_py.output import OutputError

    err, stops = io.StringIO(), []
    failures = Failures("/srv/state", err, stops.append)
    failures.write_failed(OSError(errno.ENOSPC, "No space left on device"))
    assert failures.state_broken and stops == ["failed"]
    assert "/srv/state/frontier" in failures.message and "--reload" in failures.message
    failures.on_io_error(OutputError("disk gone"))  # a consequence: not said again, still a stop
    failures.note("output failed: late")
    assert err.getvalue().count("larbin_py: ") == 1 and stops == ["failed", "failed"]
    assert "/srv/state/frontier" in failures.message
    late = Failures("/srv/state", io.StringIO(), stops.append)
    late.note("output failed: at close")  # met at shutdown: kept, not printed, no stop
    assert late.message == "output failed: at close" and late.err.getvalue() == "" and len(stops) == 2
    late.fail("cannot open the output: x", stop=False)
    assert late.message == "output failed: at close" and len(stops) == 2


async def test_a_robots_txt_answering_503_is_asked_again_after_robotsRetryDelay_doubled(tmp_path):
    """robotsRetryDelay reaches the frontier: a robots.txt answering 503 is asked
    again 0.2 s, then 0.4 s after its failures (never sooner), and after the third
    the site's page is forgotten forbiddenRobots (never asked); the default (1 s)
    would take 3 s."""
    import time

    class Unavailable(FakeFetcher):
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []

        async def fetch(self, url, ip, port, **kw):
            if url != "http://a.test/robots.txt":
                return await super().fetch(url, ip, port, **kw)
            self.requests.append((url, ip, port))
            self.times.append(time.monotonic())
            return FetchResult(url, ip, status=503, headers=[], body=b"busy", content_type=HTML, rtt=0.001,
                               bytes_read=4)

    fetcher = Unavailable()
    engine = Engine(config(tmp_path).replace(robots_retry_delay=0.2), resolver=FakeResolver(), fetcher=fetcher,
                    stores=memory_stores(), out=open("/dev/null", "w"), err=open("/dev/null", "w"))
    summary = await engine.run()
    assert summary.forgotten == {"forbiddenRobots": 1}, summary.forgotten
    assert [u for u, _, _ in fetcher.requests] == ["http://a.test/robots.txt"] * 3
    gaps = [b - a for a, b in zip(fetcher.times, fetcher.times[1:])]
    assert 0.2 <= gaps[0] < 0.2 + 0.8 and 0.4 <= gaps[1] < 0.4 + 0.8, gaps


async def test_a_name_that_does_not_resolve_is_asked_again_after_dnsRetryDelay_doubled(tmp_path):
    """dnsRetryDelay reaches the frontier: a dead name is asked again 0.2 s, then 0.4 s
    after its failures (never sooner), and its URL is forgotten noDNS once its retries
    are spent; the default (2 s) would leave the crawl running for 6 s."""
    import time

    class DeadName(FakeResolver):
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []

        async def resolve(self, name: str) -> DNSAnswer:
            if name != "dead.test":
                return await super().resolve(name)
            self.times.append(time.monotonic())
            return DNSAnswer(name, (), "nxdomain", 0.0, False)

    resolver = DeadName()
    engine = Engine(config(tmp_path).replace(start_urls=("http://dead.test/",), dns_retry_delay=0.2, retries=2),
                    resolver=resolver, fetcher=FakeFetcher(), stores=memory_stores(),
                    out=open("/dev/null", "w"), err=open("/dev/null", "w"))
    summary = await engine.run()
    assert summary.forgotten == {"noDNS": 1}, summary.forgotten
    gaps = [b - a for a, b in zip(resolver.times, resolver.times[1:])]
    assert len(resolver.times) == 3, resolver.times
    assert 0.2 <= gaps[0] < 0.2 + 1.5 and 0.4 <= gaps[1] < 0.4 + 1.5, gaps
