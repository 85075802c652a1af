"""Partition ownership (larbin_py.distributed.ownership) without Redis: the table
of transitions, a partition's life through it, the faults (a tick that fails,
answers that arrive after the partition moved on, a lost lease), and what
the table tells the coordinator to send."""

from __future__ import annotations

import itertools

import pytest

from larbin_py.distributed.ownership import (ACTIVE, EMPTY_POLL, HELD, OWNERSHIP_TRANSITIONS, READ_MAX, READABLE,
                                             Ownership, PartState)
from larbin_py.transitions import IllegalTransition

FREE, ACQUIRING, TO_CLAIM, CLAIMED, RECLAIM, DRAINING, RELEASING = PartState
EVENTS = sorted({event for _state, event in OWNERSHIP_TRANSITIONS})


def in_state(state: PartState, p: int = 7, token: int = 41) -> Ownership:
    """An ownership table with partition ``p`` driven into ``state`` by legal events."""
    path = {FREE: [], ACQUIRING: ["acquire"], TO_CLAIM: ["acquire", "acquired"],
            CLAIMED: ["acquire", "acquired", "claimed"], RECLAIM: ["acquire", "acquired", "claimed", "unanswered"],
            DRAINING: ["acquire", "acquired", "claimed", "drain"],
            RELEASING: ["acquire", "acquired", "claimed", "drain", "release"]}[state]
    own = Ownership()
    for event in path:
        own.event(p, event, token if event == "acquired" else None)
    assert own.state(p) is state
    return own


@pytest.mark.parametrize("state, event", list(OWNERSHIP_TRANSITIONS))
def test_every_transition_of_the_table_applies(state, event):
    own = in_state(state)
    assert own.event(7, event, 5 if event == "acquired" else None) is OWNERSHIP_TRANSITIONS[state, event]
    assert own.state(7) is OWNERSHIP_TRANSITIONS[state, event]


@pytest.mark.parametrize("state, event", [(s, e) for s, e in itertools.product(PartState, EVENTS)
                                          if (s, e) not in OWNERSHIP_TRANSITIONS])
def test_an_event_the_table_does_not_allow_raises_naming_it_and_changes_nothing(state, event):
    own = in_state(state)
    before = (own.tokens(), own.claims(), own.acquisitions)
    with pytest.raises(IllegalTransition, match=f"partition 7: no transition from .*{state.name}.* '{event}'"):
        own.event(7, event, 5)
    assert own.state(7) is state and (own.tokens(), own.claims(), own.acquisitions) == before


def test_every_state_is_reached_and_left_and_only_held_states_have_a_token():
    entered = set(OWNERSHIP_TRANSITIONS.values()) | {FREE}
    left = {s for (s, _e), new in OWNERSHIP_TRANSITIONS.items() if new is not s}
    assert entered == left == set(PartState)
    for state in PartState:
        own = in_state(state)
        assert (own.token(7) == 41) is (state in HELD)
        assert (7 in own.tokens()) is (state in HELD)
    # a lost lease is possible wherever a token is held, and only there (ACQUIRING has none yet)
    assert {s for (s, e) in OWNERSHIP_TRANSITIONS if e == "lost"} == HELD | {FREE}
    assert {s for (s, e) in OWNERSHIP_TRANSITIONS if e == "drain"} == ACTIVE


def test_a_partition_s_life_acquired_claimed_read_drained_released():
    own = Ownership()
    assert own.to_acquire({3, 5}) == [3, 5]
    own.event(3, "acquire")
    own.event(5, "acquire")
    assert own.to_acquire({3, 5, 6}) == [6]  # an acquire under way is not asked twice
    assert own.tokens() == {} and not own.unsettled()  # no token yet: nothing to renew
    own.event(3, "acquired", 12)
    own.event(5, "refused")  # its previous owner still holds it
    assert own.state(5) is FREE and own.to_acquire({3, 5}) == [5]
    assert own.tokens() == {3: 12} and own.claims() == [(3, 12)] and own.unsettled()
    assert own.reads(0.0, 100) == []  # not read before its claim
    assert own.event(3, "claimed") is CLAIMED
    assert own.claims() == [] and not own.unsettled() and own.acquisitions == 1
    assert own.wants_reads()  # what a claimed partition holds is not known: read it
    assert own.reads(10.0, 100) == [(3, 12, 100)]
    own.read_answered(3, 40, 100)  # fewer than asked: drained for now
    assert not own.wants_reads() and not own.polls_due(10.0 + EMPTY_POLL / 2)
    assert own.polls_due(10.0 + EMPTY_POLL) and own.reads(10.0 + EMPTY_POLL, 100) == [(3, 12, 100)]
    own.enqueued(3)  # this worker queued links there
    assert own.wants_reads()
    own.hold(3, "1-1")
    assert own.holds(3, "1-1")
    own.let_go(3, "1-1")  # acked
    own.hold(3, "1-2")
    own.event(3, "drain")
    assert own.state(3) is DRAINING and own.token(3) == 12 and own.unsettled()
    assert not own.holds(3, "1-2")  # its URLs left the frontier: none is held here
    assert own.reads(20.0, 100) == [] and not own.wants_reads() and own.claims() == []
    assert own.drained(busy={3}, waiting=set()) == []  # a request of it is still running
    assert own.drained(busy=set(), waiting={3}) == []  # an ack of it is still to send
    assert own.drained(busy={4}, waiting={4}) == [3]
    own.event(3, "release")
    assert own.tokens() == {3: 12}  # renewed until the release is answered
    own.event(3, "released")
    assert own.state(3) is FREE and own.tokens() == {} and not own.unsettled()


