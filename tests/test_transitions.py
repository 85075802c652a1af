"""The state machines' tables (larbin_py.transitions): every legal transition
applies, every other (state, event) pair raises IllegalTransition."""

from __future__ import annotations

import itertools

import pytest

from larbin_py.frontier.sites import DNS_TRANSITIONS, ROBOTS_TRANSITIONS, DnsState, NamedSite, RobotsState
from larbin_py.net.http import _ACTIVE, _CLOSED, _CONNECTING, _IDLE, CONN_TRANSITIONS
from larbin_py.transitions import IllegalTransition, step

CONN_STATES = (_CONNECTING, _ACTIVE, _IDLE, _CLOSED)


def site() -> NamedSite:
    return NamedSite("http://a.test:80", "http", "a.test", 80)


#: A site's two machines: the attribute holding the state, the method applying an event, the table.
SITE_MACHINES = {"dns": ("dns", "dns_event", DNS_TRANSITIONS),
                 "robots": ("robots_state", "robots_event", ROBOTS_TRANSITIONS)}


@pytest.mark.parametrize("machine, state, event",
                         [(name, state, event) for name, (_a, _m, table) in SITE_MACHINES.items()
                          for state, event in table])
def test_every_site_transition(machine, state, event):
    attr, method, table = SITE_MACHINES[machine]
    s = site()
    setattr(s, attr, state)
    getattr(s, method)(event)
    assert getattr(s, attr) is table[state, event]


@pytest.mark.parametrize("state, event", list(CONN_TRANSITIONS))
def test_every_connection_transition(state, event):
    assert step(CONN_TRANSITIONS, state, event, "connection") == CONN_TRANSITIONS[state, event]


@pytest.mark.parametrize("table, states", [(DNS_TRANSITIONS, list(DnsState)),
                                           (ROBOTS_TRANSITIONS, list(RobotsState)),
                                           (CONN_TRANSITIONS, CONN_STATES)])
def test_every_pair_outside_the_table_raises(table, states):
    events = {event for _, event in table}
    illegal = [(s, e) for s, e in itertools.product(states, events) if (s, e) not in table]
    assert illegal  # each machine refuses something
    for state, event in illegal:
        with pytest.raises(IllegalTransition, match="no transition from"):
            step(table, state, event, "machine")
    with pytest.raises(IllegalTransition):
        step(table, states[0], "no such event", "machine")


def test_an_illegal_site_transition_raises_and_leaves_the_state():
    s = site()
    with pytest.raises(IllegalTransition, match=r"DNS of http://a.test:80: no transition from .*NEW.* 'answer'"):
        s.dns_event("answer")  # an answer to a question never asked
    assert s.dns is DnsState.NEW
    s.robots_state = RobotsState.OK
    with pytest.raises(IllegalTransition, match="robots.txt of http://a.test:80"):
        s.robots_event("fetch")  # rules known: robots.txt is not fetched again before they expire
    assert s.robots_state is RobotsState.OK


def test_every_state_is_reached_and_left():
    """No state without a way in (but the first) or a way out (but CLOSED)."""
    for table, states, first, last in [(DNS_TRANSITIONS, set(DnsState), DnsState.NEW, None),
                                       (ROBOTS_TRANSITIONS, set(RobotsState), RobotsState.NONE, None),
                                       (CONN_TRANSITIONS, set(CONN_STATES), _CONNECTING, _CLOSED)]:
        entered = set(table.values()) | {first}
        left = {s for (s, _e), new in table.items() if new != s} | ({last} if last is not None else set())
        assert entered == states and left == states
