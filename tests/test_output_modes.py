"""mirror, save, stats and none outputs: files, index, atomicity, errors, resume."""

from __future__ import annotations

import errno
import os
import types

import pytest

from larbin_py.output import (
    Document, NoOutput, Output, OutputError, StatsOutput, make_output, open_output,
    parse_index_line, relpath_to_url,
)
from larbin_py.output.base import MAX_CONTENT_TYPES, escape_field, unescape_field


def doc(url: str, body: bytes, status: int = 200, ctype: str | None = "text/html") -> Document:
    return Document(url=url, status=status, headers=[(b"content-type", (ctype or "").encode())],
                    body=body, content_type=ctype, fetched_at=1.7e9, ip="127.0.0.1")


def check_index(save_dir) -> list[dict]:
    """Every index line's file exists with that length; every file is indexed."""
    save_dir = str(save_dir)
    with open(os.path.join(save_dir, "index.tsv"), encoding="utf-8") as f:
        entries = [parse_index_line(line.rstrip("\n")) for line in f]
    latest = {e["path"]: e for e in entries}
    for path, e in latest.items():
        full = os.path.join(save_dir, path)
        assert os.path.isfile(full), path
        assert os.path.getsize(full) == e["length"], path
    files = set()
    for dirpath, _, names in os.walk(save_dir):
        for name in names:
            files.add(os.path.relpath(os.path.join(dirpath, name), save_dir))
    files.discard("index.tsv")
    assert files == set(latest)
    return entries


