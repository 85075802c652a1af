"""The ack buffer (larbin_py.distributed.acks) without Redis: an outcome is sent
only after a durable point covers it, with the output position; a failed tick
sends its acks again first; a lost lease keeps them as orphans for the
partition's return; a stop flushes them, or drops them when the output may
not be durable."""

from __future__ import annotations

import json

from larbin_py.distributed.acks import AckBuffer


def test_an_outcome_is_ready_only_once_a_durable_point_covers_it():
    b = AckBuffer(now=0.0)
    b.add(1, "1-1", "fetched")
    b.add(2, "2-1", "err40X")
    assert b and b.ready == [] and b.waiting() == {1, 2}
    assert not b.cycle_late(0.5, 1.0) and b.cycle_late(1.0, 1.0)
    batch = b.take_pending()
    b.add(1, "1-2", "fetched")  # ended while the output syncs: not covered by this sync
    b.made_durable(batch, {"index_length": 120, "mode": "mirror"}, now=1.2)
    acks, by_part = b.take_ready()
    assert acks == [(1, "1-1", "fetched"), (2, "2-1", "err40X")]
    assert by_part == {1: [("1-1", "fetched")], 2: [("2-1", "err40X")]}
    assert b.pending == [(1, "1-2", "fetched")] and b.waiting() == {1}
    assert not b.cycle_late(2.0, 1.0) and b.cycle_late(2.2, 1.0)  # the cycle counts from the sync
    # nothing to wait for: straight to the next tick
    b.add_ready(3, "3-1", "badUrl")
    assert b.take_ready()[0] == [(3, "3-1", "badUrl")]


def test_the_output_position_goes_once_with_the_acks_it_covers():
    b = AckBuffer()
    assert b.outpos_due() is None
    b.made_durable([(1, "1-1", "fetched")], {"mode": "warc", "file": 3, "offset": 99}, now=1.0)
    due = b.outpos_due()
    assert json.loads(due) == {"mode": "warc", "file": 3, "offset": 99}
    assert due == '{"file":3,"mode":"warc","offset":99}'  # one spelling: unchanged is not sent again
    assert b.outpos_due() == due  # until a tick stored it
    b.outpos_stored(due)
    assert b.outpos_due() is None
    b.made_durable([], {"offset": 99, "file": 3, "mode": "warc"}, now=2.0)
    assert b.outpos_due() is None
    b.made_durable([], None, now=3.0)  # an output without position: the last one stands
    assert b.outpos_due() is None and b.outpos == due
    b.made_durable([], {"mode": "warc", "file": 4, "offset": 0}, now=4.0)
    assert json.loads(b.outpos_due())["file"] == 4


def test_a_failed_tick_sends_its_acks_again_before_the_newer_ones():
    b = AckBuffer()
    b.made_durable([(1, "1-1", "fetched"), (2, "2-1", "fetched")], None, now=1.0)
    taken, _ = b.take_ready()
    b.add_ready(1, "1-9", "badUrl")  # while the tick was under way
    b.put_back(taken)
    again, by_part = b.take_ready()
    assert again == [(1, "1-1", "fetched"), (2, "2-1", "fetched"), (1, "1-9", "badUrl")]
    assert by_part[1] == [("1-1", "fetched"), ("1-9", "badUrl")]
    b.acked(by_part[1])
    b.acked(by_part[2])
    assert b.pages == 2  # fetched pages, not forgotten ones


def test_a_lost_lease_keeps_its_outcomes_as_orphans_for_the_partition_s_return():
    b = AckBuffer()
    b.add(1, "1-1", "fetched")
    b.add(2, "2-1", "fetched")
    b.made_durable(b.take_pending(), None, now=1.0)
    b.add(1, "1-2", "err40X")
    b.add(2, "2-2", "fetched")
    assert b.lost([1]) == 2
    assert b.ready == [(2, "2-1", "fetched")] and b.pending == [(2, "2-2", "fetched")]
    assert b.waiting() == {2}  # a drain of partition 1 waits for nothing
    # partition 1 comes back: its claim brings 1-1 back (acked, not fetched again), not 1-2
    assert b.orphan(1, "1-1") == "fetched"
    assert b.orphan(1, "1-1") is None  # once
    assert b.orphan(2, "1-2") is None  # another partition's entry id
    b.forget_orphans(1)  # what the claim did not bring back was acked or taken elsewhere
    assert b.orphans == {}


