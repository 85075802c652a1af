"""Admission on its own (larbin_py.frontier.admission): memory lanes, a fake seen store, a
recording sink; no frontier.  How the frontier's offer counts refusals is also
tests/test_frontier_seams.py's."""

from __future__ import annotations

from larbin_py.frontier.admission import Admission
from larbin_py.frontier.interfaces import LinkSink
from larbin_py.frontier.lanes import Lanes
from larbin_py.frontier.store import UrlRecord
from larbin_py.rules import UrlRules
from larbin_py.testing.fakes import MemorySeen, memory_stores


class Sink:
    def __init__(self) -> None:
        self.added: list[tuple[str, int, int]] = []

    def add_many(self, links, depths, hops=0):
        self.added.extend((link, d, hops) for link, d in zip(links, depths))


class Rules(UrlRules):
    """The default rules, recording what they were asked."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.asked: list[list[str]] = []

    def admit_many(self, urls, *args, **kw):
        self.asked.append(list(urls))
        return super().admit_many(urls, *args, **kw)


def lanes() -> Lanes:
    return Lanes(memory_stores(), 100)


def test_push_and_push_record_go_to_their_lane_and_count_taken():
    ls = lanes()
    a = Admission(ls, seen=MemorySeen())
    a.push("http://a.test/", 2, 1, hops=3)
    a.push("http://b.test/", 4, 0, priority=True)
    rec = UrlRecord("http://c.test/", 1, 0, 0, "7/1-0")
    a.push_record(rec, priority=True)
    assert [(r.url, r.depth, r.retries, r.hops) for r in ls.main.ram_records()] == [("http://a.test/", 2, 1, 3)]
    assert [r.url for r in ls.prio.ram_records()] == ["http://b.test/", "http://c.test/"]
    assert list(ls.prio.ram_records())[1] is rec and a.taken == 3


def test_offer_asks_the_seen_store_once_per_page_and_queues_with_the_admissions_retries():
    ls, seen = lanes(), MemorySeen()
    a = Admission(ls, seen=seen, rules=UrlRules(depth_in_site=3), retries=2)
    assert a.offer("http://a.test/", 2, ["http://a.test/1", "http://a.test/2", "http://a.test/1"]) == 2
    assert seen.batches == 1 and a.taken == 2 and a.rejected == {"seen": 1}
    assert [(r.url, r.depth, r.retries) for r in ls.main.ram_records()] == \
        [("http://a.test/1", 1, 2), ("http://a.test/2", 1, 2)]


def test_links_met_lately_are_refused_before_the_rules_and_the_seen_store():
    seen, rules = MemorySeen(), Rules()
    a = Admission(lanes(), seen=seen, rules=rules)
    a.offer("http://a.test/", 3, ["http://a.test/1", "http://a.test/2"])
    batches = seen.batches
    assert a.offer("http://a.test/1", 3, ["http://a.test/2", "http://a.test/1"]) == 0
    assert rules.asked[-1] == [] and seen.batches == batches  # neither was asked again
    assert a.rejected["seen"] == 2


def test_with_a_sink_the_admitted_links_go_there_and_nothing_is_queued_here():
    ls, seen, sink = lanes(), MemorySeen(), Sink()
    assert isinstance(sink, LinkSink)
    a = Admission(ls, seen=seen, rules=UrlRules(depth_in_site=3, forbidden_extensions=(".zip",)), sink=sink)
    assert a.offer("http://a.test/x", 2, ["http://a.test/1", "http://a.test/2.zip"], hops=0) == 1
    assert a.rejected == {"forbiddenExtension": 1}  # the rules still apply here
    assert a.offer("http://a.test/x", 2, ("http://b.test/",), redirect=True, hops=2) == 1
    assert sink.added == [("http://a.test/1", 1, 0), ("http://b.test/", 2, 2)]
    assert seen.batches == 0 and len(ls.main) == 0 and a.taken == 0
    # remembered once handed over: offered again, refused here without the sink
    assert a.offer("http://a.test/y", 2, ["http://a.test/1"]) == 0 and len(sink.added) == 2
    assert a.offer_url("http://c.test/") == ("accepted", None) and sink.added[-1] == ("http://c.test/", 3, 0)


def test_offer_url_answers_and_counts_only_refused_links():
    ls = lanes()
    a = Admission(ls, seen=MemorySeen(), rules=UrlRules(depth_in_site=2, forbidden_extensions=(".zip",)))
    assert a.offer_url("http://a.test/") == ("accepted", None)
    assert a.offer_url("http://a.test/") == ("duplicate", None)
    assert a.offer_url("http://a.test/f.zip") == ("rejected", "forbiddenExtension")
    assert a.offer_url("http://b.test/", priority=False) == ("accepted", None)
    assert [r.url for r in ls.prio.ram_records()] == ["http://a.test/"]
    assert [r.url for r in ls.main.ram_records()] == ["http://b.test/"]
    assert a.rejected == {} and a.taken == 2


def test_each_record_says_how_its_url_was_found_and_from_where():
    ls = lanes()
    a = Admission(ls, seen=MemorySeen(), rules=UrlRules(depth_in_site=3))
    a.offer_url("http://a.test/")
    a.offer_url("http://t.test/", seed=False)
    a.offer("http://a.test/", 3, ["http://a.test/1", "http://a.test/i.png"], embeds={"http://a.test/i.png"})
    a.offer("http://a.test/1", 2, ("http://a.test/moved",), redirect=True, hops=1)
    assert [(r.url, r.found, r.ref) for r in ls.prio.ram_records()] == [
        ("http://a.test/", "S", ""), ("http://t.test/", "I", "")]
    assert [(r.url, r.found, r.ref, r.hops) for r in ls.main.ram_records()] == [
        ("http://a.test/1", "L", "http://a.test/", 0), ("http://a.test/i.png", "E", "http://a.test/", 0),
        ("http://a.test/moved", "R", "http://a.test/1", 1)]