def page(i: int, size: int = 100) -> bytes:
    return (f"<p>{i}</p>".encode() * (size // 8 + 1))[:size]


# -- mirror ------------------------------------------------------------------

def test_mirror_writes_exact_bodies_and_index(tmp_path):
    out = open_output("mirror", str(tmp_path))
    urls = [f"http://site{i % 3}.test/dir{i % 5}/p{i}.html?x={i}" for i in range(50)]
    urls += ["http://site0.test/", "http://site0.test:8080/", "https://site0.test/"]
    bodies = {}
    for i, url in enumerate(urls):
        body = page(i, 50 + i * 37)
        rel = out.write(doc(url, body, ctype="text/html; charset=utf-8"))
        bodies[rel] = (url, body)
    out.close()
    entries = check_index(tmp_path)
    assert [e["url"] for e in entries] == urls
    for e in entries:
        assert (tmp_path / e["path"]).read_bytes() == bodies[e["path"]][1]
        assert relpath_to_url(e["path"]) == e["url"]
        assert e["status"] == 200 and e["content_type"] == "text/html; charset=utf-8"
    assert out.stats.pages == len(urls) == out.stats.files
    assert out.stats.bytes == sum(len(b) for _, b in bodies.values())
    assert out.stats.by_content_type == {"text/html": len(urls)}
    assert (tmp_path / "site0.test_8080" / "index.html").is_file()
    assert (tmp_path / "site0.test_https" / "index.html").is_file()


def test_a_recrawls_unchanged_page_is_indexed_from_the_file_it_found(tmp_path, monkeypatch):
    """A recrawl looks a page's mirror file up once (MirrorOutput.locate, before it trusts
    a 304); the revisit Document carries what it found and the mirror indexes that file
    without a second lookup, its file untouched; without it the mirror looks it up."""
    out = open_output("mirror", str(tmp_path))
    body = page(1, 300)
    rel = out.write(doc("http://a.test/x/p.html", body))
    assert out.locate("http://a.test/x/p.html") == (rel, 300)
    assert out.locate("http://a.test/x/missing.html") is None
    mtime = os.stat(tmp_path / rel).st_mtime_ns
    found = out.locate("http://a.test/x/p.html")
    monkeypatch.setattr(type(out._tree), "find", lambda *a: pytest.fail("looked up again"))
    revisit = doc("http://a.test/x/p.html", b"", status=304)
    revisit.revisit, revisit.stored_file = "server-not-modified", found
    assert out.write(revisit) == rel
    monkeypatch.undo()
    again = doc("http://a.test/x/p.html", b"", status=304)
    again.revisit = "server-not-modified"
    assert out.write(again) == rel
    out.close()
    entries = check_index(tmp_path)
    assert [(e["path"], e["status"], e["length"]) for e in entries] == [(rel, 200, 300)] * 3
    assert os.stat(tmp_path / rel).st_mtime_ns == mtime and (tmp_path / rel).read_bytes() == body


def test_mirror_rewrite_replaces_file(tmp_path):
    out = open_output("mirror", str(tmp_path))
    assert out.write(doc("http://h/a", b"old")) == "h/a"
    assert out.write(doc("http://h/a", b"newer")) == "h/a"
    out.close()
    assert (tmp_path / "h" / "a").read_bytes() == b"newer"
    assert len(check_index(tmp_path)) == 2


def test_file_then_directory_conflict(tmp_path):
    out = open_output("mirror", str(tmp_path))
    r1 = out.write(doc("http://h/a", b"file a"))
    r2 = out.write(doc("http://h/a/b", b"file a/b"))
    r3 = out.write(doc("http://h/a/c/", b"file a/c/"))
    r4 = out.write(doc("http://h/a", b"file a again"))
    out.close()
    assert (r1, r2, r3, r4) == ("h/a", "h/a%%d/b", "h/a%%d/c/index.html", "h/a")
    assert [relpath_to_url(r) for r in (r1, r2, r3)] == ["http://h/a", "http://h/a/b", "http://h/a/c/"]
    assert (tmp_path / r4).read_bytes() == b"file a again"
    assert (tmp_path / r2).read_bytes() == b"file a/b"
    assert (tmp_path / r3).read_bytes() == b"file a/c/"
    check_index(tmp_path)


def test_directory_then_file_conflict(tmp_path):
    out = open_output("mirror", str(tmp_path))
    r1 = out.write(doc("http://h/a/b", b"file a/b"))
    r2 = out.write(doc("http://h/a", b"file a"))
    r3 = out.write(doc("http://h/a/c", b"file a/c"))
    r4 = out.write(doc("http://h/a", b"file a v2"))
    out.close()
    assert (r1, r2, r3, r4) == ("h/a/b", "h/a%%f", "h/a/c", "h/a%%f")
    assert relpath_to_url(r2) == "http://h/a"
    assert (tmp_path / r1).read_bytes() == b"file a/b"
    assert (tmp_path / r2).read_bytes() == b"file a v2"
    entries = check_index(tmp_path)
    assert [e["url"] for e in entries] == ["http://h/a/b", "http://h/a", "http://h/a/c", "http://h/a"]


def test_crash_before_rename_leaves_no_partial_file(tmp_path, monkeypatch):
    out = open_output("mirror", str(tmp_path))
    out.write(doc("http://h/keep", b"kept"))

    def crash(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OutputError) as info:
        out.write(doc("http://h/lost", b"x" * 100_000))
    assert "h/lost" in str(info.value) and info.value.errno == errno.EIO
    assert not (tmp_path / "h" / "lost").exists()
    assert sorted(os.listdir(tmp_path / "h")) == ["keep"]  # temp file removed too
    monkeypatch.undo()
    assert out.write(doc("http://h/after", b"after")) == "h/after"
    out.close()
    entries = check_index(tmp_path)
    assert [e["url"] for e in entries] == ["http://h/keep", "http://h/after"]
    assert out.stats.pages == 2


@pytest.mark.parametrize("mode", ["mirror", "save"])
def test_enospc_is_a_clear_output_error(tmp_path, monkeypatch, mode):
    out = open_output(mode, str(tmp_path))
    real_write = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OutputError) as info:
        out.write(doc("http://h/x", b"payload"))
    monkeypatch.setattr(os, "write", real_write)
    err = info.value
    assert err.errno == errno.ENOSPC
    assert "no space left on device" in str(err) and "ENOSPC" in str(err)
    assert str(err).startswith("cannot write ")
    out.write(doc("http://h/y", b"fine"))
    out.close()
    entries = check_index(tmp_path)
    assert [e["url"] for e in entries] == ["http://h/y"]


def test_permission_error_is_output_error(tmp_path, monkeypatch):
    out = open_output("mirror", str(tmp_path))

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "mkdir", denied)  # works even when the tests run as root
    with pytest.raises(OutputError) as info:
        out.write(doc("http://h/x", b"x"))
    monkeypatch.undo()
    assert info.value.errno == errno.EACCES
    assert "permission denied" in str(info.value) and "saveDir" in str(info.value)
    out.close()
    assert check_index(tmp_path) == []


def test_write_after_close_raises(tmp_path):
    out = open_output("mirror", str(tmp_path))
    out.close()
    out.close()  # idempotent
    with pytest.raises(OutputError):
        out.write(doc("http://h/x", b"x"))


# -- save --------------------------------------------------------------------

