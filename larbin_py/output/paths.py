"""Safe, reversible mapping of URLs to files under saveDir, and the safe writer.

Mapping (``mirror`` mode): ``http://host:port/dir/leaf?query`` is stored as
``HOSTDIR/dir/leaf%3Fquery`` where

* ``HOSTDIR`` is the lower-case host, then ``_PORT`` when the port is not the
  scheme's default, then ``_SCHEME`` unless the scheme is ``http``
  (``example.com``, ``example.com_8080``, ``example.com_https``).  Host
  characters other than ``a-z 0-9 . -`` are %-escaped, so ``_`` only ever
  separates these fields.
* each path segment is one component; a path ending in ``/`` (or empty) has
  the leaf ``index.html``; the query, if any, is kept in the leaf after an
  escaped ``?`` (``page.php?a=1&b=2`` -> ``page.php%3Fa=1&b=2``).

Escaping of a component (reversible): every character outside printable
ASCII ``!``..``~`` (space, controls, NUL, DEL, non-ASCII) and each of
``% / \\ < > : " | ? *`` becomes ``%XX`` per UTF-8 byte — so ``%`` in a URL is
stored as ``%25`` and ``/``, ``\\``, NUL can never split or end a name.  Then a
trailing ``.`` becomes ``%2E`` (so ``.`` -> ``%2E``, ``..`` -> ``.%2E``), a
Windows device name (``CON``, ``nul.txt``, ``COM1``...) and a literal leaf
``index.html`` get their first character escaped, and an empty segment
(``a//b``) is stored as ``%%``.  Escaping never produces ``%%``, so names
containing ``%%`` are reserved for this module's markers:

* ``NAME%%d`` — the directory ``NAME`` when a *file* already holds ``NAME``
  (``/a`` saved, then ``/a/b`` arrives -> ``a`` and ``a%%d/b``);
* ``NAME%%f`` — the file ``NAME`` when a *directory* already holds it
  (``/a/b`` saved, then ``/a`` -> ``a/b`` and ``a%%f``).  Nothing is moved,
  so earlier index lines stay true, and both orders keep both pages;
* ``PREFIX%%hHASH`` — a component longer than :data:`MAX_COMPONENT` bytes,
  cut and suffixed with a hash of the whole; ``HOSTDIR/%%long/...`` — a path
  longer than :data:`MAX_RELPATH`; ``%%unparsed/...`` — a string that is not
  an absolute URL.  These are not reversible (the index holds the URL);
* ``%%tmp`` — the temporary file of a write in progress.

:func:`url_to_relpath` and :func:`relpath_to_url` invert each other for
ordinary URLs (fragments are dropped; the markers ``%%d``/``%%f`` are
ignored when reading back).

Writing (:class:`SafeTree`): directories are walked one component at a time
with ``openat``-style calls (``dir_fd``) and ``O_NOFOLLOW``, every component is
checked to be a plain name, so nothing is written outside the root and no
symlink inside it is ever followed; the page goes to ``%%tmp`` in its
directory and is renamed over the final name (``os.replace``).  The last
64 directories written to stay open (a crawl writes many pages into few
directories), so a page usually costs its file's open, write, close and
rename and nothing more.

Durability (:meth:`SafeTree.sync`): a write is complete for the kernel when
``write()`` returns (the file is whole under its name: a killed process
loses nothing of it); it is on the disk after the next ``sync()``, which
the crawl runs at its checkpoints.  The paths of the files written since
the last sync are remembered (at most :data:`MAX_UNSYNCED`; past that the
oldest half is synced early) and so are the directories that got a new
name (by their open fd, or by their path once closed); ``sync()`` opens
those files again, starts the writeback of all of them at once
(``posix_fadvise(DONTNEED)``), then fdatasyncs each and fsyncs those
directories -- the crawl's own files only, never ``os.sync()`` (which
flushes every filesystem of the machine).  Measured on ext4 (35 KB pages):
an fdatasync right after each write costs 125 µs of CPU a page, one after
the other at a checkpoint 53 µs, with the writeback of the batch started
first 13 µs (the opening again included).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from collections import OrderedDict
from urllib.parse import unquote

from .base import OutputError

__all__ = [
    "url_to_parts",
    "url_to_relpath",
    "relpath_to_url",
    "escape_component",
    "SafeTree",
    "MAX_COMPONENT",
    "MAX_RELPATH",
]

#: Longest component written, in bytes (filesystems allow 255; markers need room).
MAX_COMPONENT = 200
#: Budget for a path relative to saveDir, in bytes (PATH_MAX is 4096 on Linux).
MAX_RELPATH = 1024

INDEX_LEAF = "index.html"
EMPTY = "%%"
DIR_ALT = "%%d"
FILE_ALT = "%%f"
HASH_MARK = "%%h"
LONG_DIR = "%%long"
BAD_DIR = "%%unparsed"
TMP_NAME = "%%tmp"
#: Files written and not yet synced that :class:`SafeTree` remembers; past
#: this many the oldest half is synced at once (bounds the memory held).
MAX_UNSYNCED = 1 << 16

_URL_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://([^/?#]*)([^?#]*)(?:\?([^#]*))?", re.S)
_UNSAFE = re.compile(r'[^!-~]|[%/\\<>:"|?*]')
_HOST_UNSAFE = re.compile(r"[^a-z0-9.\-]")
_DEFAULT_PORT = {"http": 80, "https": 443}
_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL"]
    + [f"COM{i}" for i in range(10)]
    + [f"LPT{i}" for i in range(10)]
)


def _pct(match: re.Match) -> str:
    return "".join(["%%%02X" % b for b in match.group().encode("utf-8", "surrogatepass")])


def _shorten(name: str) -> str:
    """Cut an over-long escaped name, adding a hash of the whole (not reversible)."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    head = name[: MAX_COMPONENT - 40]
    # never cut inside a %XX escape, never leave a trailing dot
    cut = head.rfind("%", len(head) - 2)
    if cut != -1:
        head = head[:cut]
    return head.rstrip(".") + HASH_MARK + digest


