"""The partition maps: host → partition (stable forever), partition → worker (balanced, few moves)."""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys

import pytest

from larbin_py.distributed.partition import assign, host_key, load_bound, moved, partition_of, score

P = 256


def test_stability_vectors():
    # These values are part of every crawl stored in Redis (meta keeps P, not
    # the map): a change of hash would scatter a running crawl's hosts.
    assert partition_of("example.com", 256) == 102
    assert partition_of("www.example.com", 256) == 177
    assert partition_of("a.sim.test", 256) == 127
    assert partition_of("[::1]:80", 256) == 94
    assert partition_of("xn--bcher-kva.example", 256) == 185
    assert partition_of("example.com", 1 << 30) == 30352998
    assert score("w1", 0) == 563094775000905091
    assert score("w2", 255) == 1394325708414614209


def test_partition_is_blake2b_of_the_host_key():
    digest = hashlib.blake2b(b"example.com", digest_size=8).digest()
    assert partition_of("example.com", 1000) == int.from_bytes(digest, "big") % 1000


@pytest.mark.parametrize("variant", ["Example.COM", "example.com:8080", "EXAMPLE.com.", " example.com:443"])
def test_case_port_and_trailing_dot_do_not_matter(variant):
    assert host_key(variant) == "example.com"
    assert partition_of(variant, P) == partition_of("example.com", P)


def test_ipv6_literal_keeps_its_brackets():
    assert host_key("[2001:DB8::1]:8080") == "[2001:db8::1]"
    assert host_key("[2001:db8::1]") == "[2001:db8::1]"


def test_same_in_another_process():
    # Python's hash() is salted per process; the partition must not be.
    code = "from larbin_py.distributed.partition import partition_of; print(partition_of('h42.sim.test', 256))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert int(out.stdout) == partition_of("h42.sim.test", 256)


def test_hosts_spread_over_partitions():
    counts = [0] * P
    for i in range(25600):
        counts[partition_of(f"h{i}.sim.test", P)] += 1
    assert min(counts) > 50 and max(counts) < 160  # mean 100


def test_assign_is_deterministic_and_order_free():
    a = assign(P, ["w3", "w1", "w2"])
    b = assign(P, ["w1", "w2", "w3", "w2"])
    assert a == b
    assert sorted(a) == list(range(P))
    assert set(a.values()) == {"w1", "w2", "w3"}


def test_assign_empty_and_single():
    assert assign(P, []) == {}
    assert set(assign(P, ["solo"]).values()) == {"solo"}
    with pytest.raises(ValueError):
        assign(0, ["w"])


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16])
def test_load_is_bounded(n):
    for trial in range(10):
        workers = [f"t{trial}-w{i}" for i in range(n)]
        owners = list(assign(P, workers).values())
        bound = math.ceil(1.1 * P / n)
        assert load_bound(P, n) == bound
        assert max(owners.count(w) for w in workers) <= bound


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8])
def test_few_partitions_move_on_join_and_leave(n):
    join_ratios, leave_ratios = [], []
    for trial in range(20):
        workers = [f"t{trial}-w{i}" for i in range(n)]
        base = assign(P, workers)
        joined = assign(P, workers + [f"t{trial}-new"])
        left = assign(P, workers[1:])
        join_ratios.append(moved(base, joined) / (P / (n + 1)))
        leave_ratios.append(moved(base, left) / (P / n))
        # a leave moves the leaver's partitions, and only a few others
        gone = [p for p, w in base.items() if w == workers[0]]
        assert all(left[p] != workers[0] for p in gone)
    assert sum(join_ratios) / len(join_ratios) <= 1.35
    assert sum(leave_ratios) / len(leave_ratios) <= 1.35
    assert max(join_ratios + leave_ratios) <= 1.6


def test_only_the_joiner_gains_when_loads_allow():
    # Rendezvous: a joiner takes partitions; the others never swap among themselves much.
    workers = [f"w{i}" for i in range(4)]
    base = assign(P, workers)
    joined = assign(P, workers + ["w4"])
    to_joiner = sum(1 for p in range(P) if joined[p] == "w4")
    assert to_joiner >= P // 5 - 5
    assert moved(base, joined) - to_joiner <= P // 20


def test_assign_is_cached_per_member_set_and_its_maps_are_the_callers_own():
    from larbin_py.distributed.partition import _owners

    workers = ["w3", "w1", "w2", "w4"]
    first = assign(256, workers)
    # the map computed without the cache is the same
    uncached = dict(enumerate(_owners.__wrapped__(256, tuple(sorted(workers)), 0.1)))
    assert first == uncached
    hits = _owners.cache_info().hits
    again = assign(256, reversed(workers))  # any order, same set: a cache hit
    assert _owners.cache_info().hits == hits + 1 and again == first
    # a caller that changes its map does not change the next caller's
    again[0] = "intruder"
    assert assign(256, workers)[0] == first[0] != "intruder"
    assert assign(256, workers, epsilon=0.5) == dict(enumerate(_owners.__wrapped__(256, tuple(sorted(workers)), 0.5)))
