import os
import random

import pytest

from larbin_py.frontier.seen import SeenSet, SeenUrls
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
    path = str(tmp_path / "seen.log")
    seen = SeenSet()
    seen.open_log(path)
    assert seen.add(1) is True
    assert seen.add(1) is False
    assert seen.add(2**64 - 1) is True
    assert 2**64 - 1 in seen and 3 not in seen
    seen.close()
    again = SeenSet.load(path)
    assert len(again) == 2 and 1 in again and 2**64 - 1 in again and 3 not in again
    # A torn tail (part of a fingerprint) is dropped and counted, the rest kept.
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")
    torn = SeenSet.load(path)
    assert len(torn) == 2 and torn.dropped_bytes == 3
    assert os.path.getsize(path) == 16


def test_seen_set_merges_into_the_sorted_array_without_losing_any():
    rng = random.Random(5)
    fps = [rng.getrandbits(64) for _ in range(5000)]
    seen = SeenSet(merge_at=300)
    for fp in fps[:2500]:
        assert seen.add(fp)
    assert seen.merges >= 8
    # a batch mixing old, new and repeated fingerprints
    batch = fps[2000:3000] + fps[2900:3100]
    got = seen.add_many(batch)
    expected, mine = [], set(fps[:2500])
    for fp in batch:
        expected.append(fp not in mine)
        mine.add(fp)
    assert got == expected
    assert len(seen) == len(mine) == 3100
    assert all(fp in seen for fp in fps[:3100]) and not any(fp in seen for fp in fps[3100:])
    assert seen.add_many([]) == []


def test_seen_set_holds_8_bytes_per_fingerprint_once_merged():
    seen = SeenSet(range(1, 200_001), merge_at=1000)
    assert len(seen) == 200_000
    assert seen.memory_bytes() < 9 * 200_000


def test_reopen_from_a_read_position_keeps_the_backlog(tmp_path):
    store = UrlStore(str(tmp_path), ram_urls=10, segment_bytes=400)
    for i in range(100):
        store.push(rec(i))
    got = [store.pop().url for _ in range(25)]
    window = [r.url for r in store.ram_records()]
    pos, end = store.read_position(), store.write_position()
    store.flush()
    for i in range(100, 110):  # appended after the "checkpoint"
        store.push(rec(i))
    store.flush()
    again = UrlStore.open_existing(str(tmp_path), pos, ram_urls=10, segment_bytes=400)
    rest = []
    while (r := again.pop()) is not None:
        rest.append(r.url)
    assert got + window + rest == [rec(i).url for i in range(110)]
    # the same, cutting what came after the checkpoint
    cut = UrlStore.open_existing(str(tmp_path), pos, ram_urls=10, segment_bytes=400, truncate_at=end)
    rest = []
    while (r := cut.pop()) is not None:
        rest.append(r.url)
    assert got + window + rest == [rec(i).url for i in range(100)]
    cut.push(rec(999))
    assert cut.pop().url == rec(999).url


def test_reopen_cuts_a_torn_tail_so_new_records_survive(tmp_path):
    store = UrlStore(str(tmp_path), ram_urls=2)
    for i in range(5):
        store.push(rec(i))
    store.close()
    with open(tmp_path / "seg-00000000.log", "ab") as f:
        f.write(b"0badc0de 1 1 http://cut")
    again = UrlStore.open_existing(str(tmp_path), (0, 0), ram_urls=2)
    assert again.corrupt_records == 1 and len(again) == 5
    again.push(rec(5))
    urls = []
    while (r := again.pop()) is not None:
        urls.append(r.url)
    assert urls == [rec(i).url for i in range(6)]


def test_seen_urls_answers_exact_strings_in_order():
    held = SeenUrls(size=100)
    held.remember(["http://a.test/1", "http://a.test/2"])
    links = ["http://a.test/3", "http://a.test/1", "http://A.test/2", "http://a.test/3", "http://a.test/2"]
    assert held.unknown(links) == ["http://a.test/3", "http://A.test/2", "http://a.test/3"]
    assert "http://a.test/1" in held and "http://a.test/1/" not in held and len(held) == 2


def test_seen_urls_keeps_two_generations_and_drops_the_oldest():
    held = SeenUrls(size=3)
    held.remember(["a", "b"])
    held.remember(["c"])
    assert held.unknown(["a", "b", "c"]) == [] and len(held) == 3
    held.remember(["d", "e"])  # the young generation would overflow: it becomes the old one
    assert held.unknown(["a", "c", "d", "e"]) == [] and len(held) == 5
    held.remember(["f"])
    held.remember(["g"])  # {a, b, c} dropped, {d, e, f} now the old generation
    assert held.unknown(["a", "b", "c", "d", "e", "f", "g"]) == ["a", "b", "c"]
    assert len(held) == 4
    held.remember(list("klmnop"))  # a page of more than size links: its last ones stay
    assert held.unknown(list("defgklmnop")) == list("defklm") and len(held) == 4


