"""The analyzers: what each is, which pages it takes, and how it runs.

A configuration line ``analyzer NAME [urls=REGEX] [types=T1,T2] KIND ARGS...``
declares one (:func:`parse_analyzer`); the kinds:

* ``links`` -- the crawl's own link extractor (always there, named
  ``links``): its links go back to the frontier, nothing is written;
* ``meta`` -- title, description, canonical, language, robots meta, outlink
  count and content hash of each page, a JSON line in ``analysisDir/NAME.jsonl``;
* ``python package.module:function`` -- called with a :class:`PageView`; a
  returned dict (or list of dicts) is written as JSON lines to
  ``analysisDir/NAME.jsonl``;
* ``exec COMMAND ARGS...`` -- run with ``{input}`` (a file holding the
  body), ``{output}`` (``analysisDir/NAME/<sha1 of the URL>.out``) and
  ``{url}`` replaced; exit status 0 is success; the result's path is
  written as a JSON line to ``analysisDir/NAME.jsonl``.  The command runs
  in a process group of its own, its output kept to the last 64 KiB of
  each stream (the rest counted), and the group is killed at the page's
  deadline or when the command ends (larbin_py.analysis.command);
  past the deadline the try fails with :class:`AnalyzerTimeout`.

The specs are plain data (they travel to the analysis processes as JSON);
:func:`run` executes one in an analysis process (larbin_py.analysis.analyzer_process).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass

from ..lazyimport import LazyModule
from .command import Tail, run_command

# tempfile (5 ms of a crawl's start) is imported by the first exec analyzer's input.
tempfile = LazyModule("tempfile", globals(), "tempfile")

__all__ = ["AnalyzerError", "AnalyzerSpec", "AnalyzerTimeout", "KINDS", "PageView", "parse_analyzer", "run",
           "links_spec"]

KINDS = ("links", "meta", "python", "exec")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class AnalyzerError(Exception):
    """An analysis failed in a way worth a line (non-zero exit, a bad return value)."""


class AnalyzerTimeout(AnalyzerError):
    """An ``exec`` analyzer still ran at the page's deadline: its process group was killed."""


@dataclass(frozen=True)
class AnalyzerSpec:
    name: str
    kind: str
    args: tuple[str, ...] = ()
    urls: str | None = None
    types: tuple[str, ...] = ()

    def wants(self, url: str, content_type: str | None) -> bool:
        """Does this analyzer take the page?"""
        if self.urls is not None and re.search(self.urls, url) is None:
            return False
        if self.types:
            ctype = (content_type or "").split(";")[0].strip().lower()
            return ctype in self.types
        return True

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "AnalyzerSpec":
        return cls(d["name"], d["kind"], tuple(d.get("args", ())), d.get("urls"), tuple(d.get("types", ())))


def links_spec() -> AnalyzerSpec:
    return AnalyzerSpec("links", "links")


def parse_analyzer(words: tuple[str, ...] | list[str]) -> AnalyzerSpec:
    """A spec from an ``analyzer`` line's words (after the key); ValueError names the problem."""
    words = list(words)
    if not words:
        raise ValueError("expected NAME KIND ..., got nothing")
    name = words.pop(0)
    if not _NAME_RE.match(name):
        raise ValueError(f"bad analyzer name {name!r} (letters, digits, '_', '-', '.')")
    if name == "links":
        raise ValueError("'links' is the crawl's own link extractor: name yours otherwise")
    urls, types = None, ()
    while words and "=" in words[0] and words[0].split("=", 1)[0] in ("urls", "types"):
        opt, value = words.pop(0).split("=", 1)
        if opt == "urls":
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"urls={value!r} is not a regular expression: {exc}") from None
            urls = value
        else:
            types = tuple(t.strip().lower() for t in value.split(",") if t.strip())
            if not types:
                raise ValueError("types= needs at least one content type")
    if not words:
        raise ValueError(f"analyzer {name}: expected a kind ({', '.join(KINDS[1:])})")
    kind = words.pop(0)
    if kind == "meta":
        if words:
            raise ValueError(f"analyzer {name}: meta takes no arguments, got {' '.join(words)!r}")
    elif kind == "python":
        if len(words) != 1 or not _TARGET_RE.match(words[0]):
            raise ValueError(f"analyzer {name}: python takes one package.module:function")
    elif kind == "exec":
        if not words:
            raise ValueError(f"analyzer {name}: exec needs a command")
    else:
        raise ValueError(f"analyzer {name}: unknown kind {kind!r} (meta, python, exec)")
    return AnalyzerSpec(name, kind, tuple(words), urls, types)


