"""The worker's parts without Redis: the sink's per-partition buffers, the
inbox's records and tags, and merge_index."""

from __future__ import annotations

import os

from larbin_py.distributed.inbox import RedisInbox, make_tag, split_tag
from larbin_py.distributed.partition import partition_of
from larbin_py.distributed.sink import RedisSink, decode_entry, encode_entry
from larbin_py.records import NO_LINKS, Visit, decode_token, encode_token
from larbin_py.distributed.crawl_worker import WORKERS_DIR, merge_index
from larbin_py.url import fingerprint


def test_entry_record_round_trip():
    data = encode_entry("http://a.test/x?y=1", 4, 2, 1)
    assert decode_entry(data) == ("http://a.test/x?y=1", 4, 2, 1, "", "")
    assert decode_entry(encode_entry("http://a.test/s.xml", 0, 2, 0, "m1@a.test")) == \
        ("http://a.test/s.xml", 0, 2, 0, "m1@a.test", "")
    assert decode_entry(b"garbage") is None


def test_a_recrawl_token_travels_in_the_entry_with_the_worker_whose_links_log_it_names():
    """A recrawl's token (larbin_py.records) rides in the stream entry, with or without ``via``,
    and names the worker whose links log holds the page's links (``w2@1234``)."""
    visit = Visit(1700000000, 1690000000, 1600000000, "ABC", 1234, 'W/"x@y,z"', "text/html", "w2")
    token = encode_token(visit)
    assert "w2@1234" in token
    for via in ("", "s:2024"):
        data = encode_entry("http://a.test/p", 3, 1, 0, via, token)
        assert decode_entry(data) == ("http://a.test/p", 3, 1, 0, via, token)
        rec = RedisInbox.record(5, "1-0", data)
        assert rec.prev == token and rec.via == via
    assert decode_token(token) == visit  # the ETag may hold '@' and ',': only the links field is split
    for links, text in ((None, ""), (NO_LINKS, "-")):  # nothing to name: no worker written
        visit.links = links
        assert encode_token(visit).split(",")[4] == text


def test_sink_buffers_per_partition_of_the_host_and_wakes_at_its_first_link_and_at_the_batch():
    woke = []
    t = [10.0]
    sink = RedisSink(64, retries=3, batch=4, wake=lambda: woke.append(sink.pending), clock=lambda: t[0])
    sink.add_many(["http://a.test/1", "http://a.test:8080/2"], [5, 5])
    # the first links date the flush: the coordinator, asleep until its heartbeat, is told
    assert sink.pending == 2 and sink.oldest == 10.0 and woke == [2]
    sink.add_many(["http://b.test/1"], [1], 2)
    assert woke == [2]  # neither the first links nor a full batch
    taken = sink.take()
    pa, pb = partition_of("a.test", 64), partition_of("b.test", 64)
    # a host's URLs, whatever the port, go to its one partition
    assert [decode_entry(r)[0] for _, r in taken[pa]] == ["http://a.test/1", "http://a.test:8080/2"]
    assert taken[pb] == [(fingerprint("http://b.test/1"), encode_entry("http://b.test/1", 1, 3, 2))]
    assert sink.pending == 0 and sink.oldest is None and sink.sent == 3
    t[0] = 11.0
    sink.put_back(taken)  # a tick that failed: the links wait for the next one
    assert sink.pending == 3 and sink.sent == 0 and sink.oldest == 11.0
    sink.add_many(["http://b.test/2"], [1])
    assert woke == [2, 4]  # a full batch goes at once
    back = sink.take()
    assert back[pa] == taken[pa] and back[pb][:1] == taken[pb]


def test_inbox_tags_records_and_drops_a_partitions_records():
    inbox = RedisInbox(10)
    rec = inbox.record(7, "1700-0", encode_entry("http://a.test/", 3, 1))
    assert rec.tag == make_tag(7, "1700-0") and split_tag(rec.tag) == (7, "1700-0")
    assert split_tag("") is None
    inbox.push(rec)
    inbox.push(inbox.record(8, "1700-1", encode_entry("http://b.test/", 3, 1)))
    assert inbox.room == 8 and len(inbox) == 2
    assert inbox.drop(lambda r: split_tag(r.tag)[0] == 7) == 1
    assert [r.url for r in inbox.ram_records()] == ["http://b.test/"]
    assert inbox.record(1, "x", b"bad") is None


def test_merge_index_lists_each_url_once(tmp_path):
    save = tmp_path / "save"
    for w, lines in {"w0": ["http://a/\ta/index.html\t200\ttext/html\t5\n", "http://b/\tb\t200\t\t3\n"],
                     "w1": ["http://b/\tb\t200\t\t3\n", "http://c/\tc\t200\t\t1\n", "http://d/\td\t200"]}.items():
        d = save / WORKERS_DIR / w
        d.mkdir(parents=True)
        (d / "index.tsv").write_text("".join(lines))
    assert merge_index(str(save)) == 3  # b once; d's line was cut by a kill: left out
    urls = [line.split("\t")[0] for line in (save / "index.tsv").read_text().splitlines()]
    assert sorted(urls) == ["http://a/", "http://b/", "http://c/"]
    assert not os.path.exists(save / "index.tsv.tmp")