def test_a_failed_tick_asks_its_acquisitions_again_resends_its_releases_and_claims_what_it_read():
    own = in_state(CLAIMED, p=1, token=11)
    own.event(2, "acquire")  # this tick's acquisition
    for event in ("acquire", "acquired", "claimed", "drain", "release"):  # this tick's release
        own.event(3, event, 13 if event == "acquired" else None)
    for event in ("acquire", "acquired", "claimed"):  # claimed, found empty, not read in this tick
        own.event(4, event, 14 if event == "acquired" else None)
    own.read_answered(4, 0, 1)
    own.hold(1, "9-1")
    assert own.reads(0.0, 30) == [(1, 11, 30)]
    moved = own.unanswered(read=[1])
    assert moved == [1, 2, 3]
    assert own.state(2) is FREE and own.to_acquire({2}) == [2]  # asked again (a new token then)
    assert own.state(3) is DRAINING and own.drained(set(), set()) == [3]  # released by the next tick
    assert own.state(1) is RECLAIM and own.claims() == [(1, 11)]  # its read may have been delivered
    assert own.holds(1, "9-1")  # the claim skips what is held here
    assert own.state(4) is CLAIMED  # nothing of it was in flight
    assert own.reads(1.0, 30)[0][0] == 1  # reads go on meanwhile
    assert own.event(1, "claimed") is CLAIMED and own.claims() == []


def test_answers_that_arrive_after_the_partition_moved_on_are_dropped_by_the_table():
    # the heartbeat (earlier in the tick) gave it away: the claim's entries stay pending
    own = in_state(TO_CLAIM)
    own.event(7, "drain")
    assert own.event(7, "claimed") not in READABLE and own.state(7) is DRAINING
    assert own.event(7, "read") not in READABLE
    own.hold(7, "1-1")
    assert not own.holds(7, "1-1")  # nothing is held for a partition being given away
    # a duplicate worker id: the heartbeat lost every lease, the claim still answered
    own = in_state(RECLAIM)
    assert own.events([7], "lost") == [7]
    assert own.event(7, "claimed") is FREE and own.event(7, "read") is FREE and own.event(7, "released") is FREE
    assert own.events([7], "lost") == []  # a second fenced answer in the tick: nothing more to undo
    assert own.state(7) is FREE and own.tokens() == {}


@pytest.mark.parametrize("state", sorted(HELD, key=lambda s: s.value))
def test_a_lost_lease_frees_the_partition_from_every_held_state(state):
    own = in_state(state)
    assert own.events([7], "lost") == [7]
    assert own.state(7) is FREE and own.token(7) is None and not own.holds(7, "x")
    assert own.to_acquire({7}) == [7]  # the map may give it back: a new token then


def test_reads_split_the_inbox_room_between_the_partitions_that_may_hold_more():
    own = Ownership()
    for p in (1, 2, 3):
        for event in ("acquire", "acquired", "claimed"):
            own.event(p, event, 100 + p if event == "acquired" else None)
    assert own.reads(0.0, 0) == []  # no room
    assert [c for _p, _t, c in own.reads(1.0, 10)] == [3, 3, 3]
    assert [c for _p, _t, c in own.reads(2.0, 1)] == [1, 1, 1]  # at least one each
    assert [c for _p, _t, c in own.reads(3.0, 10 ** 6)] == [READ_MAX] * 3
    own.read_answered(2, 0, READ_MAX)  # empty: polled every EMPTY_POLL s only
    assert [p for p, _t, _c in own.reads(3.1, 30)] == [1, 3]
    assert [p for p, _t, _c in own.reads(3.0 + EMPTY_POLL, 30)] == [1, 2, 3]
    own.event(3, "drain")
    assert [p for p, _t, _c in own.reads(10.0, 30)] == [1, 2]