def _finish(name: str) -> str:
    """Apply the whole-name rules to an already char-escaped component."""
    if not name:
        return EMPTY
    if name[-1] == ".":
        name = name[:-1] + "%2E"
    stem = name.partition(".")[0]
    if 3 <= len(stem) <= 4 and stem.upper() in _DEVICES:
        name = "%%%02X" % ord(name[0]) + name[1:]
    if len(name) > MAX_COMPONENT:
        name = _shorten(name)
    return name


def escape_component(segment: str) -> str:
    """Escape one URL path segment into a safe, reversible file name."""
    if _UNSAFE.search(segment) is not None:
        segment = _UNSAFE.sub(_pct, segment)
    return _finish(segment)


def _host_dir(scheme: str, authority: str) -> str:
    hostport = authority.rpartition("@")[2]
    host, port = hostport, ""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end != -1 and hostport[end + 1: end + 2] == ":":
            host, port = hostport[: end + 1], hostport[end + 2:]
    elif ":" in hostport:
        host, _, port = hostport.rpartition(":")
    if port and not (port.isascii() and port.isdigit() and len(port) <= 5):
        host, port = hostport, ""
    host = host.lower()
    if _HOST_UNSAFE.search(host) is not None:
        host = _HOST_UNSAFE.sub(_pct, host)
    name = _finish(host)
    if port and int(port) != _DEFAULT_PORT.get(scheme):
        name += f"_{int(port)}"
    if scheme != "http":
        name += "_" + scheme
    if len(name) > MAX_COMPONENT:
        name = _shorten(name)
    return name


