"""The complete WARC: every exchange of a crawl of the sim archived (robots.txt,
redirects, 4xx, 5xx included), duplicate payloads as revisit records, and the
CDXJ index beside each file pointing at the right records; warcio reads it all.
Also the CDXJ index's own mechanics: the SURT key, a resume after a crash."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

import pytest
from warcio.archiveiterator import ArchiveIterator

from larbin_py.demo import crawl_rules
from larbin_py.output import Document, open_output, parse_index_line
from larbin_py.output.cdxj import cdxj_name, index_warc, surt
from larbin_py.sim import Sim, SimConfig

from helpers.crawl import crawl, make_config


def read_archive(save_dir: str) -> list[dict]:
    """Every record of every WARC file (digests checked), with its file and offset."""
    out = []
    for name in sorted(os.listdir(save_dir)):
        if not name.endswith(".warc.gz"):
            continue
        with open(os.path.join(save_dir, name), "rb") as f:
            records = ArchiveIterator(f, check_digests="raise")
            for rec in records:
                offset = records.get_record_offset()
                body = rec.content_stream().read()
                records.read_to_end(rec)
                out.append({"file": name, "offset": offset, "length": records.get_record_length(),
                            "type": rec.rec_type, "warc": rec.rec_headers, "http": rec.http_headers, "body": body})
    return out


def check_cdxj(save_dir: str, records: list[dict]) -> int:
    """Each WARC file's CDXJ: sorted, one line per response and revisit, each at its record."""
    lines = 0
    for name in {r["file"] for r in records}:
        with open(os.path.join(save_dir, cdxj_name(name)), "rb") as f:
            raw = f.read().splitlines()
        assert raw == sorted(raw)
        mine = {(r["offset"], r["length"]): r for r in records
                if r["file"] == name and r["type"] in ("response", "revisit")}
        assert len(raw) == len(mine)
        for line in raw:
            key, stamp, block = line.decode().split(" ", 2)
            block = json.loads(block)
            rec = mine[(int(block["offset"]), int(block["length"]))]
            assert block["filename"] == name and block["url"] == rec["warc"].get_header("WARC-Target-URI")
            assert key == surt(block["url"]) and len(stamp) == 14
            assert stamp == "".join(ch for ch in rec["warc"].get_header("WARC-Date") if ch.isdigit())[:14]
            assert block["status"] == rec["http"].get_statuscode()
            assert block["mime"] == ("warc/revisit" if rec["type"] == "revisit" else block["mime"])
            with open(os.path.join(save_dir, name), "rb") as f:  # the offset leads to that record
                f.seek(int(block["offset"]))
                again = next(iter(ArchiveIterator(f)))
                assert again.rec_headers.get_header("WARC-Record-ID") == rec["warc"].get_header("WARC-Record-ID")
        lines += len(raw)
    return lines


@pytest.mark.async_timeout(120)
async def test_every_exchange_of_a_crawl_is_in_the_warc_with_revisits_and_a_cdxj_index(tmp_path):
    cfg = SimConfig(seed=7, hosts=10, pages_per_host=(6, 12), hosts_per_ip=4, dns=True, trap=False,
                    robots_agent="larbin_py")
    async with Sim(cfg) as sim:
        config = make_config(tmp_path, sim, output_mode="warc", wait_duration=0.01)
        truth = sim.truth(crawl_rules(config, sim.seeds))
        dup_truth = sim.truth(crawl_rules(config.replace(page_no_duplicate=True), sim.seeds))
        assert dup_truth.duplicate_groups  # the sim's web has pages with one body
        _, summary = await crawl(config)
        assert summary.failed is None
        records = read_archive(config.save_dir)
        answers = defaultdict(list)  # URL -> its response and revisit records, in order
        by_id = {r["warc"].get_header("WARC-Record-ID"): r for r in records}
        requests = Counter()
        for r in records:
            if r["type"] in ("response", "revisit"):
                answers[r["warc"].get_header("WARC-Target-URI")].append(r)
            elif r["type"] == "request":
                requests[r["warc"].get_header("WARC-Target-URI")] += 1
                assert by_id[r["warc"].get_header("WARC-Concurrent-To")]["type"] in ("response", "revisit")
        # every request the sim answered: its record, with the status served (robots.txt,
        # redirects, 404s and 5xx included); none other
        served = Counter(q.url for q in sim.log.requests if q.status)
        assert Counter({u: len(rs) for u, rs in answers.items()}) == served == requests
        statuses = defaultdict(list)
        for q in sim.log.requests:
            if q.status:
                statuses[q.url].append(str(q.status))
        for url, recs in answers.items():
            assert [r["http"].get_statuscode() for r in recs] == statuses[url], url
        kinds = Counter(r["http"].get_statuscode()[0] for rs in answers.values() for r in rs)
        assert kinds["3"] and kinds["4"] and any(u.endswith("/robots.txt") for u in answers), kinds
        # duplicate payloads: one response per body, the others revisits referring to it
        for group in dup_truth.duplicate_groups:
            recs = [answers[u][-1] for u in group]
            full = [r for r in recs if r["type"] == "response"]
            assert len(full) == 1, group
            for r in recs:
                if r["type"] == "revisit":
                    assert r["warc"].get_header("WARC-Profile").endswith("/identical-payload-digest")
                    assert r["warc"].get_header("WARC-Refers-To") == full[0]["warc"].get_header("WARC-Record-ID")
                    assert r["warc"].get_header("WARC-Payload-Digest") == \
                        full[0]["warc"].get_header("WARC-Payload-Digest")
                    assert r["warc"].get_header("WARC-Refers-To-Target-URI") == \
                        full[0]["warc"].get_header("WARC-Target-URI")
        # the index lists each saved page once; its offset leads to a payload, a duplicate's to the first's
        with open(os.path.join(config.save_dir, "index.tsv"), encoding="utf-8") as f:
            index = [parse_index_line(line.rstrip("\n")) for line in f]
        assert sorted(e["url"] for e in index) == sorted(truth.saved)
        for e in index:
            with open(os.path.join(config.save_dir, e["path"]), "rb") as f:
                f.seek(e["offset"])
                rec = next(iter(ArchiveIterator(f)))
                assert rec.rec_type == "response" and rec.content_stream().read() == truth.saved[e["url"]]
        assert check_cdxj(config.save_dir, records) == sum(len(rs) for rs in answers.values())


