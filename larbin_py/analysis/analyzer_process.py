"""An analysis process: pages in on stdin, one answer line each out.

Started by larbin_py.analysis.pool with ``python -m larbin_py.analysis.analyzer_process``.
The first line in is the setup (JSON: the analyzers' specs and options, the
spool's folder); the process answers ``{"ready":1}`` once its imports are
done.  Then every line is one *page* (:func:`parse_task`): its tasks' ids
and analyzers, where its headers and body lie in the spool, its URL, depth,
status, content type, charset and saved path, tab-separated.  Each page gets
one answer line (:func:`format_answer`): the first task's id, then one
segment per analyzer, ``\\x1e``-separated, each ``+result`` or
``!["error","trace"]``; the ``links`` analyzer's result is its counts and
its links joined by ``\\x1f``, a link the page embeds (a frame, an image)
behind a ``\\x1d`` (canonical URLs percent-encode control characters: no
link holds a separator).  No JSON on the common path.

The page is parsed once (:class:`~larbin_py.analysis.analyzers.PageView`
keeps the extraction and its tree for every analyzer of the page).  Its
``exec`` analyzers share one deadline, 0.9 × the timeout from when the
process takes the page (:func:`~larbin_py.analysis.analyzers.exec_budget`):
a command's process group is killed by this process before the pool would
kill the process itself (larbin_py.analysis.command).

Batching: the process reads its pipe in chunks and writes the answers of
all the pages it found there in one ``write()``, or sooner when 20 ms have
passed (a slow analyzer's answers are not held back).  The protocol has
the process's original stdout to itself: fd 1 is pointed at stderr, so an
analyzer's prints cannot corrupt it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from .analyzers import AnalyzerSpec, PageView, exec_budget, parse_headers, run

#: Answers are written at least this often while a batch runs, seconds.
FLUSH_EVERY = 0.02
FS, RS, EMBED = "\x1f", "\x1e", "\x1d"


def parse_task(line: str) -> dict:
    """A page's line (see :func:`format_task`) as a dict."""
    (ids, names, gen, hoff, hlen, off, length, depth, status, ctype, charset, saved,
     url) = line.split("\t")
    return {"ids": [int(i) for i in ids.split(",")], "names": names.split(","), "g": int(gen),
            "ho": int(hoff), "hl": int(hlen), "o": int(off), "l": int(length), "d": int(depth),
            "s": int(status) if status else None, "c": ctype or None, "h": charset or None,
            "saved": saved or None, "u": url}


def _field(value) -> str:
    if value is None:
        return ""
    text = str(value)
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\t", " ").replace("\n", " ").replace("\r", " ")
    return text


def format_task(ids, names, gen, hoff, hlen, off, length, depth, status, ctype, charset, saved, url) -> bytes:
    """One page's line: what :func:`parse_task` reads."""
    return ("%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n" % (
        ",".join(map(str, ids)), ",".join(names), gen, hoff, hlen, off, length, depth,
        "" if status is None else status, _field(ctype), _field(charset), _field(saved), url)).encode()


def _clean(text: str) -> str:
    return "".join(ch if ch >= " " else " " for ch in text)


def format_answer(first_id: int, results: list) -> bytes:
    """One page's answer: per analyzer a dict (its result) or an exception."""
    segs = []
    for r in results:
        if isinstance(r, BaseException):
            tb = "".join(traceback.format_exception(type(r), r, r.__traceback__))[-2000:]
            segs.append("!" + json.dumps([f"{type(r).__name__}: {r}", tb]))
        elif "links" in r:
            err = r.get("error")
            links = r["links"]
            embeds = r.get("embeds")
            if embeds:
                embeds = set(embeds)
                links = [EMBED + link if link in embeds else link for link in links]
            segs.append("+%d%s%d%s%s%s%s" % (r.get("nofollow", 0), FS, 1 if r.get("meta_nofollow") else 0, FS,
                                             _clean(err) if err else "", FS, FS.join(links)))
        else:
            segs.append("+%d" % r.get("records", 0))
    return ("%d\t%s\n" % (first_id, RS.join(segs))).encode()


