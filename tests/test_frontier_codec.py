"""The checkpoint codec (larbin_py.frontier.codec): a frontier's state to JSON and back,
a damaged section refused in one line, and a restart continuing where the snapshot was."""

from __future__ import annotations

import copy
import json
import random

import pytest

from larbin_py.config import parse_config_text
from larbin_py.crawl_state import LocalState
from larbin_py.frontier import codec
from larbin_py.frontier.assembly import assemble
from larbin_py.state import StateError, write_checkpoint

from test_frontier import Sim

GOOD = {"stores": {"main": [0, 120], "priority": [1, 0], "wait": [0, 0], "wait_end": [0, 64]},
        "fetched": 5, "forgotten": {"err40X": 2}, "retried": {"timeout": 1},
        "waits": {"http://a.test:80": 1000.5}}


def test_encode_and_decode_are_inverse_through_json():
    state = codec.decode(GOOD)
    assert state == codec.FrontierState(stores={"main": [0, 120], "priority": [1, 0], "wait": [0, 0],
                                                "wait_end": [0, 64]},
                                        fetched=5, forgotten={"err40X": 2}, retried={"timeout": 1},
                                        waits={"http://a.test:80": 1000.5})
    assert codec.decode(json.loads(json.dumps(codec.encode(state)))) == state


def test_an_older_section_without_waits_or_wait_end_is_read():
    doc = {"stores": {"main": [0, 0], "priority": [0, 0], "wait": [0, 0]}, "fetched": 0}
    state = codec.decode(doc)
    assert "wait_end" not in state.stores and state.waits == {} and state.forgotten == {}


def test_a_wait_that_is_not_a_number_is_dropped():
    doc = dict(GOOD, waits={"http://a.test:80": "soon", "http://b.test:80": True, "http://c.test:80": 7})
    assert codec.decode(doc).waits == {"http://c.test:80": 7.0}


def _damaged(path: str, value):
    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    where = doc
    for key in parents:
        where = where[key]
    if value is KeyError:
        del where[last]
    else:
        where[last] = value
    return doc


@pytest.mark.parametrize("path, value, message", [
    ("fetched", KeyError, "frontier.fetched: missing"),
    ("fetched", -1, "frontier.fetched: expected a count (an integer >= 0), got -1"),
    ("fetched", "5", "frontier.fetched: expected a count (an integer >= 0), got '5'"),
    ("stores", [0, 1], "frontier.stores: expected an object, got [0, 1]"),
    ("stores.wait", KeyError, "frontier.stores.wait: missing"),
    ("stores.main", [0], "frontier.stores.main: expected [segment, offset], got [0]"),
    ("stores.priority", [0, 1.5], "frontier.stores.priority[1]: expected a count"),
    ("stores.wait_end", "end", "frontier.stores.wait_end: expected [segment, offset], got 'end'"),
    ("forgotten", ["err40X"], "frontier.forgotten: expected an object of counts"),
    ("retried.timeout", None, "frontier.retried.timeout: expected a count (an integer >= 0), got None"),
    ("waits", [], "frontier.waits: expected an object, got []"),
])
def test_a_damaged_section_is_refused_naming_the_field(path, value, message):
    with pytest.raises(codec.CheckpointError) as err:
        codec.decode(_damaged(path, value))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_value_shown_in_an_error_is_cut_short():
    with pytest.raises(codec.CheckpointError) as err:
        codec.decode(dict(GOOD, fetched="x" * 500))
    assert len(str(err.value)) < 120


def test_reload_refuses_a_checkpoint_whose_frontier_section_is_damaged(tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    write_checkpoint(str(state_dir), {"frontier": _damaged("stores.main", KeyError), "engine": {}}, [], 1)
    config = parse_config_text("", require_start_urls=False).replace(state_dir=str(state_dir),
                                                                    save_dir=str(tmp_path / "save"))
    with pytest.raises(StateError) as err:
        LocalState(config, reload=True)
    text = str(err.value)
    assert text == f"{state_dir / 'checkpoint.json'}: frontier.stores.main: missing"


def make(tmp_path, **kw):
    args = dict(ram_urls=20, max_urls_by_site=3, max_requests=4, wait_duration=0.5, jitter=0.0,
                rng=random.Random(2), agent="larbin", retries=1, prune_after=None)
    args.update(kw)
    return assemble(str(tmp_path / "frontier"), **args)


def test_a_snapshot_restored_on_the_reopened_lanes_continues_the_crawl(tmp_path):
    f = make(tmp_path)
    urls = [f"http://h{i % 3}.test/{i}" for i in range(60)]
    for u in urls:
        f.admission.push(u, 3, 1)
    robots = {"h0.test": "User-agent: *\nCrawl-delay: 30\n"}
    sim = Sim(f, ips={f"h{i}.test": f"10.0.0.{i}" for i in range(3)}, latency=0.05, robots_body=robots)
    sim.run(until=2.0)
    wall = 5000.0
    state, carry = codec.snapshot(f, sim.now, wall)
    assert state.fetched == f.fetched > 0 and len(carry) == f.in_sites + f.parked + f.in_flight + f.lanes.in_memory
    # h0.test waits out its crawl-delay: the wait crosses the restart in wall time
    held = f.sites["http://h0.test:80"].next_allowed
    assert state.waits["http://h0.test:80"] == pytest.approx(wall + held - sim.now)
    f.close()

    decoded = codec.decode(json.loads(json.dumps(codec.encode(state))))
    g = make(tmp_path, positions=decoded.stores)
    later = 100.0  # a new process: its loop clock starts elsewhere
    codec.restore(g, decoded, carry, later, wall + 1.0)
    assert g.fetched == f.fetched and g.forgotten == f.forgotten and g.retried == f.retried
    assert g.conservation() == (len(urls), len(urls))  # nothing lost, nothing counted twice
    assert len(g.lanes.prio) == len(carry)  # the carried records go first
    assert g.sites["http://h0.test:80"].next_allowed == pytest.approx(later + held - sim.now - 1.0)
    sim2 = Sim(g, ips={f"h{i}.test": f"10.0.0.{i}" for i in range(3)}, latency=0.05, robots_body=robots)
    sim2.now = later
    sim2.run()
    assert g.idle() and g.fetched + sum(g.forgotten.values()) == len(urls)
    assert sorted(set(sim.fetched) | set(sim2.fetched)) == sorted(urls)