def test_an_ack_refused_as_fenced_keeps_its_outcomes_as_orphans():
    """The lease went while the ack was on its way (a pause longer than it): if the
    partition comes back here, its claim acks the entries instead of fetching them again."""
    b = AckBuffer(now=0.0)
    b.add(1, "1-1", "fetched")
    b.add(1, "1-2", "err40X")
    b.made_durable(b.take_pending(), None, now=0.1)
    _acks, by_part = b.take_ready()
    b.refused(1, by_part[1])  # the tick's lb_ack answered fenced
    assert not b
    assert b.orphan(1, "1-1") == "fetched" and b.orphan(1, "1-2") == "err40X"
    b2 = AckBuffer(orphans_max=1)
    b2.refused(3, [("3-1", "fetched"), ("3-2", "fetched")])
    assert b2.orphans == {"3/3-1": "fetched"}  # bounded as the others


def test_orphans_are_bounded():
    b = AckBuffer(orphans_max=3)
    for i in range(5):
        b.add(1, f"1-{i}", "fetched")
    b.lost([1])
    assert len(b.orphans) == 5  # a lost lease keeps all of its own (the bound is checked per loss)
    b.add(2, "2-1", "fetched")
    b.lost([2])
    assert "2/2-1" not in b.orphans and not b  # over the bound: dropped, fetched again by the next owner
    b.forget_orphans(1)
    b.add(3, "3-1", "fetched")
    b.lost([3])
    assert b.orphans == {"3/3-1": "fetched"}


def test_a_stop_flushes_everything_with_the_last_durable_point():
    b = AckBuffer()
    b.add(1, "1-1", "fetched")
    b.add_ready(2, "2-1", "badUrl")
    b.flush({"index_length": 7}, now=5.0)
    assert b.pending == [] and b.ready == [(2, "2-1", "badUrl"), (1, "1-1", "fetched")]
    assert b.outpos_due() == '{"index_length":7}'


def test_a_stop_whose_output_may_not_be_durable_acks_nothing():
    b = AckBuffer()
    b.add(1, "1-1", "fetched")
    b.made_durable(b.take_pending(), {"index_length": 7}, now=1.0)
    b.add(1, "1-2", "fetched")
    b.lost([2])
    b.drop()
    assert not b and b.take_ready() == ([], {}) and b.waiting() == set()


def test_pages_are_reported_as_deltas():
    b = AckBuffer()
    b.acked([("1-1", "fetched"), ("1-2", "robotsDenied"), ("1-3", "fetched")])
    assert b.pages_to_report() == 2
    b.pages_reported(2)
    assert b.pages_to_report() == 0
    b.acked([("1-4", "fetched")])
    assert b.pages_to_report() == 1


def test_a_recrawl_s_verdicts_ride_with_their_outcome_told_before_or_after_it():
    """The verdicts of a page join its outcome (``fetched;unchanged,notModified``) whether the
    recrawl tells them just after the outcome was added or just before; the pages acked
    are still counted by their outcome."""
    b = AckBuffer()
    b.add(1, "1-1", "fetched")
    b.verdict(1, "1-1", ("unchanged", "notModified"))  # after (a 304: the page is done first)
    b.verdict(2, "2-1", ("gone",))  # before (a forget's verdict)
    b.add(2, "2-1", "err40X")
    b.add(1, "1-2", "fetched")  # no verdict: a first crawl's page
    b.add(3, "3-1", "fetched")
    b.add(3, "3-2", "err40X")  # (a URL forgotten on the way, before 3-1's verdict came)
    b.verdict(3, "3-1", ("changed",))
    b.made_durable(b.take_pending(), None, 1.0)
    acks, by_part = b.take_ready()
    assert by_part == {1: [("1-1", "fetched;unchanged,notModified"), ("1-2", "fetched")],
                       2: [("2-1", "err40X;gone")], 3: [("3-1", "fetched;changed"), ("3-2", "err40X")]}
    b.acked(by_part[1])
    assert b.pages_to_report() == 2