def url_to_parts(url: str) -> list[str]:
    """The components of :func:`url_to_relpath` (host directory first, leaf last).

    Every component is a plain file name: non-empty, no ``/`` or NUL, not
    ``.`` or ``..``, at most :data:`MAX_COMPONENT` bytes.
    """
    m = _URL_RE.match(url)
    if m is None:
        return [BAD_DIR, escape_component(url)]
    scheme, authority, path, query = m.groups()
    scheme = scheme.lower()
    parts = [_host_dir(scheme, authority)]
    segments = path.split("/")
    if segments[0] == "":
        del segments[0]  # the path's leading slash; an empty path is "/"
    leaf = segments.pop() if segments else ""
    esc = escape_component
    parts.extend([esc(s) for s in segments])
    if leaf == "":
        name = INDEX_LEAF
    else:
        name = _UNSAFE.sub(_pct, leaf) if _UNSAFE.search(leaf) is not None else leaf
        if name == INDEX_LEAF:
            name = "%69" + name[1:]
    if query is not None:
        name += "%3F" + (_UNSAFE.sub(_pct, query) if _UNSAFE.search(query) is not None else query)
    parts.append(_finish(name))
    if sum(map(len, parts)) + 4 * len(parts) > MAX_RELPATH:
        digest = hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return [parts[0], LONG_DIR, digest[:2], _shorten(parts[-1][:100] + "." + digest)]
    return parts


def url_to_relpath(url: str) -> str:
    """Where ``mirror`` stores ``url``, relative to saveDir (``/``-separated).

    The preferred name: when a file/directory conflict is met while writing,
    the path actually written carries a ``%%d``/``%%f`` marker (see module doc).
    """
    return "/".join(url_to_parts(url))


def _unescape(name: str) -> str:
    return unquote(name, errors="surrogatepass") if "%" in name else name


def relpath_to_url(relpath: str) -> str:
    """The URL stored at ``relpath`` (inverse of :func:`url_to_relpath`).

    Raises ``ValueError`` for shortened or unparsable entries (whose URL only
    the index knows).
    """
    parts = relpath.split("/")
    if len(parts) < 2 or HASH_MARK in relpath or parts[0] == BAD_DIR or parts[1] == LONG_DIR:
        raise ValueError(f"not a reversible mirror path: {relpath[:200]!r}")
    dirs = [p[: -len(DIR_ALT)] if p.endswith(DIR_ALT) else p for p in parts[:-1]]
    fields = dirs[0].split("_")
    host = "" if fields[0] == EMPTY else _unescape(fields[0])
    scheme, port = "http", ""
    for extra in fields[1:]:
        if extra.isdigit():
            port = ":" + extra
        else:
            scheme = extra
    segments = ["" if d == EMPTY else _unescape(d) for d in dirs[1:]]
    leaf = parts[-1]
    if leaf.endswith(FILE_ALT):
        leaf = leaf[: -len(FILE_ALT)]
    name, sep, query = leaf.partition("%3F")
    if name == INDEX_LEAF:
        name = ""
    elif name != EMPTY:
        name = _unescape(name)
    else:
        name = ""
    segments.append(name)
    url = f"{scheme}://{host}{port}/" + "/".join(segments)
    return url + "?" + _unescape(query) if sep else url


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
_SYNC_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _check_name(name: str) -> None:
    if not name or name == "." or name == ".." or "/" in name or "\x00" in name:
        raise OutputError(f"refusing unsafe path component {name[:100]!r}")


