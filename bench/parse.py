"""Link extraction speed on the sim's pages: larbin_py.parse against alternatives.

    python bench/parse.py [--quick] [--pages N] [--docs]

Pages come from the sim (10-60 KB, 30-150 links, its usual mix of link
forms, charsets and malformed HTML; ``--docs``: the documentation-like
pages of bench/speed.py).  Approaches, run turn by turn over the
same pages (A, B, C, D, then D, C, B, A...):

* ``larbin_py``: :func:`larbin_py.parse.extract` (lxml HTMLParser tree,
  ``iter`` over the link tags, URL normalization included);
* ``larbin_py, tree kept``: the same with ``keep_root`` (the tree a user
  analyzer is given: its table of ids built too);
* ``lxml.html iterlinks``: ``lxml.html.document_fromstring`` +
  ``iterlinks()`` + the same normalization (lxml's own link walker);
* ``lxml tree only``: the parse alone, no link work (the floor);
* ``html.parser``: the standard library's parser collecting href/src, with
  the same normalization (the pure-Python peer).

Figures: µs per page and pages/s for each, and links found.
"""

from __future__ import annotations

import argparse
import sys
import time
from html.parser import HTMLParser

from common import report, table

from larbin_py.net.decode import media_type
from larbin_py.parse import _str_parser, extract
from larbin_py.sim.web import SimConfig, SimWeb
from larbin_py.url import normalize


def pages(n: int, docs: bool = False) -> list[tuple[bytes, str, str | None]]:
    """``(body, url, charset)`` of ``n`` sim pages, the charset as the fetcher parses it;
    ``docs``: documentation-like ones (as bench/speed.py's)."""
    hosts = max(1, n // 50)
    if docs:
        cfg = SimConfig(seed=5, hosts=hosts, pages_per_host=(50, 50), body_size=(40_000, 100_000),
                        links_per_page=(100, 300), max_layer=6, doc_pages=True, extras=False, trap=False)
    else:
        cfg = SimConfig(seed=5, hosts=hosts, pages_per_host=(50, 50), body_size=(10_000, 60_000),
                        links_per_page=(30, 150), extras=False, trap=False)
    web = SimWeb.generate(cfg, 8080)
    out = []
    for host in web.hosts.values():
        for pq, res in host.resources.items():
            if res.is_html:
                out.append((res.body, web.url(host.name, pq), media_type(res.content_type.encode())[1]))
    return out[:n]


def ours(body, url, charset):
    return len(extract(body, url, charset).links)


def ours_kept(body, url, charset):
    return len(extract(body, url, charset, keep_root=True).links)


def lxml_iterlinks(body, url, charset):
    import lxml.html

    doc = lxml.html.document_fromstring(body)
    found = set()
    for _el, _attr, link, _pos in doc.iterlinks():
        u = normalize(link, url)
        if u is not None:
            found.add(u)
    return len(found)


def lxml_tree_only(body, url, charset):
    from lxml import etree

    etree.fromstring(body, _str_parser(ids=False))
    return 0


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.raw = []

    def handle_starttag(self, tag, attrs):
        if tag in ("a", "area", "frame", "iframe", "link"):
            for k, v in attrs:
                if k in ("href", "src") and v:
                    self.raw.append(v)


def stdlib(body, url, charset):
    p = _Collect()
    p.feed(body.decode("utf-8", "replace"))
    found = {u for u in (normalize(r, url) for r in p.raw) if u is not None}
    return len(found)


APPROACHES = [("larbin_py", ours), ("larbin_py, tree kept", ours_kept), ("lxml.html iterlinks", lxml_iterlinks),
              ("lxml tree only", lxml_tree_only), ("html.parser", stdlib)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 pages, one round")
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--docs", action="store_true", help="documentation-like pages (40-100 KB, 100-300 links "
                    "in nested lists, ids on their sections: bench/speed.py's)")
    args = ap.parse_args()
    if args.quick:
        args.pages, args.rounds = 100, 1
    sample = pages(args.pages, args.docs)
    size = sum(len(b) for b, _u, _c in sample) / len(sample)
    times = {name: [] for name, _f in APPROACHES}
    links = {}
    for r in range(args.rounds):
        # every other round in reverse: the first approach of a round runs on a colder cache
        for name, fn in (APPROACHES if r % 2 == 0 else APPROACHES[::-1]):
            t0 = time.perf_counter()
            total = sum(fn(b, u, c) for b, u, c in sample)
            times[name].append(time.perf_counter() - t0)
            links[name] = total
    rows, figures = [], {}
    for name, _f in APPROACHES:
        best = min(times[name])
        us = best / len(sample) * 1e6
        figures[name] = {"us_per_page": us, "pages_s": len(sample) / best, "links": links[name]}
        rows.append([name, us, len(sample) / best, links[name]])
    print(table(f"link extraction: {len(sample)} sim pages, {size / 1024:.1f} KB average (best of {args.rounds})",
                ["approach", "µs/page", "pages/s", "links"], rows))
    report("parse", {"approaches": figures, "pages": len(sample), "avg_bytes": size, "quick": args.quick,
                     "docs": args.docs})


if __name__ == "__main__":
    sys.exit(main())
