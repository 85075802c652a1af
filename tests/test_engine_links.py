"""How the engine queues a page's links: rules, the seen test and its front cache."""

from __future__ import annotations

from larbin_py.config import parse_config_text
from larbin_py.engine import Engine


def make_engine(tmp_path, **changes) -> Engine:
    config = parse_config_text("", require_start_urls=False).replace(
        save_dir=str(tmp_path / "save"), state_dir=str(tmp_path / "state"), http_port=0,
        output_mode="stats", **changes)
    return Engine(config)


def queued(engine: Engine) -> int:
    """URLs in the frontier, and the seen set holds as many."""
    count = engine.frontier.queued
    assert count == len(engine.seen)
    return count


class SpyRules:
    """The engine's rules, recording the links each admit_many call is asked about."""

    def __init__(self, rules) -> None:
        self.rules = rules
        self.asked: list[list[str]] = []

    def admit_many(self, urls, *args, **kw):
        self.asked.append(list(urls))
        return self.rules.admit_many(urls, *args, **kw)


def test_links_met_again_skip_the_rules_and_count_as_seen(tmp_path):
    engine = make_engine(tmp_path, depth_in_site=3, depth_by_site=True)
    engine.frontier.admission.rules = spy = SpyRules(engine.rules)  # the rules the admission applies
    asked = spy.asked
    page = "http://a.test/"
    first = ["http://a.test/1", "http://a.test/2", "http://b.test/"]
    engine.frontier.admission.offer(page, 3, first)  # a page with 3 levels of its site to go
    assert queued(engine) == 3 and engine.rejected["seen"] == 0
    engine.frontier.admission.offer("http://a.test/1", 2, ["http://a.test/2", "http://a.test/3", "http://b.test/"])
    assert asked[-1] == ["http://a.test/3"]  # the two held links never reached the rules
    assert queued(engine) == 4 and engine.rejected["seen"] == 2
    # A held link is "seen" even from a page with no depth left, where the
    # rules refuse any other link of the site.
    engine.frontier.admission.offer("http://a.test/3", 0, ["http://a.test/1", "http://a.test/9"])
    assert asked[-1] == ["http://a.test/9"]
    assert engine.rejected["seen"] == 3 and engine.rejected["tooDeep"] == 1 and queued(engine) == 4


def test_links_the_cache_lost_still_meet_the_seen_set(tmp_path):
    engine = make_engine(tmp_path)
    engine.frontier.admission.seen_urls.size = 2  # two generations of two URLs at most
    links = [f"http://a.test/{i}" for i in range(10)]
    engine.frontier.admission.offer("http://a.test/", 3, links)
    assert queued(engine) == 10 and len(engine.frontier.admission.seen_urls) <= 4
    engine.frontier.admission.offer("http://a.test/", 3, links)  # most are gone from the cache, none is queued twice
    assert queued(engine) == 10 and engine.rejected["seen"] == 10
