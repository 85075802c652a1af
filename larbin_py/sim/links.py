"""How the generator writes a link: every form a real page uses.

:class:`LinkWriter` turns a target (host + canonical ``path[?query]``) into an
attribute value: relative, ``./``, ``../``, root-relative, absolute,
protocol-relative; with fragments, an explicit port (``:80`` only when the
port is 80), upper/mixed-case or Unicode (IDN) host names, ``%7E``/``%7e``
for ``~``, lower-case hex escapes, raw UTF-8 and raw spaces (UTF-8 pages
only), whitespace around the value.  Every result resolves back to the target
under :func:`larbin_py.sim.urls.resolve` (the tests check it for all links).
"""

from __future__ import annotations

import random
from html import escape

from .model import Host, Link

def relative(src_dir: str, target_pq: str) -> str:
    """Relative reference from directory ``src_dir`` (ends with /) to a path."""
    path, sep, query = target_pq.partition("?")
    src = src_dir.split("/")[1:-1]
    dst = path.split("/")[1:]
    common = 0
    while common < len(src) and common < len(dst) - 1 and src[common] == dst[common]:
        common += 1
    rel = "../" * (len(src) - common) + "/".join(dst[common:])
    if rel == "" or rel.split("/", 1)[0].find(":") >= 0:
        rel = "./" + rel
    return rel + (sep + query if sep else "")


def _mangle_host(rng: random.Random, host: Host, utf8: bool) -> str:
    r = rng.random()
    if host.display and utf8 and r < 0.5:
        return host.display if rng.random() < 0.5 else host.display.upper()
    if r < 0.2:
        return host.name.upper()
    if r < 0.4:
        return "".join(c.upper() if rng.random() < 0.5 else c for c in host.name)
    return host.name


def _mangle_path(rng: random.Random, pq: str, utf8: bool) -> str:
    """Write a canonical path with equivalent escapes."""
    if "~" in pq and rng.random() < 0.6:
        pq = pq.replace("~", rng.choice(("%7E", "%7e")))
    if "%" in pq and rng.random() < 0.5:
        if utf8 and "%C3%A9" in pq and rng.random() < 0.5:
            pq = pq.replace("%C3%A9", "é")
        elif utf8 and "%20" in pq and rng.random() < 0.5:
            pq = pq.replace("%20", " ")
        else:
            out, i = [], 0
            while i < len(pq):
                if pq[i] == "%":
                    out.append(pq[i:i + 3].lower())
                    i += 3
                else:
                    out.append(pq[i])
                    i += 1
            pq = "".join(out)
    return pq


class LinkWriter:
    """Chooses how each link of one page is written (from the page's RNG)."""

    def __init__(self, port: int, host: Host, page_url: str, base: str,
                 base_dir: str, utf8: bool, rng: random.Random):
        self.port, self.host, self.rng = port, host, rng
        self.page_url, self.base, self.base_dir, self.utf8 = page_url, base, base_dir, utf8

    def netloc(self, host: Host) -> str:
        name = _mangle_host(self.rng, host, self.utf8)
        port = self.port
        if port != 80:
            return f"{name}:{port}"
        return f"{name}:80" if self.rng.random() < 0.25 else name

    def write(self, host: Host, pq: str, kind: str, *, plain: bool = False,
              absolute: bool = False, nofollow: bool = False) -> Link:
        rng = self.rng
        target = host.root(self.port)[:-1] + pq
        same = host is self.host
        if absolute or not same:
            form = "abs" if absolute or rng.random() < 0.6 else "proto"
        else:
            form = rng.choice(("rel", "rel", "dot", "root", "root", "abs", "proto"))
        wpq = pq if plain else _mangle_path(rng, pq, self.utf8)
        if form == "abs":
            raw = ("http://", "HTTP://", "Http://")[rng.randrange(3) if not plain else 0] \
                + self.netloc(host) + wpq
        elif form == "proto":
            raw = "//" + self.netloc(host) + wpq
        elif form == "root":
            raw = wpq
        else:
            raw = relative(self.base_dir, wpq)
            if form == "dot" and not raw.startswith("."):
                raw = "./" + raw
        if not plain:
            if kind in ("a", "area") and rng.random() < 0.15:
                raw += "#" + rng.choice(("top", "sec-2", "", "x%20y"))
            if rng.random() < 0.08:
                raw = rng.choice((" ", "\n ", "\t")) + raw + rng.choice((" ", "\n", ""))
        return Link(target, kind, raw, self.base, nofollow)


def render_attr(value: str) -> str:
    """Attribute value as written in HTML (``&`` -> ``&amp;``, quotes escaped)."""
    return escape(value, quote=True)
