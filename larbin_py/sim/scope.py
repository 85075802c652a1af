"""The sim's scope features (``SimConfig.scope``): sitemaps, noindex, nofollow headers, canonicals.

:func:`add_scope` grows a generated host (after its pages and robots.txt
are made, from an RNG of its own, so a web without ``scope`` is byte for
byte the same as before) with:

* **pages reachable only through sitemaps**: ``/sm/only{k}.html``, linked
  from nowhere, listed in the host's sitemaps.  The sitemaps come in one of
  four *flavours* per host (:attr:`Host.sitemap_flavour`):

  - ``index``: robots.txt's ``Sitemap:`` names ``/maps/index.xml``, an
    index that names ``/maps/a.xml`` (a urlset, some ``<lastmod>``),
    ``/maps/b.xml.gz`` (a gzip urlset) and itself (a loop);
  - ``text``: robots.txt names ``/maps/list.txt``, one URL a line;
  - ``default``: no ``Sitemap:`` line: ``/sitemap.xml``, a urlset;
  - ``none``: no sitemap (``/sitemap.xml`` answers 404), no sitemap page.

  Each urlset also lists the host's ``/`` and one page linked already
  (met twice: ``seen``) and another host's root (``offSite``: not queued);
* **noindex pages**, linked from ``/``: ``/ni/meta{k}.html`` (``<meta
  name="robots" content="noindex">``) and ``/ni/header{k}.html``
  (``X-Robots-Tag: noindex``), each the only way to ``/ni/after-...``
  pages (a noindex page's links are followed);
* **a nofollow header page** ``/ni/nofollow.html`` (``X-Robots-Tag:
  nofollow``, saved), the only way to ``/ni/hidden.html`` (never requested);
* **canonical pairs**: ``/cn/dup{k}.html`` names ``/cn/main{k}.html`` as its
  canonical, which nothing links; and a **canonical loop**,
  ``/cn/loopa.html`` and ``/cn/loopb.html`` naming each other.

:class:`~larbin_py.sim.model.Resource` records what the truth needs:
``robots_meta``/``extra_headers`` (noindex, nofollow), ``canonical`` (the
URL), and for a sitemap file ``sitemap_urls`` (pages), ``sitemap_files``
(sitemaps an index names) and ``sitemap_offsite``.
"""

from __future__ import annotations

import gzip
import random
from html import escape

from .model import Host, Link, Resource

__all__ = ["add_scope", "FLAVOURS", "SITEMAP_PAGES"]

FLAVOURS = ("index", "text", "default", "none")
#: Pages only sitemaps list, per host with a sitemap.
SITEMAP_PAGES = 3
#: robots.txt profiles whose body can carry a Sitemap: line.
_TEXT_ROBOTS = ("rules", "patterns", "allow", "delay", "agent", "redirect")


def _page(root: str, pq: str, text: str, links: tuple[str, ...] = ("/",), head: str = "",
          extra_headers: tuple[tuple[str, str], ...] = (), canonical: str | None = None,
          robots_meta: str = "", layer: int = 1) -> Resource:
    url = root[:-1] + pq
    anchors = "".join(f'<p><a href="{escape(p)}">link</a></p>' for p in links)
    body = (f"<!DOCTYPE html>\n<html><head><title>{escape(pq)}</title>{head}</head>"
            f"<body><p>{escape(text)}</p>{anchors}</body></html>\n").encode()
    return Resource(200, "text/html; charset=utf-8", body,
                    tuple(Link(root[:-1] + p, "a", p, url) for p in links), layer=layer,
                    extra_headers=extra_headers, canonical=canonical, robots_meta=robots_meta)


def _urlset(urls: list[tuple[str, str]]) -> bytes:
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">']
    for loc, lastmod in urls:
        out.append(f"<url><loc>{escape(loc)}</loc>" + (f"<lastmod>{lastmod}</lastmod>" if lastmod else "")
                   + "</url>")
    out.append("</urlset>\n")
    return "\n".join(out).encode()


def _sitemap(kind_body: tuple[str, bytes], pages: tuple[str, ...], files: tuple[str, ...] = (),
             offsite: tuple[str, ...] = ()) -> Resource:
    ctype, body = kind_body
    return Resource(200, ctype, body, kind="sitemap", sitemap_urls=pages, sitemap_files=files,
                    sitemap_offsite=offsite)


