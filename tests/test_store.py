import os

import pytest

from larbin_py.frontier.seen import SeenSet
from larbin_py.frontier.store import UrlRecord, UrlStore, decode_record, encode_record


def rec(i: int) -> UrlRecord:
    return UrlRecord(f"http://h{i % 7}.test/p{i}", i % 5, 3)


def drain(store: UrlStore) -> list[str]:
    out = []
    while (r := store.pop()) is not None:
        out.append(r.url)
    return out


def test_record_round_trip_and_checksum():
    r = UrlRecord("http://a.test/x?q=1", 4, 2)
    line = encode_record(r)
    assert line.endswith(b"\n")
    assert decode_record(line) == r
    damaged = line.replace(b"x?q", b"y?q")
    assert decode_record(damaged) is None
    assert decode_record(b"garbage") is None
    assert decode_record(b"") is None


def test_fifo_order_within_ram(tmp_path):
    s = UrlStore(str(tmp_path), ram_urls=100)
    for i in range(50):
        s.push(rec(i))
    assert len(s) == 50 and s.in_memory == 50 and s.on_disk_only == 0
    assert drain(s) == [rec(i).url for i in range(50)]
    assert s.pop() is None


def test_fifo_order_across_ram_and_disk(tmp_path):
    s = UrlStore(str(tmp_path), ram_urls=10, read_chunk=256)
    for i in range(1000):
        s.push(rec(i))
        assert s.in_memory <= 10
    assert len(s) == 1000
    assert s.on_disk_only == 990
    got = []
    for i in range(500):
        got.append(s.pop().url)
        assert s.in_memory <= 10
    # interleave pushes with pops: order stays first-in first-out
    for i in range(1000, 1200):
        s.push(rec(i))
    got.extend(drain(s))
    assert got == [rec(i).url for i in range(1200)]
    assert len(s) == 0


def test_ram_is_used_again_once_the_backlog_is_read(tmp_path):
    s = UrlStore(str(tmp_path), ram_urls=5)
    for i in range(20):
        s.push(rec(i))
    assert drain(s) == [rec(i).url for i in range(20)]
    s.push(rec(99))
    assert s.in_memory == 1 and s.on_disk_only == 0
    assert s.pop().url == rec(99).url


def test_segments_roll_and_are_released(tmp_path):
    s = UrlStore(str(tmp_path), ram_urls=3, segment_bytes=400, read_chunk=128)
    for i in range(100):
        s.push(rec(i))
    s.flush()
    segs = sorted(os.listdir(tmp_path))
    assert len(segs) > 5
    assert drain(s) == [rec(i).url for i in range(100)]
    seg, _ = s.read_position()
    removed = s.release_through(seg)
    assert removed == seg
    assert len(os.listdir(tmp_path)) == len(segs) - removed


def test_torn_tail_is_detected_and_counted(tmp_path):
    s = UrlStore(str(tmp_path), ram_urls=2, read_chunk=64)
    for i in range(10):
        s.push(rec(i))
    s.flush()
    path = os.path.join(tmp_path, "seg-00000000.log")
    data = open(path, "rb").read()
    lines = data.splitlines(keepends=True)
    # Corrupt record 5 (a torn write in the middle of the log).
    lines[5] = lines[5][:12] + b"X" + lines[5][13:]
    with open(path, "wb") as f:
        f.write(b"".join(lines))
    got = drain(s)
    assert rec(5).url not in got
    assert got == [rec(i).url for i in range(10) if i != 5]
    assert s.corrupt_records == 1
    assert len(s) == 0


def test_store_needs_positive_ram(tmp_path):
    with pytest.raises(ValueError):
        UrlStore(str(tmp_path), ram_urls=0)


def test_seen_set_add_and_persist(tmp_path):
    seen = SeenSet()
    assert seen.add(1) is True
    assert seen.add(1) is False
    assert seen.add(2**64 - 1) is True
    assert 2**64 - 1 in seen and 3 not in seen
    path = str(tmp_path / "seen.bin")
    seen.save(path)
    again = SeenSet.load(path)
    assert len(again) == 2 and 1 in again and 2**64 - 1 in again
    # A torn tail (half a fingerprint) is ignored, the rest kept.
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")
    assert len(SeenSet.load(path)) == 2