def test_save_numbers_files_per_dir(tmp_path):
    out = open_output("save", str(tmp_path), files_per_dir=3)
    rels = [out.write(doc(f"http://h/{i}", page(i, 10 + i))) for i in range(8)]
    out.close()
    assert rels == ["d00000/f00000", "d00000/f00001", "d00000/f00002",
                    "d00001/f00000", "d00001/f00001", "d00001/f00002",
                    "d00002/f00000", "d00002/f00001"]
    for i, rel in enumerate(rels):
        assert (tmp_path / rel).read_bytes() == page(i, 10 + i)
    entries = check_index(tmp_path)
    assert [e["url"] for e in entries] == [f"http://h/{i}" for i in range(8)]
    assert out.position()["next_file"] == 8


def test_save_resume_from_position(tmp_path):
    out = open_output("save", str(tmp_path), files_per_dir=4)
    for i in range(5):
        out.write(doc(f"http://h/{i}", page(i)))
    out.flush(sync=True)
    pos = out.position()
    assert pos == {"mode": "save", "index_length": pos["index_length"], "next_file": 5}
    for i in range(5, 8):  # written after the checkpoint, then the process dies
        out.write(doc(f"http://h/{i}", b"lost"))
    out.flush()
    _crash(out)
    assert len((tmp_path / "index.tsv").read_text().splitlines()) == 8
    out = open_output("save", str(tmp_path), files_per_dir=4, position=pos)
    for i in range(5, 9):
        assert out.write(doc(f"http://h/{i}", page(i))) == "d%05d/f%05d" % divmod(i, 4)
    out.close()
    entries = check_index(tmp_path)
    assert [e["url"] for e in entries] == [f"http://h/{i}" for i in range(9)]
    for e in entries:
        assert (tmp_path / e["path"]).read_bytes() == page(int(e["url"].rsplit("/", 1)[1]))


def test_mirror_resume_truncates_index(tmp_path):
    out = open_output("mirror", str(tmp_path))
    out.write(doc("http://h/a", b"a"))
    out.flush(sync=True)
    pos = out.position()
    out.write(doc("http://h/b", b"b"))
    out.flush()
    _crash(out)
    out = open_output("mirror", str(tmp_path), position=pos)
    out.write(doc("http://h/c", b"c"))
    out.close()
    lines = (tmp_path / "index.tsv").read_text().splitlines()
    assert [parse_index_line(l)["url"] for l in lines] == ["http://h/a", "http://h/c"]


def test_resume_refuses_inconsistent_position(tmp_path):
    out = open_output("save", str(tmp_path))
    out.write(doc("http://h/a", b"a"))
    out.close()
    with pytest.raises(OutputError, match="truncated or replaced"):
        open_output("save", str(tmp_path), position={"mode": "save", "index_length": 10**6, "next_file": 1})
    with pytest.raises(OutputError, match="no valid"):
        open_output("save", str(tmp_path), position={"mode": "save"})
    with pytest.raises(OutputError, match="cannot resume"):
        open_output("mirror", str(tmp_path), position={"mode": "save", "index_length": 0})


def _crash(out) -> None:
    """Drop an output like a killed process would: no close, no further flush."""
    out._index._file.close()  # buffer already flushed by the caller
    tree = out._tree
    tree._dirty.clear()  # a killed process syncs nothing
    tree._dirty_paths.clear()
    tree._unsynced.clear()
    if getattr(out, "_dir_fd", -1) >= 0:
        os.close(out._dir_fd)
    tree.close()


# -- stats / none / factory ------------------------------------------------------

def test_stats_counts_without_writing(tmp_path):
    out = open_output("stats", str(tmp_path / "never"))
    out.write(doc("http://h/1", b"abc", 200, "text/html; charset=utf-8"))
    out.write(doc("http://h/2", b"defgh", 200, "TEXT/HTML"))
    out.write(doc("http://h/3", b"", 404, None))
    out.write(doc("http://h/4", b"12", 200, "image/png"))
    out.close()
    assert not (tmp_path / "never").exists()
    s = out.stats.as_dict()
    assert s["pages"] == 4 and s["bytes"] == 10
    assert s["by_status"] == {"200": 3, "404": 1}
    assert s["by_content_type"] == {"": 1, "image/png": 1, "text/html": 2}


def test_stats_content_types_are_bounded():
    out = StatsOutput()
    for i in range(MAX_CONTENT_TYPES + 50):
        out.write(doc("http://h/x", b"x", 200, f"x/type{i}"))
    assert len(out.stats.by_content_type) == MAX_CONTENT_TYPES + 1
    assert out.stats.by_content_type["other"] == 50


