"""URL -> file mapping of the mirror output: reversible, and safe whatever the URL."""

from __future__ import annotations

import os

import pytest

from larbin_py.output import Document, open_output, parse_index_line, relpath_to_url, url_to_relpath
from larbin_py.output.paths import MAX_COMPONENT, MAX_RELPATH, url_to_parts

ORDINARY = [
    "http://example.com/",
    "http://example.com/a/b/c.html",
    "http://example.com/dir/",
    "http://example.com/page.php?a=1&b=2",
    "http://example.com/?q=x",
    "http://example.com/a?",
    "http://example.com:8080/x",
    "https://example.com/secure/",
    "https://example.com:8443/s?x=1",
    "http://example.com/%7Euser/",
    "http://example.com/caf%C3%A9",
    "http://example.com/a%20b",
    "http://example.com/index.html",
    "http://example.com/d/index.html?x",
    "http://example.com/d/?x",
    "http://example.com/CON",
    "http://example.com/nul.txt",
    "http://example.com/a//b/",
    "http://example.com/a.",
    "http://example.com/a:b*c|d",
    "http://example.com/q?path=/etc/../passwd&x=%2F",
    "http://[::1]:8080/v6",
    "http://192.168.0.1/ip",
]


@pytest.mark.parametrize("url", ORDINARY)
def test_relpath_round_trip(url):
    rel = url_to_relpath(url)
    assert relpath_to_url(rel) == url
    for part in rel.split("/"):
        assert part not in ("", ".", "..")
        assert "\\" not in part and "\x00" not in part and "?" not in part


def test_documented_examples():
    assert url_to_relpath("http://h/page.php?a=1&b=2") == "h/page.php%3Fa=1&b=2"
    assert url_to_relpath("http://h/dir/") == "h/dir/index.html"
    assert url_to_relpath("http://h") == "h/index.html"
    assert url_to_relpath("http://h:8080/x") == "h_8080/x"
    assert url_to_relpath("http://h:80/x") == "h/x"
    assert url_to_relpath("https://h/x") == "h_https/x"
    assert url_to_relpath("http://H.Example.COM/X") == "h.example.com/X"
    # '.' and '..' never stay as components; '%' is itself escaped.
    assert url_to_relpath("http://h/a/./b/../c") == "h/a/%2E/b/.%2E/c"
    assert url_to_relpath("http://h/%2e%2e/x") == "h/%252e%252e/x"
    # the two different URLs that would both want dir/index.html stay apart
    assert url_to_relpath("http://h/d/index.html") != url_to_relpath("http://h/d/")
    # a literal %3F in a path is not confused with the query separator
    assert url_to_relpath("http://h/a%3Fb") != url_to_relpath("http://h/a?b")
    assert relpath_to_url(url_to_relpath("http://h/a%3Fb")) == "http://h/a%3Fb"