def test_the_crawl_meta_names_each_shared_key_and_tells_a_differing_joiner():
    from larbin_py.config import parse_config_text
    from larbin_py.distributed import launcher
    from larbin_py.distributed.shared import SHARED_KEYS, crawl_meta

    assert launcher.crawl_meta is crawl_meta  # one list, one function
    config = parse_config_text("", require_start_urls=False)
    meta = crawl_meta(config)
    assert sorted(meta.rules) == sorted(SHARED_KEYS)
    other = crawl_meta(config.replace(wait_duration=config.wait_duration + 1, lease_ttl=3.0))
    assert [d.split(" ")[0] for d in other.differences(meta)] == ["leaseTtl", "waitDuration"]
    assert crawl_meta(config.replace(http_port=9999)).differences(meta) == []  # not shared


# --- the in-flight file (larbin_py.distributed.inflight) ------------------------------

def test_the_inflight_file_holds_exactly_the_requests_running_and_reuses_its_slots(tmp_path):
    from larbin_py.distributed.inflight import SLOT, InflightLog, left_in

    path = str(tmp_path / "inflight-w1")
    log = InflightLog(path)
    a, b, c = log.start("3/1-0"), log.start("3/2-0"), log.start("7/5-1")
    assert left_in(path) == ["3/1-0", "3/2-0", "7/5-1"]  # read by another process, as after a death
    log.end(b)
    assert left_in(path) == ["3/1-0", "7/5-1"]
    d = log.start("9/9-9")  # the freed slot again: the file does not grow
    assert d == b and os.path.getsize(path) == 3 * SLOT
    assert log.start("x" * SLOT) is None and log.untracked == 1  # too long for a slot: not tracked
    for slot in (a, c, d):
        log.end(slot)
    log.close()  # nothing running: a clean stop leaves it empty
    assert os.path.getsize(path) == 0 and left_in(path) == []


def test_the_inflight_file_outlives_a_sigkill_of_its_writer(tmp_path):
    import signal
    import subprocess
    import sys

    from larbin_py.distributed.inflight import left_in

    path = str(tmp_path / "inflight-w2")
    code = (f"import os, signal; from larbin_py.distributed.inflight import InflightLog\n"
            f"log = InflightLog({path!r}); s = log.start('1/10-0'); log.start('2/20-0'); log.end(s)\n"
            f"os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)))
    assert proc.returncode == -signal.SIGKILL
    assert left_in(path) == ["2/20-0"]  # the request that was running when it died
    assert left_in(str(tmp_path / "none")) == []


def test_a_worker_started_again_cuts_its_records_back_to_its_last_acks(tmp_path):
    """A launcher's worker (generation.json) writes its records in its own folder; started
    again with the records' position of its last acks (``outpos:<w>``) it cuts them back there
    (the pages after it are fetched again and recorded again), and a fresh start empties them."""
    from larbin_py.config import Config
    from larbin_py.distributed.crawl_worker import DistState
    from larbin_py.distributed.records import Generation, worker_root
    from larbin_py.distributed.redisio import RedisIO
    from larbin_py.frontier.store import UrlRecord, decode_record
    from larbin_py.records import records_path

    config = Config(state_dir=str(tmp_path / "state"), save_dir=str(tmp_path / "save"),
                    redis_url="redis://127.0.0.1:1/0", output_mode="none", http_port=0)
    rio = RedisIO(config.redis_url, "t", partitions=4)  # (never connected: nothing here asks Redis)

    def page(n: int):
        return (UrlRecord(f"http://a.test/{n}", 3, 0), Visit(100, 100, None, "D", None, "", "text/html"),
                [f"http://a.test/{n + 1}"])
    st = DistState(config, rio, "w1", generation=Generation(1))
    assert st.keeps_records and st.old_records is None
    st.record(page(1))
    st.record(page(2))
    acked = st._write_records(st._record_ops)
    st._record_ops = [page(3)]
    st._write_records(st._record_ops)
    st._close_records()
    path = records_path(worker_root(config.state_dir, "w1"), 1)

    def urls() -> list[str]:
        with open(path, "rb") as f:
            return [decode_record(line).url for line in f]
    assert urls() == ["http://a.test/1", "http://a.test/2", "http://a.test/3"]
    DistState(config, rio, "w1", generation=Generation(1), records_position=acked)._close_records()
    assert urls() == ["http://a.test/1", "http://a.test/2"]
    DistState(config, rio, "w1", generation=Generation(1))._close_records()
    assert urls() == []
    hand = DistState(config, rio, "w9")  # a worker started by hand: no generation, no records
    assert not hand.keeps_records and not os.path.exists(worker_root(config.state_dir, "w9"))