def parse_answer(line: bytes, names: list[str]) -> list:
    """An answer line as one entry per analyzer: a dict, or ``(error, trace)`` for a failure."""
    text = line.decode()
    _id, _, rest = text.rstrip("\n").partition("\t")
    segs = rest.split(RS)
    if len(segs) != len(names):
        raise ValueError(f"an answer with {len(segs)} results for {len(names)} analyzers")
    out = []
    for name, seg in zip(names, segs):
        if seg[:1] == "!":
            err, trace = json.loads(seg[1:])
            out.append((str(err), str(trace)))
        elif name == "links":
            parts = seg[1:].split(FS)
            links = parts[3:] if len(parts) > 3 and parts[3] else []
            embeds = []
            if EMBED in seg:
                links = [link[1:] if link[:1] == EMBED else link for link in links]
                embeds = [link[1:] for link in parts[3:] if link[:1] == EMBED]
            out.append({"nofollow": int(parts[0]), "meta_nofollow": parts[1] == "1", "error": parts[2] or None,
                        "links": links, "embeds": embeds})
        else:
            out.append({"records": int(seg[1:])})
    return out


class _Spool:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.fds: dict[int, int] = {}

    def read(self, gen: int, offset: int, length: int) -> bytes:
        fd = self.fds.get(gen)
        if fd is None:
            if len(self.fds) > 8:  # spools of finished generations
                for old in list(self.fds):
                    os.close(self.fds.pop(old))
            path = os.path.join(self.directory, "bodies-%08d.bin" % gen)
            fd = self.fds[gen] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise OSError(f"the body is cut short in spool {gen} ({len(data)} of {length} bytes)")
        return data


def wants_tree(names: list[str], specs: dict) -> bool:
    """Does an analyzer of ``names`` besides ``links`` run on the page (and may read its
    tree)?  The links alone, a crawl's default, parse without keeping one (PageView.keep_tree)."""
    return any(getattr(specs.get(name), "kind", None) != "links" for name in names)


def handle(line: str, specs: dict, opts: dict, spool: _Spool) -> bytes:
    """One page's line: every analyzer run on one PageView; its answer line."""
    try:
        msg = parse_task(line)
    except ValueError as exc:
        raise SystemExit(f"larbin_py analysis: a bad task line: {exc}: {line[:200]!r}")
    results: list = []
    deadline = time.monotonic() + exec_budget(opts)  # the page's exec commands share it
    try:
        body = spool.read(msg["g"], msg["o"], msg["l"])
        headers = parse_headers(spool.read(msg["g"], msg["ho"], msg["hl"])) if msg["hl"] else []
        page = PageView(msg["u"], msg["s"], msg["c"], msg["h"], body, msg["d"], msg["saved"], headers)
    except Exception as exc:  # every analyzer of the page fails alike
        return format_answer(msg["ids"][0], [exc] * len(msg["names"]))
    page.keep_tree = wants_tree(msg["names"], specs)
    for name in msg["names"]:
        try:
            results.append(run(specs[name], page, opts, deadline))
        except Exception as exc:
            results.append(exc)
    return format_answer(msg["ids"][0], results)


def main() -> int:
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    buf = b""
    while b"\n" not in buf:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return 0
        buf += chunk
    first, _, buf = buf.partition(b"\n")
    setup = json.loads(first)
    specs = {d["name"]: AnalyzerSpec.from_json(d) for d in setup["analyzers"]}
    opts = setup["opts"]
    if opts.get("analysis_dir"):
        os.makedirs(opts["analysis_dir"], exist_ok=True)
    spool = _Spool(setup.get("spool_dir") or ".")
    from .. import parse  # noqa: F401  (lxml imported before "ready": the first task's time is its own)

    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(proto_fd, view):]

    write(b'{"ready":1}\n')
    while True:
        if b"\n" not in buf:
            chunk = os.read(0, 1 << 20)
            if not chunk:
                return 0
            buf += chunk
            continue
        cut = buf.rfind(b"\n") + 1
        lines, buf = buf[:cut].decode().split("\n")[:-1], buf[cut:]
        out: list[bytes] = []
        flushed = time.monotonic()
        for line in lines:
            out.append(handle(line, specs, opts, spool))
            now = time.monotonic()
            if now - flushed >= FLUSH_EVERY:
                write(b"".join(out))
                out, flushed = [], now
        if out:
            write(b"".join(out))


if __name__ == "__main__":
    _code = main()
    # Every answer and record went out with os.write; the analyzers' atexit
    # handlers run, what they printed is flushed, and the interpreter's teardown
    # is skipped (tens of ms at every crawl's end, the pool waiting for it).
    from ..fastexit import fast_exit

    fast_exit(_code)