def test_windows_device_names_escaped():
    for name in ("CON", "con", "PRN", "AUX", "NUL", "COM1", "LPT9", "nul.txt", "Com3.tar.gz"):
        leaf = url_to_relpath(f"http://h/{name}").split("/")[-1]
        assert leaf.partition(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL", "COM1", "LPT9", "COM3"}
        assert relpath_to_url(url_to_relpath(f"http://h/{name}")) == f"http://h/{name}"
    assert url_to_relpath("http://con/x").split("/")[0] == "%63on"


def test_long_components_are_shortened_with_a_hash():
    a = url_to_relpath("http://h/" + "a" * 300)
    b = url_to_relpath("http://h/" + "a" * 301)
    assert a != b
    for rel in (a, b):
        assert all(len(p.encode()) <= MAX_COMPONENT for p in rel.split("/"))
        with pytest.raises(ValueError):
            relpath_to_url(rel)


def test_long_paths_are_bounded():
    url = "http://h/" + "/".join(["abcdefghij" * 15] * 40)
    rel = url_to_relpath(url)
    assert len(rel.encode()) <= MAX_RELPATH
    assert rel.split("/")[0] == "h"
    assert rel != url_to_relpath(url + "x")
    huge = "http://h/" + "a/" * 5000 + "z"
    assert len(url_to_relpath(huge).encode()) <= MAX_RELPATH


def test_non_url_strings_are_contained():
    for junk in ("", "/etc/passwd", "../../x", "C:\\Windows\\x", "\x00"):
        parts = url_to_parts(junk)
        assert parts[0] == "%%unparsed" and len(parts) == 2
        assert "/" not in parts[1] and parts[1] not in ("", ".", "..")


HOSTILE = [
    "http://h/../../etc/passwd",
    "http://h/%2e%2e/%2e%2e/x",
    "http://h/%2E%2E%2F%2E%2E%2Fx",
    "http://h/a%2fb",
    "http://h/a\\..\\b",
    "http://h/..\\..\\..\\outside",
    "http://h/\x00",
    "http://h/%00",
    "http://h/a\x00/../b",
    "http://h/CON",
    "http://h/con/aux/nul",
    "http://h/" + "a" * 10000,
    "http://h/" + "/".join(["b" * 250] * 30),
    "http://h/a/./b/../../..",
    "http://h/.",
    "http://h/..",
    "http://h/...",
    "http://h//",
    "http://h///etc/passwd",
    "http://h/~root",
    "http://h/~/.ssh/authorized_keys",
    "http://h/ünïcødé/文字?q=ü",
    "http://h/\ud800lone",
    "http://h:8080/x",
    "http://h/q?a=/../../x",
    "http://h/q?../../../../etc/passwd",
    "http://h/q?x=%2F..%2F..",
    "http://../x",
    "http://./x",
    "http://%2e%2e/x",
    "http://h%2F..%2F../x",
    "http://user:pw@../y",
    "http://[::1]/x",
    "http://h:99999999/x",
    "http:///no-host",
    "http://h/tab\there/new\nline\r",
    "http://h/a*b?c\"d<e>f|g:h",
    "/etc/passwd",
    "../../escape",
    "file:///etc/passwd",
    "http://h/" + "%2e%2e/" * 2000 + "x",
    "http://h/index.tsv",
    "http://index.tsv/x",
    "http://h/%%tmp",
    "http://h/a%%d/b",
]


def _snapshot(root: str) -> set[str]:
    seen = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            seen.add(os.path.join(dirpath, name))
    return seen


@pytest.mark.parametrize("mode", ["mirror", "save"])
def test_hostile_urls_stay_inside_save_dir(tmp_path, mode):
    assert len(HOSTILE) >= 25
    outer = tmp_path / "outer"
    save_dir = outer / "save"
    (outer / "sibling").mkdir(parents=True)
    (outer / "sibling" / "keep.txt").write_bytes(b"keep")
    before = _snapshot(str(tmp_path))
    out = open_output(mode, str(save_dir), files_per_dir=10)
    written = {}
    for i, url in enumerate(HOSTILE):
        body = f"body {i}".encode()
        rel = out.write(Document(url=url, status=200, headers=[], body=body, content_type="text/html"))
        path = os.path.realpath(os.path.join(save_dir, rel))
        assert path.startswith(str(save_dir) + os.sep), (url, rel)
        written[rel] = body
    out.close()
    after = _snapshot(str(tmp_path))
    new = after - before
    root = str(save_dir)
    assert all(p == root or p.startswith(root + os.sep) for p in new)
    assert (outer / "sibling" / "keep.txt").read_bytes() == b"keep"
    assert sorted(os.listdir(outer)) == ["save", "sibling"]
    # every page is in its own file with its exact body (no URL overwrote another)
    assert len(written) == len(HOSTILE)
    for rel, body in written.items():
        with open(os.path.join(save_dir, rel), "rb") as f:
            assert f.read() == body
    # the index names every URL with the right file
    lines = (save_dir / "index.tsv").read_text("utf-8").splitlines()
    assert len(lines) == len(HOSTILE)
    for line, url in zip(lines, HOSTILE):
        entry = parse_index_line(line)
        if "\ud800" not in url:
            assert entry["url"] == url
        assert written[entry["path"]] == f"body {HOSTILE.index(url)}".encode()
    # no symlink, no temp file, no stray special file
    for p in new:
        assert not os.path.islink(p)
        assert "%%tmp" not in p


def test_symlinks_inside_save_dir_are_not_followed(tmp_path):
    save_dir = tmp_path / "save"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "x").write_bytes(b"original")
    save_dir.mkdir()
    os.symlink(victim, save_dir / "h")                       # host dir is a symlink
    (save_dir / "k").mkdir()
    os.symlink(victim / "x", save_dir / "k" / "x")           # leaf is a symlink
    os.symlink(victim, save_dir / "k" / "sub")               # inner dir is a symlink
    out = open_output("mirror", str(save_dir))
    r1 = out.write(Document(url="http://h/x", status=200, headers=[], body=b"one"))
    r2 = out.write(Document(url="http://k/x", status=200, headers=[], body=b"two"))
    r3 = out.write(Document(url="http://k/sub/x", status=200, headers=[], body=b"three"))
    out.close()
    assert sorted(os.listdir(victim)) == ["x"]
    assert (victim / "x").read_bytes() == b"original"
    assert r1 == "h%%d/x" and (save_dir / r1).read_bytes() == b"one"
    assert r2 == "k/x" and not os.path.islink(save_dir / r2)
    assert (save_dir / r2).read_bytes() == b"two"
    assert r3 == "k/sub%%d/x" and (save_dir / r3).read_bytes() == b"three"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_safe_tree_keeps_few_directories_open_and_reuses_them(tmp_path, monkeypatch):
    from larbin_py.output.paths import SafeTree

    tree = SafeTree(str(tmp_path / "save"), dir_cache_size=3)
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, flags, *a, **k: (opened.append(path), real_open(path, flags, *a, **k))[1])
    before = open_fds()
    for i in range(20):
        assert tree.write(["h.test", "docs", "sub"], f"p{i}.html", b"x") == f"h.test/docs/sub/p{i}.html"
    # the directories are opened for the first page only; then one file per page
    assert set(opened) == {"h.test", "docs", "sub", "%%tmp"} and opened.count("%%tmp") == 20
    assert len(opened) - 20 == 6  # each directory: a miss, then the open after mkdir
    for i in range(10):  # more directories than the cache holds
        tree.write(["h.test", f"d{i}"], "index.html", b"y")
    assert open_fds() - before <= 3  # the files written are closed at once
    tree.close()
    assert open_fds() < before
    for i in range(20):
        assert (tmp_path / "save" / "h.test" / "docs" / "sub" / f"p{i}.html").read_bytes() == b"x"
    assert sorted(os.listdir(tmp_path / "save" / "h.test")) == ["d%d" % i for i in range(10)] + ["docs"]


