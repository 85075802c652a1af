"""warc output: WARC 1.1 records read back with warcio, rollover, errors, resume."""

from __future__ import annotations

import errno
import gzip
import os

import pytest
from warcio.archiveiterator import ArchiveIterator

from larbin_py.output import Document, OutputError, open_output, parse_index_line


def make_doc(i: int, *, raw: bool = True, chunked: bool = False) -> Document:
    body = (f"<html><body>page {i} ".encode() + os.urandom(8).hex().encode() * (i % 7 + 1)
            + b"</body></html>")
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nServer: sim\r\n"
    if raw:
        raw_body = gzip.compress(body)
        head += b"Content-Encoding: gzip\r\n"
    else:
        raw_body = None
        head += b"Content-Encoding: gzip\r\n"  # decoded body archived: must be dropped
    if chunked:
        head += b"Transfer-Encoding: chunked\r\n"
    else:
        head += b"Content-Length: %d\r\n" % len(raw_body if raw else body)
    head += b"\r\n"
    return Document(
        url=f"http://host{i % 3}.test/p/{i}?q=1",
        status=200,
        headers=[(b"content-type", b"text/html"), (b"content-encoding", b"gzip")],
        body=body,
        content_type="text/html",
        fetched_at=1_700_000_000.0 + i,
        ip=f"127.0.0.{i % 3 + 1}",
        raw_request=f"GET /p/{i}?q=1 HTTP/1.1\r\nHost: host{i % 3}.test\r\nUser-Agent: larbin\r\n\r\n".encode(),
        raw_response_head=head,
        raw_body=raw_body,
    )


def read_warcs(save_dir) -> dict[str, list]:
    """Read every finished WARC file; check digests; return records per file."""
    result = {}
    for name in sorted(os.listdir(save_dir)):
        if not name.endswith(".warc.gz"):
            continue
        records = []
        with open(os.path.join(save_dir, name), "rb") as f:
            for rec in ArchiveIterator(f, check_digests="raise"):
                raw = rec.raw_stream.read()  # reading to the end verifies the digests
                records.append((rec.rec_type, rec.rec_headers, rec.http_headers, raw))
        result[name] = records
    return result


def check_archive(save_dir, docs: list[Document]) -> None:
    files = read_warcs(save_dir)
    responses, requests = {}, {}
    for name, records in files.items():
        assert records[0][0] == "warcinfo"
        assert records[0][1].get_header("WARC-Filename") == name
        for rec_type, wh, hh, raw in records[1:]:
            assert wh.protocol == "WARC/1.1"
            assert wh.get_header("WARC-Block-Digest", "").startswith("sha1:")
            if rec_type == "response":
                assert wh.get_header("WARC-Payload-Digest", "").startswith("sha1:")
                responses[wh.get_header("WARC-Target-URI")] = (wh, hh, raw)
            else:
                assert rec_type == "request"
                requests[wh.get_header("WARC-Target-URI")] = (wh, hh, raw)
    assert set(responses) == {d.url for d in docs} == set(requests)
    for d in docs:
        wh, hh, raw = responses[d.url]
        enc = hh.get_header("Content-Encoding")
        assert (gzip.decompress(raw) if enc == "gzip" else raw) == d.body
        assert hh.get_header("Transfer-Encoding") is None
        if hh.get_header("Content-Length") is not None:
            assert int(hh.get_header("Content-Length")) == len(raw)
        assert hh.get_statuscode() == "200"
        assert wh.get_header("WARC-IP-Address") == d.ip
        assert wh.get_header("WARC-Date").startswith("2023-11-14T22:")
        rwh, rhh, rraw = requests[d.url]
        assert rwh.get_header("WARC-Concurrent-To") == wh.get_header("WARC-Record-ID")
        assert rhh.get_header("Host") == d.url.split("/")[2]
    # index: one line per page, pointing at the response record's offset
    lines = (open(os.path.join(save_dir, "index.tsv"), encoding="utf-8").read().splitlines())
    entries = [parse_index_line(line) for line in lines]
    assert [e["url"] for e in entries] == [d.url for d in docs]
    for e in entries:
        with open(os.path.join(save_dir, e["path"]), "rb") as f:
            f.seek(e["offset"])
            rec = next(iter(ArchiveIterator(f)))
            assert rec.rec_type == "response"
            assert rec.rec_headers.get_header("WARC-Target-URI") == e["url"]
            assert len(rec.raw_stream.read()) == e["length"]


def test_warc_records_read_back(tmp_path):
    out = open_output("warc", str(tmp_path))
    docs = [make_doc(i, raw=i % 2 == 0, chunked=i % 3 == 0) for i in range(20)]
    names = {out.write(d) for d in docs}
    assert len(names) == 1
    (name,) = names
    assert os.path.exists(tmp_path / (name + ".open")) and not os.path.exists(tmp_path / name)
    out.close()
    assert sorted(os.listdir(tmp_path)) == sorted(["index.tsv", name, name.replace(".warc.gz", ".cdxj")])
    assert name.startswith("larbin-") and name.endswith("-00000.warc.gz")
    check_archive(tmp_path, docs)
    assert out.stats.pages == 20 and out.stats.files == 1