class PageView:
    """What a ``python`` analyzer is called with (one per page, shared by its analyzers).

    ``url``, ``status``, ``headers`` (the answer's, a list of ``(name,
    value)`` str pairs, names in lower case), ``content_type``, ``charset``,
    ``body`` (bytes), ``depth``, ``saved`` (where the output saved the page:
    the mirror file's or the save mode's path, else None -- the file may
    still be in the writer thread's queue when the analyzer runs: read
    ``body``), and ``tree``, the page's lxml tree, built on first use and
    shared with the page's other analyzers (the ``links`` analyzer's parse:
    the page is parsed once).  ``keep_tree`` False (the analysis process
    sets it when ``links`` is the page's only analyzer): the links' parse
    drops its tree and builds no table of ids (larbin_py.parse).
    """

    __slots__ = ("url", "status", "headers", "content_type", "charset", "body", "depth", "saved", "_tree",
                 "_extracted", "opts", "keep_tree")

    def __init__(self, url, status, content_type, charset, body, depth, saved=None, headers=()) -> None:
        self.url, self.status, self.content_type, self.charset = url, status, content_type, charset
        self.body, self.depth, self.saved = body, depth, saved
        self.headers = list(headers)
        self._tree = None
        self._extracted = None
        self.keep_tree = True
        #: The analyzers' options (``max_url_size``, ``get_images``): :func:`run` sets them.
        self.opts: dict = {}

    def header(self, name: str, default=None):
        """The first header named ``name`` (any case), or ``default``."""
        name = name.lower()
        for n, v in self.headers:
            if n == name:
                return v
        return default

    def extracted(self, opts: dict | None = None):
        """The page's links and directives (larbin_py.parse.extract), computed once."""
        if self._extracted is None:
            opts = self.opts if opts is None else opts
            from .. import parse as parse_mod

            self._extracted = parse_mod.extract(self.body, self.url, self.charset,
                                                get_images=opts.get("get_images", False),
                                                max_url_size=opts.get("max_url_size", 512),
                                                keep_root=self.keep_tree)
        return self._extracted

    @property
    def tree(self):
        """The page's lxml tree (lxml.etree's HTML parser, comments dropped), built once."""
        if self._tree is None:
            p = self.extracted()
            if p.root is not None:
                self._tree = p.root
            else:  # nothing extract could parse (an empty body...): an empty document
                import lxml.html

                parser = lxml.html.HTMLParser(encoding=self.charset or None)
                self._tree = lxml.html.fromstring(self.body or b"<html></html>", parser=parser)
        return self._tree


def format_headers(headers) -> bytes:
    """An answer's headers as the spool keeps them: ``name: value`` lines."""
    out = []
    for n, v in headers:
        if isinstance(n, bytes):
            n = n.decode("latin-1")
        if isinstance(v, bytes):
            v = v.decode("latin-1")
        out.append(f"{n.lower()}: {v.replace(chr(10), ' ').replace(chr(13), ' ')}\n")
    return "".join(out).encode("latin-1", "replace")


def parse_headers(data: bytes) -> list[tuple[str, str]]:
    """What :func:`format_headers` wrote."""
    out = []
    for line in data.decode("latin-1").split("\n"):
        if line:
            n, _, v = line.partition(": ")
            out.append((n, v))
    return out