def test_safe_tree_finds_files_through_its_cached_directories_and_creates_nothing(tmp_path, monkeypatch):
    """A recrawl looks up every unchanged page's file: a folder is opened once, not per page;
    a folder that is not there is not made; a removal is synced; the fds held stay bounded."""
    from larbin_py.output.paths import SafeTree

    save = tmp_path / "save"
    tree = SafeTree(str(save))
    for i in range(5):
        tree.write(["h.test", "docs"], f"p{i}.html", b"x" * i)
        tree.write(["h.test", f"d{i}"], "index.html", b"y")
    tree.close()
    before = open_fds()
    tree = SafeTree(str(save), dir_cache_size=3)  # a recrawl's start: nothing open yet
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, flags, *a, **k: (opened.append(path), real_open(path, flags, *a, **k))[1])
    for i in range(5):
        assert tree.find(["h.test", "docs"], f"p{i}.html") == (f"h.test/docs/p{i}.html", i)
    assert opened == ["h.test", "docs"]  # walked once for the five
    assert tree.find(["h.test", "docs"], "absent.html") is None
    assert tree.find(["h.test", "nothere", "deeper"], "x.html") is None and tree.find(["other"], "x") is None
    assert not (save / "h.test" / "nothere").exists() and not (save / "other").exists()
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    assert tree.remove(["h.test", "docs"], "p1.html") and not tree.remove(["h.test", "docs"], "p1.html")
    tree.sync()
    assert synced and not (save / "h.test" / "docs" / "p1.html").exists()  # the folder's entry made durable
    for i in range(5):  # more folders than the cache holds
        assert tree.find(["h.test", f"d{i}"], "index.html") == (f"h.test/d{i}/index.html", 1)
    assert open_fds() - before <= 4  # the root and three cached folders
    assert tree.write(["h.test", "docs"], "p9.html", b"9") == "h.test/docs/p9.html"  # a cached folder serves writes
    tree.close()
    assert open_fds() <= before


