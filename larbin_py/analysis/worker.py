"""An analysis process: tasks in on stdin, results out, one JSON line each.

Started by larbin_py.analysis.pool with ``python -m larbin_py.analysis.worker``.
The first line in is the setup (the analyzers' specs and options); the
process answers ``{"ready": 1}`` once its imports are done, then each task
line (the page's URL, depth, analyzer, and where its body lies in the
spool) gets one answer: ``{"id", "ok": true, ...result}`` or ``{"id",
"ok": false, "error"}``.  The protocol has the process's original stdout to
itself: fd 1 is pointed at stderr, so an analyzer's prints cannot corrupt it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

from .analyzers import AnalyzerSpec, PageView, run


def _read_body(fds: dict, path: str, offset: int, length: int) -> bytes:
    fd = fds.get(path)
    if fd is None:
        if len(fds) > 8:  # spools of finished generations
            for old in list(fds):
                os.close(fds.pop(old))
        fd = fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise OSError(f"the body is cut short in {path} ({len(data)} of {length} bytes)")
    return data


def main() -> int:
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    setup = json.loads(stdin.readline())
    specs = {d["name"]: AnalyzerSpec.from_json(d) for d in setup["analyzers"]}
    opts = setup["opts"]
    if opts.get("analysis_dir"):
        os.makedirs(opts["analysis_dir"], exist_ok=True)
    from .. import parse  # noqa: F401  (lxml imported before "ready": the first task's time is its own)

    proto.write(b'{"ready":1}\n')
    proto.flush()
    fds: dict[str, int] = {}
    for line in stdin:
        msg = json.loads(line)
        try:
            spec = specs[msg["n"]]
            body = _read_body(fds, msg["spool"], msg["o"], msg["l"])
            page = PageView(msg["u"], msg.get("s"), msg.get("c"), msg.get("h"), body, msg.get("d", 0))
            reply = {"id": msg["id"], "ok": True, **run(spec, page, opts)}
        except Exception as exc:
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
            reply = {"id": msg["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "trace": "".join(tb)[-2000:]}
        proto.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        proto.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