def test_a_segment_cut_before_the_read_position_is_reported_and_reading_goes_on(tmp_path):
    s = UrlStore(str(tmp_path), ram_urls=10, segment_bytes=2000)
    for i in range(200):
        s.push(rec(i))
    for _ in range(60):
        s.pop()
    seg, off = s.read_position()
    s.close()
    segments = sorted(os.listdir(tmp_path))
    assert len(segments) > seg + 1 and off > 100
    # the read segment cut in the middle of a record, before the read position
    path = tmp_path / f"seg-{seg:08d}.log"
    with open(path, "r+b") as f:
        f.truncate(off // 2 + 3)
    again = UrlStore.open_existing(str(tmp_path), (seg, off), ram_urls=10, segment_bytes=2000)
    [message] = again.damage
    assert message.startswith(f"{path}: {off // 2 + 3} bytes, cut before the checkpoint's read position")
    urls = drain(again)
    # reading goes on at the next segment: every record of the later segments is kept
    later = b"".join((tmp_path / name).read_bytes() for name in segments[seg + 1:])
    assert urls == [decode_record(line).url for line in later.splitlines()]
    assert urls[-1] == rec(199).url

    # the last segment cut (or emptied) before the read position: read on from its end
    t = tmp_path / "last"
    s = UrlStore(str(t), ram_urls=10)
    for i in range(50):
        s.push(rec(i))
    position = s.read_position()
    s.close()
    with open(t / "seg-00000000.log", "r+b") as f:
        f.truncate(0)
    again = UrlStore.open_existing(str(t), position, ram_urls=10)
    assert len(again.damage) == 1 and len(again) == 0 and again.pop() is None
    again.push(rec(7))
    assert drain(again) == [rec(7).url]
    assert UrlStore.open_existing(str(t / "new"), (0, 0), ram_urls=10).damage == []


def test_the_log_line_frame_tells_a_good_line_from_a_damaged_one():
    from larbin_py.logline import frame, unframe

    line = frame(b"3 1 http://a.test/")
    assert unframe(line) == b"3 1 http://a.test/"
    assert unframe(line[:-1]) is None  # cut before its newline by a crash
    assert unframe(line[:-1], whole=False) == b"3 1 http://a.test/"
    assert unframe(line.replace(b"a.test", b"b.test")) is None  # damaged body
    assert unframe(b"zzzzzzzz " + line[9:]) is None  # no CRC
    assert unframe(b"\n") is None and unframe(b"") is None


def test_a_record_keeps_how_it_was_found_and_the_recrawl_token_on_disk(tmp_path):
    found = UrlRecord("http://a.test/x", 3, 2, 1, found="R", ref="http://a.test/old", prev="1700000000,,,12,\"e,1\"")
    seed = UrlRecord("http://a.test/", 5, 2, found="S")
    tagged = UrlRecord("http://b.test/", 1, 0, 0, "7/1-0", found="L", ref="http://a.test/")
    listed = UrlRecord("http://a.test/l", 1, 0, via="s:2024-01-01", found="M", ref="http://a.test/sitemap.xml")
    for r in (found, seed, tagged, listed, UrlRecord("http://c.test/", 1, 0, prev="1,2,,-,")):
        assert decode_record(encode_record(r)) == r
    assert encode_record(seed).split(b" ")[5:] == [b"-", b"-", b"S", b"-\n"]
    # a sitemap's mark alone: the six-field form of the crawls before
    assert encode_record(UrlRecord("http://a.test/s", 0, 1, via="m0@a.test")).count(b" ") == 6
    # the forms written before: read as ever
    old = encode_record(UrlRecord("http://a.test/y", 2, 1, 4, "3/9-1"))
    assert decode_record(old) == UrlRecord("http://a.test/y", 2, 1, 4, "3/9-1")
    from larbin_py.logline import frame
    assert decode_record(frame(b"1 0 0 http://a.test/ - - Xhttp://b/ -")) is None  # no such kind
    assert decode_record(frame(b"1 0 0 http://a.test/ - - L")) is None  # seven fields: damaged
    s = UrlStore(str(tmp_path), ram_urls=1, read_chunk=256)
    for r in (seed, found, tagged):
        s.push(r)
    assert [s.pop(), s.pop(), s.pop()] == [seed, found, tagged]  # the last two read back from disk