def _append_jsonl(analysis_dir: str, name: str, records: list[dict]) -> int:
    """Write ``records`` as JSON lines to ``analysisDir/NAME.jsonl`` in one ``write()``."""
    if not records:
        return 0
    data = "".join(json.dumps(r, separators=(",", ":"), default=str) + "\n" for r in records).encode()
    fd = os.open(os.path.join(analysis_dir, name + ".jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return len(records)


def _links(page: PageView, opts: dict) -> dict:
    p = page.extracted(opts)
    return {"links": p.links, "embeds": sorted(p.embeds), "nofollow": p.nofollow_links,
            "meta_nofollow": p.meta_nofollow, "error": p.error}


def meta_of(page: PageView, opts: dict) -> dict:
    """The ``meta`` analyzer's record for one page."""
    p = page.extracted(opts)
    description = lang = robots = None
    try:
        tree = page.tree
        lang = tree.get("lang") or None
        for el in tree.iter("meta"):
            n = (el.get("name") or "").lower()
            if n == "description" and description is None:
                description = el.get("content")
            elif n == "robots" and robots is None:
                robots = el.get("content")
    except Exception:  # a page lxml cannot build a tree of: the other fields still stand
        pass
    return {"url": page.url, "status": page.status, "title": p.title, "description": description,
            "canonical": p.canonical, "language": lang, "robots": robots, "outlinks": len(p.links),
            "sha1": hashlib.sha1(page.body).hexdigest()}


_functions: dict[str, object] = {}


def _python(spec: AnalyzerSpec, page: PageView) -> list[dict]:
    target = spec.args[0]
    fn = _functions.get(target)
    if fn is None:
        module, _, attr = target.partition(":")
        fn = getattr(importlib.import_module(module), attr)
        _functions[target] = fn
    result = fn(page)
    if result is None:
        return []
    records = [result] if isinstance(result, dict) else result
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise AnalyzerError(f"{target} returned {type(result).__name__}, not a dict, a list of dicts or None")
    return [r if "url" in r else {"url": page.url, **r} for r in records]


def _exec(spec: AnalyzerSpec, page: PageView, analysis_dir: str, deadline: float) -> list[dict]:
    out_dir = os.path.join(analysis_dir, spec.name)
    os.makedirs(out_dir, exist_ok=True)
    output = os.path.join(out_dir, hashlib.sha1(page.url.encode()).hexdigest() + ".out")
    left = deadline - time.monotonic()
    if left <= 0:
        raise AnalyzerTimeout(f"{spec.args[0]} not started: the page's other analyzers used its time "
                              "(0.9 x analysisTimeout)")
    fd, input_path = tempfile.mkstemp(prefix=".input-", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(page.body)
        argv = [w.replace("{input}", input_path).replace("{output}", output).replace("{url}", page.url)
                for w in spec.args]
        try:
            result = run_command(argv, deadline - time.monotonic())
        except FileNotFoundError:
            raise AnalyzerError(f"command not found: {argv[0]}") from None
        except PermissionError:
            raise AnalyzerError(f"command not executable: {argv[0]}") from None
    finally:
        os.unlink(input_path)
    said = f"stdout: {_ends(result.stdout)}; stderr: {_ends(result.stderr)}"
    if result.timed_out:
        raise AnalyzerTimeout(f"{argv[0]} still running after {round(left, 1):g} s (its process group, or "
                              f"something in it holding its output, did not end): the group was killed; {said}")
    if result.returncode != 0:
        raise AnalyzerError(f"{argv[0]} exited with status {result.returncode}; {said}")
    record = {"url": page.url, "output": output if os.path.exists(output) else None}
    if result.stdout.dropped or result.stderr.dropped:
        record["dropped"] = {"stdout": result.stdout.dropped, "stderr": result.stderr.dropped}
    return [record]


def _ends(tail: Tail, keep: int = 500) -> str:
    """The end of a captured stream for a message, with its size when cut."""
    text = repr(bytes(tail.data[-keep:]).decode(errors="replace"))
    return text if tail.total <= keep else f"{text} (the last {keep} of {tail.total} bytes)"


def run(spec: AnalyzerSpec, page: PageView, opts: dict, deadline: float | None = None) -> dict:
    """Run one analyzer on one page (in an analysis process); raises on failure.

    ``opts``: ``analysis_dir``, ``timeout``, ``max_url_size``, ``get_images``.
    ``deadline`` (``time.monotonic()``): when an ``exec`` command must be done
    (the page's analyzers share it; default 0.9 × ``timeout`` from now, ahead
    of the pool, which kills the process at ``timeout``).
    Returns what goes back to the loop: the links for ``links``, the number
    of records written otherwise.
    """
    page.opts = opts
    if spec.kind == "links":
        return _links(page, opts)
    if spec.kind == "meta":
        records = [meta_of(page, opts)]
    elif spec.kind == "python":
        records = _python(spec, page)
    else:
        if deadline is None:
            deadline = time.monotonic() + exec_budget(opts)
        records = _exec(spec, page, opts["analysis_dir"], deadline)
    return {"records": _append_jsonl(opts["analysis_dir"], spec.name, records)}


def exec_budget(opts: dict) -> float:
    """The seconds a page's ``exec`` analyzers have: 0.9 × analysisTimeout, so that a
    command's group is killed by its analysis process before the pool kills that."""
    return 0.9 * opts.get("timeout", 60.0)