class SafeTree:
    """Atomic writes of files below one root directory, never outside it.

    ``write(dirs, leaf, data)`` creates the directories as needed (taking the
    ``%%d`` / ``%%f`` alternatives on file/directory conflicts), writes
    ``data`` to ``%%tmp`` in the target directory and renames it to ``leaf``.
    Returns the path written, relative to the root.
    """

    __slots__ = ("root", "_root_fd", "_dirs", "dir_cache_size", "_unsynced", "_dirty", "_dir_paths",
                 "_dirty_paths")

    def __init__(self, root: str, *, dir_cache_size: int = 64):
        self.root = os.path.abspath(root)
        #: Directories kept open for :meth:`write`, most recently used last:
        #: a crawl writes many pages into few directories, and walking the
        #: path again costs an open and a close per component and page.
        self._dirs: OrderedDict[tuple[str, ...], tuple[int, list[str]]] = OrderedDict()
        self.dir_cache_size = dir_cache_size
        #: Files written since the last :meth:`sync` (paths relative to the root).
        self._unsynced: list[str] = []
        #: Directory fds that got a new entry since the last :meth:`sync`.
        self._dirty: set[int] = set()
        #: The path (relative to the root) of each directory fd open here.
        self._dir_paths: dict[int, str] = {}
        #: Directories that got a new entry since the last sync and were closed since.
        self._dirty_paths: set[str] = set()
        try:
            os.makedirs(self.root, exist_ok=True)
            self._root_fd = os.open(self.root, _DIR_FLAGS)
        except OSError as exc:
            raise OutputError.from_os("open directory", self.root, exc) from exc
        self._dir_paths[self._root_fd] = ""

    @property
    def root_fd(self) -> int:
        return self._root_fd

    def _enter(self, fd: int, name: str) -> tuple[int, str]:
        """Open (creating if needed) the directory ``name`` in ``fd``; no symlinks."""
        for candidate in (name, name + DIR_ALT):
            try:
                return os.open(candidate, _DIR_FLAGS, dir_fd=fd), candidate
            except FileNotFoundError:
                try:
                    os.mkdir(candidate, 0o755, dir_fd=fd)
                    self._dirty.add(fd)
                except FileExistsError:
                    pass
                return os.open(candidate, _DIR_FLAGS, dir_fd=fd), candidate
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
        raise OSError(errno.ENOTDIR, f"{name!r} and {name + DIR_ALT!r} are both taken by non-directories")

    def open_dir(self, dirs: list[str]) -> tuple[int, list[str]]:
        """Open the directory ``dirs`` (created as needed); return (fd, actual names).

        The caller closes the fd unless it is :attr:`root_fd` (``dirs`` empty).
        """
        return self._descend(self._root_fd, [], dirs, dirs)

    def _descend(self, fd: int, actual: list[str], names, dirs) -> tuple[int, list[str]]:
        """Open ``names`` one below the other from ``fd`` (which stays open)."""
        start = fd
        actual = list(actual)
        try:
            for name in names:
                _check_name(name)
                child, real = self._enter(fd, name)
                if fd != start:
                    self._close_dir(fd)
                fd = child
                actual.append(real)
                self._dir_paths[fd] = "/".join(actual)
        except OSError as exc:
            if fd != start:
                self._close_dir(fd, quiet=True)
            raise OutputError.from_os("create directory", "/".join(dirs), exc) from exc
        except BaseException:
            if fd != start:
                self._close_dir(fd, quiet=True)
            raise
        return fd, actual

    def _cached_dir(self, dirs: list[str]) -> tuple[int, list[str]]:
        """The open directory ``dirs`` (not empty), cached; a miss starts from the nearest cached parent."""
        key = tuple(dirs)
        cache = self._dirs
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        fd, actual, depth = self._nearest_cached(key)
        hit = cache[key] = self._descend(fd, actual, key[depth:], dirs)
        if len(cache) > self.dir_cache_size:
            _old, (old_fd, _names) = cache.popitem(last=False)
            self._close_dir(old_fd)
        return hit

    def _nearest_cached(self, key: tuple[str, ...]) -> tuple[int, list[str], int]:
        """The open directory nearest above ``key`` (the root's when none is cached): its fd,
        actual names and depth."""
        cache = self._dirs
        for k in range(len(key) - 1, 0, -1):
            parent = cache.get(key[:k])
            if parent is not None:
                return parent[0], parent[1], k
        return self._root_fd, [], 0

    def _drop_dirs(self) -> None:
        while self._dirs:
            _key, (fd, _names) = self._dirs.popitem()
            self._close_dir(fd, quiet=True)

    def _close_dir(self, fd: int, *, quiet: bool = False) -> None:
        """Close a directory fd; one that got a new entry is synced by path at the next sync."""
        path = self._dir_paths.pop(fd, None)
        if fd in self._dirty:
            self._dirty.discard(fd)
            if path is not None:
                self._dirty_paths.add(path)
        os.close(fd)

    def close_dir(self, fd: int) -> None:
        """Close ``fd`` from :meth:`open_dir` (its new entries are synced at the next sync)."""
        self._close_dir(fd)

    def sync(self) -> None:
        """Make every file written and every name created so far durable.

        fdatasync of each file written since the last sync, then fsync of
        each directory that got an entry (the renames): this crawl's files
        only.  Raises :class:`OutputError` on failure.
        """
        self._sync_files(len(self._unsynced))
        dirty, self._dirty = self._dirty, set()
        paths, self._dirty_paths = self._dirty_paths, set()
        for fd in dirty:
            try:
                os.fsync(fd)
            except OSError as exc:
                raise OutputError.from_os("sync", self.root, exc) from exc
        for path in paths:
            try:
                fd = os.open(path or ".", _DIR_FLAGS, dir_fd=self._root_fd)
            except FileNotFoundError:  # removed behind our back: nothing of ours to sync
                continue
            except OSError as exc:
                raise OutputError.from_os("sync", os.path.join(self.root, path), exc) from exc
            try:
                os.fsync(fd)
            except OSError as exc:
                raise OutputError.from_os("sync", os.path.join(self.root, path), exc) from exc
            finally:
                os.close(fd)

    def _sync_files(self, count: int) -> None:
        paths = self._unsynced[:count]
        del self._unsynced[:count]
        fds, root, error, where = [], self._root_fd, None, self.root
        try:
            for path in dict.fromkeys(paths):  # a file written twice is synced once
                try:
                    fd = os.open(path, _SYNC_FLAGS, dir_fd=root)
                except OSError as exc:
                    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                        continue  # replaced behind our back: nothing of ours is there
                    error, where = exc, os.path.join(self.root, path)
                    break
                fds.append(fd)
                try:
                    # Start the writeback of the whole batch, then wait for each file.
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass  # only a hint: the fdatasync below does the work anyway
            for fd in fds:
                if error is not None:
                    break
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    error = exc
        finally:
            for fd in fds:
                os.close(fd)
        if error is not None:
            raise OutputError.from_os("sync", where, error) from error

    def write_in(self, fd: int, leaf: str, data: bytes, display: str) -> str:
        """Atomically write ``data`` as ``leaf`` in the open directory ``fd``.

        Returns the leaf name used (``leaf`` or ``leaf%%f``); ``display`` names
        the file in error messages.
        """
        _check_name(leaf)
        try:
            tmp = os.open(TMP_NAME, _FILE_FLAGS, 0o644, dir_fd=fd)
        except OSError as exc:
            raise OutputError.from_os("create", display, exc) from exc
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(tmp, view):]
                try:
                    os.replace(TMP_NAME, leaf, src_dir_fd=fd, dst_dir_fd=fd)
                except IsADirectoryError:
                    leaf += FILE_ALT
                    os.replace(TMP_NAME, leaf, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                os.close(tmp)
                raise
        except OSError as exc:
            self._discard(fd)
            raise OutputError.from_os("write", display, exc) from exc
        except BaseException:
            self._discard(fd)
            raise
        os.close(tmp)
        # Synced at the next sync() (a checkpoint), by path: the page is whole for the kernel now.
        parent = self._dir_paths.get(fd)
        if parent is None:  # a directory fd not opened here: sync at once
            self._sync_now(fd, leaf, display)
        else:
            self._unsynced.append(f"{parent}/{leaf}" if parent else leaf)
            self._dirty.add(fd)
            if len(self._unsynced) > MAX_UNSYNCED:
                self._sync_files(MAX_UNSYNCED // 2)
        return leaf

    @staticmethod
    def _sync_now(dir_fd: int, leaf: str, display: str) -> None:
        try:
            fd = os.open(leaf, _SYNC_FLAGS, dir_fd=dir_fd)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
            os.fsync(dir_fd)
        except OSError as exc:
            raise OutputError.from_os("sync", display, exc) from exc

    @staticmethod
    def _discard(fd: int) -> None:
        try:
            os.unlink(TMP_NAME, dir_fd=fd)
        except OSError:
            pass

    def write(self, dirs: list[str], leaf: str, data: bytes) -> str:
        """Write ``data`` at ``dirs/leaf``; return the relative path actually used.

        The directory comes from the cache of open directories; if it is
        gone (removed behind our back: ENOENT), the cache is emptied, the
        path opened afresh and the write tried once more.  Any other error
        (a full disk, a refused name) is raised at once.
        """
        display = "/".join(dirs + [leaf])
        if not dirs:
            return self.write_in(self._root_fd, leaf, data, display)
        fd, actual = self._cached_dir(dirs)
        try:
            name = self.write_in(fd, leaf, data, display)
        except OutputError as exc:
            if exc.errno != errno.ENOENT:
                raise
            self._drop_dirs()
            fd, actual = self._cached_dir(dirs)
            name = self.write_in(fd, leaf, data, display)
        return "/".join(actual) + "/" + name

    def _locate(self, dirs: list[str], leaf: str) -> tuple[int, list[str], str, int] | None:
        """Where the file :meth:`write` put at ``dirs/leaf`` is, without creating anything:
        ``(parent fd, actual dirs, actual leaf, size)``, or None when it is not there (no
        symlink is followed).  The parent fd is the root's or a cached one (never closed by
        the caller): a recrawl looks up every unchanged page's file, and walking its path
        again would cost an open and a close per folder and page."""
        if dirs:
            key = tuple(dirs)
            cache = self._dirs
            hit = cache.get(key)
            if hit is None:
                hit = self._walk(key, dirs, leaf)
                if hit is None:
                    return None
            else:
                cache.move_to_end(key)
            fd, actual = hit
        else:
            fd, actual = self._root_fd, []
        _check_name(leaf)
        for candidate in (leaf, leaf + FILE_ALT):
            try:
                st = os.stat(candidate, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise OutputError.from_os("read", "/".join(dirs + [leaf]), exc) from exc
            if stat.S_ISREG(st.st_mode):
                return fd, actual, candidate, st.st_size
        return None

    def _walk(self, key: tuple[str, ...], dirs: list[str], leaf: str) -> tuple[int, list[str]] | None:
        """Open the existing directory ``dirs`` (from its nearest cached parent, creating
        nothing) and cache it; None when it is not there."""
        cache = self._dirs
        fd, actual, depth = self._nearest_cached(key)
        start, actual = fd, list(actual)
        try:
            for name in key[depth:]:
                _check_name(name)
                for candidate in (name, name + DIR_ALT):
                    try:
                        child = os.open(candidate, _DIR_FLAGS, dir_fd=fd)
                    except (FileNotFoundError, NotADirectoryError):
                        continue
                    except OSError as exc:
                        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                            continue
                        raise
                    break
                else:
                    if fd != start:
                        os.close(fd)
                    return None
                if fd != start:
                    os.close(fd)
                fd = child
                actual.append(candidate)
        except OSError as exc:
            if fd != start:
                os.close(fd)
            raise OutputError.from_os("read", "/".join(dirs + [leaf]), exc) from exc
        self._dir_paths[fd] = "/".join(actual)
        hit = cache[key] = (fd, actual)
        if len(cache) > self.dir_cache_size:
            _old, (old_fd, _names) = cache.popitem(last=False)
            self._close_dir(old_fd)
        return hit

    def find(self, dirs: list[str], leaf: str) -> tuple[str, int] | None:
        """``(relative path, size)`` of the file :meth:`write` put at ``dirs/leaf``, or None."""
        found = self._locate(dirs, leaf)
        if found is None:
            return None
        _fd, actual, name, size = found
        return "/".join(actual + [name]), size

    def remove(self, dirs: list[str], leaf: str) -> bool:
        """Remove the file :meth:`write` put at ``dirs/leaf`` (its folders stay); False when absent."""
        found = self._locate(dirs, leaf)
        if found is None:
            return False
        fd, actual, name, _size = found
        try:
            os.unlink(name, dir_fd=fd)
        except OSError as exc:
            raise OutputError.from_os("remove", "/".join(actual + [name]), exc) from exc
        self._dirty.add(fd)  # synced by fd, or by path once closed (_close_dir)
        return True

    def close(self) -> None:
        """Sync what was written (see :meth:`sync`) and close every fd."""
        try:
            if self._root_fd >= 0:
                self.sync()
        finally:
            self._unsynced.clear()
            self._dirty.clear()
            self._drop_dirs()
            self._dirty.clear()
            self._dirty_paths.clear()
            if self._root_fd >= 0:
                self._dir_paths.pop(self._root_fd, None)
                os.close(self._root_fd)
                self._root_fd = -1