def test_surt_keys_are_pywb_s():
    assert surt("http://www.Example.com/a/b?z=1&a=2#frag") == "com,example)/a/b?a=2&z=1"
    assert surt("https://example.com:443/") == "com,example)/"
    assert surt("http://example.com:8080") == "com,example:8080)/"
    assert surt("http://[::1]:8080/x") == "[::1]:8080)/x"
    assert surt("http://www.com/") == "com,www)/"  # a host that is only www.TLD keeps its www


def docs(n: int, start: int = 0) -> list[Document]:
    return [Document(url=f"http://h.test/{i}", status=200, headers=[(b"content-type", b"text/html")],
                     body=f"<p>page {i}</p>".encode(), content_type="text/html", fetched_at=1_700_000_000.0 + i)
            for i in range(start, start + n)]


def test_the_cdxj_index_is_cut_back_on_resume_and_made_again_when_it_lost_its_end(tmp_path):
    save = str(tmp_path)
    out = open_output("warc", save)
    for d in docs(5):
        out.write(d)
    out.flush(sync=True)
    position = out.position()
    for d in docs(3, 5):  # after the checkpoint: cut on resume
        out.write(d)
    out.flush()
    name = out.current_file
    os.close(out._fd)  # a crash: nothing finished
    out._cdxj.close()
    resumed = open_output("warc", save, position=position)
    assert resumed._cdxj.length == position["cdxj_length"]
    resumed._cdxj.close()
    os.close(resumed._fd)
    # a machine crash cut the open index: made again from the WARC file
    os.truncate(os.path.join(save, cdxj_name(name) + ".open"), 10)
    again = open_output("warc", save, position=position)
    assert again._cdxj.length == position["cdxj_length"]
    for d in docs(2, 20):
        again.write(d)
    again.close()
    with open(os.path.join(save, name), "rb") as f:
        expected = sorted(index_warc(f, name, 1 << 40))
    with open(os.path.join(save, cdxj_name(name)), "rb") as f:
        assert f.read() == b"".join(expected)
    assert sorted(json.loads(line.split(b" ", 2)[2])["url"] for line in expected) == \
        sorted(f"http://h.test/{i}" for i in (0, 1, 2, 3, 4, 20, 21))  # those after the checkpoint cut
    assert not os.path.exists(os.path.join(save, cdxj_name(name) + ".open"))


def test_an_exchange_only_archived_is_no_page_and_a_payload_met_twice_is_a_revisit(tmp_path):
    out = open_output("warc", str(tmp_path))
    same = b"<p>same</p>"
    out.write(Document(url="http://h.test/a", status=200, headers=[], body=same, content_type="text/html"))
    out.write(Document(url="http://h.test/b", status=200, headers=[], body=same, content_type="text/html"))
    out.write(Document(url="http://h.test/r", status=301, headers=[(b"location", b"/a")], body=b"",
                       archive_only=True))
    out.write(Document(url="http://h.test/c", status=200, headers=[], body=same, content_type="text/html",
                       revisit="server-not-modified", refers_to_date=1_600_000_000.0))
    out.close()
    assert out.stats.pages == 3 and out.stats.archived == 1 and out.stats.revisits == 2
    records = read_archive(str(tmp_path))
    heads = [(r["type"], r["warc"].get_header("WARC-Target-URI")) for r in records if r["type"] != "request"]
    assert heads == [("warcinfo", None), ("response", "http://h.test/a"), ("revisit", "http://h.test/b"),
                     ("response", "http://h.test/r"), ("revisit", "http://h.test/c")]
    c = records[-2]["warc"]
    assert c.get_header("WARC-Profile").endswith("/server-not-modified")
    assert c.get_header("WARC-Refers-To-Date") == "2020-09-13T12:26:40Z"
    with open(tmp_path / "index.tsv", encoding="utf-8") as f:
        index = [parse_index_line(line.rstrip("\n")) for line in f]
    assert [e["url"] for e in index] == ["http://h.test/a", "http://h.test/b"]
    assert index[0]["offset"] == index[1]["offset"]  # the duplicate's line leads to the first payload