def test_safe_tree_reopens_a_directory_removed_behind_its_back(tmp_path):
    import shutil

    from larbin_py.output.paths import SafeTree

    tree = SafeTree(str(tmp_path / "save"))
    tree.write(["h.test", "a"], "one.html", b"1")
    shutil.rmtree(tmp_path / "save" / "h.test")
    # its cached folder is gone: a lookup finds nothing there (a recrawl asks the page again)
    assert tree.find(["h.test", "a"], "one.html") is None and not tree.remove(["h.test", "a"], "one.html")
    assert tree.write(["h.test", "a"], "two.html", b"2") == "h.test/a/two.html"
    assert (tmp_path / "save" / "h.test" / "a" / "two.html").read_bytes() == b"2"
    assert tree.find(["h.test", "a"], "two.html") == ("h.test/a/two.html", 1)
    tree.close()


def test_safe_tree_cached_directory_never_leads_outside(tmp_path):
    from larbin_py.output.paths import SafeTree

    outside = tmp_path / "outside"
    outside.mkdir()
    tree = SafeTree(str(tmp_path / "save"))
    tree.write(["h.test", "a"], "one.html", b"1")
    # the directory is swapped for a symlink to elsewhere while it is cached
    os.rename(tmp_path / "save" / "h.test" / "a", tmp_path / "save" / "h.test" / "old")
    os.symlink(outside, tmp_path / "save" / "h.test" / "a")
    tree.write(["h.test", "a"], "two.html", b"2")
    tree.close()
    assert os.listdir(outside) == []


def test_safe_tree_does_not_retry_a_write_that_cannot_succeed(tmp_path, monkeypatch):
    import errno

    from larbin_py.output.base import OutputError
    from larbin_py.output.paths import SafeTree

    tree = SafeTree(str(tmp_path / "save"))
    tree.write(["h.test"], "one.html", b"1")
    writes = []

    def full(fd, data):
        writes.append(len(data))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OutputError) as info:
        tree.write(["h.test"], "two.html", b"2")
    assert info.value.errno == errno.ENOSPC and writes == [1]  # one attempt, no retry
    monkeypatch.undo()
    assert not (tmp_path / "save" / "h.test" / "two.html").exists()
    assert tree.write(["h.test"], "two.html", b"2") == "h.test/two.html"  # the cache still works
    tree.close()


def test_safe_tree_sync_fsyncs_only_its_own_files_and_bounds_them(tmp_path, monkeypatch):
    """Issue 18 #3: durability of the pages without os.sync() (every filesystem of the machine)."""
    from larbin_py.output import paths
    from larbin_py.output.paths import SafeTree

    def no_sync():
        raise AssertionError("os.sync() flushes every filesystem of the machine")

    monkeypatch.setattr(os, "sync", no_sync)
    synced = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(("data", os.readlink(f"/proc/self/fd/{fd}"))), real_fdatasync(fd)))
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(("dir", os.readlink(f"/proc/self/fd/{fd}"))), real_fsync(fd)))
    root = tmp_path / "save"
    tree = SafeTree(str(root))
    tree.write(["h.test", "a"], "one.html", b"1")
    tree.write(["h.test", "a"], "two.html", b"2")
    # no page synced one by one (a parent directory closed after a mkdir is synced then)
    assert [kind for kind, _ in synced] in ([], ["dir"])
    tree.sync()
    files = sorted(p for kind, p in synced if kind == "data")
    dirs = sorted(p for kind, p in synced if kind == "dir")
    assert files == [str(root / "h.test" / "a" / "one.html"), str(root / "h.test" / "a" / "two.html")]
    # the renames' directory, and the parents that got a new directory
    assert set(dirs) == {str(root), str(root / "h.test"), str(root / "h.test" / "a")}
    synced.clear()
    tree.sync()
    assert synced == []  # nothing new: nothing to sync
    monkeypatch.setattr(paths, "MAX_UNSYNCED", 4)
    for i in range(9):
        tree.write(["h.test", "a"], f"p{i}.html", b"x")
    assert len(tree._unsynced) <= 4  # the oldest were synced early: open files stay bounded
    assert len([1 for kind, _ in synced if kind == "data"]) >= 5
    tree.close()
    assert sorted(p for kind, p in synced if kind == "data")[-1].endswith("p8.html")