def test_warc_without_raw_parts_synthesizes_request(tmp_path):
    out = open_output("warc", str(tmp_path))
    d = Document(url="http://h.test/a b", status=404,
                 headers=[(b"content-type", b"text/plain"), (b"content-encoding", b"br"),
                          (b"transfer-encoding", b"chunked")],
                 body=b"not found", content_type="text/plain", fetched_at=1_700_000_000.0)
    out.write(d)
    out.close()
    (records,) = read_warcs(tmp_path).values()
    kinds = [r[0] for r in records]
    assert kinds == ["warcinfo", "response", "request"]
    _, wh, hh, raw = records[1]
    assert raw == b"not found"
    assert hh.get_statuscode() == "404"
    assert hh.get_header("Content-Encoding") is None and hh.get_header("Transfer-Encoding") is None
    assert hh.get_header("Content-Length") == "9"
    assert wh.get_header("WARC-IP-Address") is None
    assert records[2][2].get_header("Host") == "h.test"


def test_warc_rollover_creates_several_readable_files(tmp_path):
    out = open_output("warc", str(tmp_path), warc_max_size=4000)
    docs = [make_doc(i) for i in range(30)]
    for d in docs:
        out.write(d)
    out.close()
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith(".warc.gz"))
    assert len(names) >= 3
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".open")]
    assert [n[-13:-8] for n in names] == ["%05d" % i for i in range(len(names))]
    for n in names[:-1]:  # each rolled file passed the limit by at most one page
        assert os.path.getsize(tmp_path / n) >= 4000
    check_archive(tmp_path, docs)
    assert out.stats.files == len(names)


def test_warc_enospc_cuts_back_and_continues(tmp_path, monkeypatch):
    out = open_output("warc", str(tmp_path))
    good = [make_doc(0)]
    out.write(good[0])
    real_write = os.write
    calls = []

    def half_then_full(fd, data):
        if not calls:
            calls.append(1)
            return real_write(fd, bytes(data[: len(data) // 2]))  # a partial write first
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OutputError) as info:
        out.write(make_doc(1))
    monkeypatch.setattr(os, "write", real_write)
    assert info.value.errno == errno.ENOSPC and "ENOSPC" in str(info.value)
    assert ".warc.gz.open" in str(info.value)
    good.append(make_doc(2))
    out.write(good[1])
    out.close()
    check_archive(tmp_path, good)


def test_warc_resume_from_position(tmp_path):
    out = open_output("warc", str(tmp_path), warc_max_size=1 << 20)
    docs = [make_doc(i) for i in range(5)]
    for d in docs:
        out.write(d)
    out.flush(sync=True)
    pos = out.position()
    assert pos["warc_file"] == out.current_file and pos["warc_offset"] > 0
    for i in range(5, 8):  # lost in the crash
        out.write(make_doc(i))
    out.flush()
    out._index._file.close()
    os.close(out._fd)
    out._tree.close()
    out = open_output("warc", str(tmp_path), warc_max_size=1 << 20, position=pos)
    more = [make_doc(i) for i in range(10, 13)]
    for d in more:
        assert out.write(d) == pos["warc_file"]
    out.close()
    check_archive(tmp_path, docs + more)


def test_warc_resume_missing_file_is_clear(tmp_path):
    pos = {"mode": "warc", "index_length": 0, "warc_file": "larbin-20000101000000-00000.warc.gz",
           "warc_offset": 10, "warc_serial": 0}
    with pytest.raises(OutputError, match="cannot resume .*larbin-20000101000000-00000.warc.gz.open"):
        open_output("warc", str(tmp_path), position=pos)


def test_warc_position_after_rollover_starts_next_file(tmp_path):
    out = open_output("warc", str(tmp_path), warc_max_size=1)
    docs = [make_doc(0), make_doc(1)]
    out.write(docs[0])
    pos = out.position()
    assert pos["warc_file"] is None and pos["warc_serial"] == 1
    out.close()
    out = open_output("warc", str(tmp_path), warc_max_size=1, position=pos)
    assert out.write(docs[1]).endswith("-00001.warc.gz")
    out.close()
    assert len(read_warcs(tmp_path)) == 2
    check_archive(tmp_path, docs)


def test_warc_unencodable_url_is_output_error(tmp_path):
    out = open_output("warc", str(tmp_path))
    bad = Document(url="http://h/\ud800", status=200, headers=[], body=b"x")
    with pytest.raises(OutputError, match="cannot archive"):
        out.write(bad)
    good = make_doc(1)
    out.write(good)
    out.close()
    check_archive(tmp_path, [good])


def test_warc_enospc_on_new_file_leaves_no_headless_file(tmp_path, monkeypatch):
    out = open_output("warc", str(tmp_path))

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OutputError, match="ENOSPC"):
        out.write(make_doc(0))
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["index.tsv"]
    good = make_doc(1)
    out.write(good)
    out.close()
    check_archive(tmp_path, [good])
    assert out.stats.files == 1