def test_none_does_nothing(tmp_path):
    out = open_output("none", str(tmp_path / "never"))
    assert isinstance(out, NoOutput)
    assert out.write(doc("http://h/x", b"x")) is None
    out.flush(sync=True)
    out.close()
    assert out.stats.pages == 0 and not (tmp_path / "never").exists()


def test_make_output_from_config(tmp_path):
    cfg = types.SimpleNamespace(output_mode="save", save_dir=str(tmp_path), files_per_dir=2)
    out = make_output(cfg)
    assert out.mode == "save" and out.files_per_dir == 2
    out.close()
    cfg = types.SimpleNamespace(output_mode="warc", save_dir=str(tmp_path / "w"), files_per_dir=2,
                                warc_max_size=1234)
    out = make_output(cfg)
    assert out.mode == "warc" and out.max_size == 1234
    out.close()
    with pytest.raises(OutputError, match="unknown output mode"):
        make_output(types.SimpleNamespace(output_mode="bogus", save_dir=str(tmp_path), files_per_dir=1))


def test_index_field_escaping_round_trips(tmp_path):
    nasty = "a\tb\nc\rd\\e\\tf"
    assert "\t" not in escape_field(nasty) and "\n" not in escape_field(nasty)
    assert unescape_field(escape_field(nasty)) == nasty
    for ch in "\\\t\n\r":  # each one alone is seen, and only those change a field
        alone = "a" + ch + "tb"
        assert unescape_field(escape_field(alone)) == alone and escape_field(alone) != alone
    assert escape_field("http://h/p?q=1&r") == "http://h/p?q=1&r"
    out = open_output("mirror", str(tmp_path))
    out.write(doc("http://h/t\tab", b"x", ctype="text/html;\n x=1"))
    out.close()
    (line,) = (tmp_path / "index.tsv").read_text().splitlines()
    e = parse_index_line(line)
    assert e["url"] == "http://h/t\tab" and e["content_type"] == "text/html;\n x=1"


@pytest.mark.parametrize("mode", ["mirror", "save", "warc", "stats", "none"])
def test_every_mode_follows_the_output_protocol(tmp_path, mode):
    out = open_output(mode, str(tmp_path / "s"))
    assert isinstance(out, Output) and out.mode == mode
    d = doc("http://h/x", b"abc")
    d.duplicate_of = "http://h/y"
    rel = out.write(d)
    if mode in ("stats", "none"):
        assert rel is None
    else:  # the WARC file keeps its ".open" suffix until it is complete
        assert os.path.isfile(tmp_path / "s" / (rel + (".open" if mode == "warc" else "")))
    out.flush()
    if mode in ("mirror", "save", "warc"):
        # flush() alone makes the index line visible to readers
        assert (tmp_path / "s" / "index.tsv").read_text().count("\n") == 1
    out.flush(sync=True)
    pos = out.position()
    assert pos["mode"] == mode
    out.close()
    assert out.position() == pos or mode == "warc"
    expected = (0, 0) if mode == "none" else (1, 1)
    assert (out.stats.pages, out.stats.duplicates) == expected


def test_mirror_writes_many_pages_with_a_consistent_index(tmp_path):
    """Speed is measured in bench/, not asserted here: this checks 300 writes."""
    out = open_output("mirror", str(tmp_path))
    body = page(0, 20_480)
    docs = [doc(f"http://h{i % 10}.test/d{i % 7}/p{i}.html?i={i}", body) for i in range(300)]
    for d in docs:
        out.write(d)
    out.close()
    assert len(check_index(tmp_path)) == 300


@pytest.mark.parametrize("mode", ["mirror", "save"])
def test_sync_fsyncs_the_pages_not_every_filesystem(tmp_path, monkeypatch, mode):
    """Issue 18 #3: a checkpoint's sync is the crawl's own files, never os.sync()."""
    def no_sync():
        raise AssertionError("os.sync() flushes every filesystem of the machine")

    monkeypatch.setattr(os, "sync", no_sync)
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    out = open_output(mode, str(tmp_path))
    paths = [out.write(doc(f"http://h/{i}", b"page %d" % i)) for i in range(3)]
    out.flush(sync=True)
    assert sorted(synced) == sorted(str(tmp_path / p) for p in paths)
    synced.clear()
    paths = [out.write(doc("http://h/late", b"late"))]
    out.close()
    assert synced == [str(tmp_path / paths[0])]