def add_scope(host: Host, port: int, seed: int, others: list[Host]) -> None:
    """Grow ``host`` with the scope features (see the module docstring)."""
    rng = random.Random(f"{seed}:scope:{host.name}")
    root = host.root(port)
    base = root[:-1]
    res = host.resources
    # -- noindex, nofollow header, canonical pairs and loop, linked from /
    new: dict[str, Resource] = {
        "/ni/meta0.html": _page(root, "/ni/meta0.html", "noindex by meta", ("/ni/after-meta0.html",),
                                head='<meta name="robots" content="noindex">', robots_meta="noindex"),
        "/ni/after-meta0.html": _page(root, "/ni/after-meta0.html", "after a meta noindex page", layer=2),
        "/ni/header0.html": _page(root, "/ni/header0.html", "noindex by header", ("/ni/after-header0.html",),
                                  extra_headers=(("X-Robots-Tag", "noindex"),)),
        "/ni/after-header0.html": _page(root, "/ni/after-header0.html", "after a header noindex page", layer=2),
        "/ni/nofollow.html": _page(root, "/ni/nofollow.html", "nofollow by header", ("/ni/hidden.html",),
                                   extra_headers=(("X-Robots-Tag", "otherbot: noindex, larbin_py: nofollow"),)),
        "/ni/hidden.html": _page(root, "/ni/hidden.html", "only behind a nofollow header", layer=2),
        "/cn/dup0.html": _page(root, "/cn/dup0.html", "a duplicate", canonical=base + "/cn/main0.html",
                               head=f'<link rel="canonical" href="{base}/cn/main0.html">'),
        "/cn/main0.html": _page(root, "/cn/main0.html", "the canonical page", canonical=base + "/cn/main0.html",
                                head='<link rel="canonical" href="/cn/main0.html">'),
        "/cn/loopa.html": _page(root, "/cn/loopa.html", "loop a", canonical=base + "/cn/loopb.html",
                                head='<link rel="canonical" href="/cn/loopb.html">'),
        "/cn/loopb.html": _page(root, "/cn/loopb.html", "loop b", canonical=base + "/cn/loopa.html",
                                head='<link rel="canonical" href="loopa.html">'),
    }
    linked = ("/ni/meta0.html", "/ni/header0.html", "/ni/nofollow.html", "/cn/dup0.html", "/cn/loopa.html",
              "/cn/loopb.html")
    for pq, page in new.items():
        res.setdefault(pq, page)
    home = res["/"]
    extra = "".join(f'<p><a href="{p}">scope</a></p>' for p in linked).encode()
    cut = home.body.rfind(b"</body>")  # inside the body: a parser drops what follows </html>
    home.body = home.body + extra if cut == -1 else home.body[:cut] + extra + home.body[cut:]
    home.links = home.links + tuple(Link(base + p, "a", p, root) for p in linked)
    # -- sitemaps
    kind = host.robots.kind
    flavour = rng.choice(FLAVOURS) if kind in _TEXT_ROBOTS else rng.choice(("default", "none"))
    host.sitemap_flavour = flavour
    if flavour == "none":
        return
    only = tuple(f"/sm/only{k}.html" for k in range(SITEMAP_PAGES))
    for pq in only:
        res[pq] = _page(root, pq, "found only through a sitemap")
    known = sorted(pq for pq, r in res.items() if r.is_html and pq not in only and pq != "/")[:1]
    listed = ("/",) + tuple(known) + only
    other = [h for h in others if h is not host and not h.cname]
    offsite = (other[0].root(port),) if other else ()
    stamp = lambda i: "" if i % 2 else f"2024-0{1 + i % 9}-1{i % 10}T10:00:00+00:00"  # noqa: E731
    if flavour == "default":
        entries = [(base + p, stamp(i)) for i, p in enumerate(listed)] + [(u, "") for u in offsite]
        res["/sitemap.xml"] = _sitemap(("application/xml", _urlset(entries)), listed, offsite=offsite)
        return
    line = {"index": "/maps/index.xml", "text": "/maps/list.txt"}[flavour]
    prof = host.robots
    sitemap_line = f"\nSitemap: {base}{line}\n".encode()
    if prof.kind == "redirect":
        prof.rules_body = prof.rules_body + sitemap_line
    else:
        prof.body = prof.body + sitemap_line
    if flavour == "text":
        text = "\n".join(base + p for p in listed) + "\n\n" + "\n".join(offsite) + "\n"
        res["/maps/list.txt"] = _sitemap(("text/plain", text.encode()), listed, offsite=offsite)
        return
    half = len(listed) // 2
    a, b = listed[:half], listed[half:]
    res["/maps/a.xml"] = _sitemap(("application/xml", _urlset([(base + p, stamp(i)) for i, p in enumerate(a)]
                                                                + [(u, "") for u in offsite])), a, offsite=offsite)
    res["/maps/b.xml.gz"] = _sitemap(("application/gzip", gzip.compress(
        _urlset([(base + p, "") for p in b]), mtime=0)), b)
    files = ("/maps/a.xml", "/maps/b.xml.gz", "/maps/index.xml")
    index = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">']
    index += [f"<sitemap><loc>{base}{f}</loc></sitemap>" for f in files]
    index.append("</sitemapindex>\n")
    res["/maps/index.xml"] = _sitemap(("application/xml", "\n".join(index).encode()), (), files=files)
