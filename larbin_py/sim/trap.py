"""The spider trap: an endless calendar, generated on demand.

``/`` links to ``/cal/2026/11/``; every month page links to the previous and
the next month (and back to ``/``), for ever (years 1..9999).  The pages form
a line graph, so each has exactly one simple path from ``/`` and its layer
(hops from ``/``) is ``1 + |months from 2026-11|``: a crawler limited to depth
D fetches the months up to layer D and must stop there.
"""

from __future__ import annotations

from .model import Host, Link, Resource

TRAP_START = (2026, 11)


def _month(pq: str) -> tuple[int, int] | None:
    parts = pq.split("/")
    if len(parts) != 5 or parts[1] != "cal" or parts[4] != "":
        return None
    try:
        y, m = int(parts[2]), int(parts[3])
    except ValueError:
        return None
    if not (1 <= m <= 12 and 1 <= y <= 9999) or parts[3] != f"{m:02d}" or parts[2] != str(y):
        return None
    return y, m


def trap_month_path(y: int, m: int) -> str:
    return f"/cal/{y}/{m:02d}/"


def trap_layer(pq: str) -> int | None:
    """Layer (hops from ``/``) of a trap page, or None if not one."""
    if pq == "/":
        return 0
    ym = _month(pq)
    if ym is None:
        return None
    off = (ym[0] * 12 + ym[1] - 1) - (TRAP_START[0] * 12 + TRAP_START[1] - 1)
    return 1 + abs(off)


def _shift(y: int, m: int, d: int) -> tuple[int, int]:
    k = y * 12 + (m - 1) + d
    return k // 12, k % 12 + 1


def trap_root(host: Host, port: int) -> Resource:
    """The trap host's ``/``: one link into the calendar."""
    url = host.root(port)
    target = url[:-1] + trap_month_path(*TRAP_START)
    lk = Link(target, "a", "cal/2026/11/", url)
    body = (f'<html><head><title>calendar</title></head><body><a href="{lk.raw}">calendar</a>'
            "</body></html>\n").encode()
    return Resource(200, "text/html; charset=utf-8", body, (lk,), layer=0)


def trap_page(host: Host, port: int, pq: str) -> Resource | None:
    """The calendar page at ``pq``: links to the previous and next month."""
    ym = _month(pq)
    if ym is None:
        return None
    y, m = ym
    url = host.root(port)[:-1] + pq
    root = host.root(port)[:-1]
    links = []
    for d, label in ((-1, "prev"), (1, "next")):
        ny, nm = _shift(y, m, d)
        if not 1 <= ny <= 9999:
            continue
        raw = f"../{nm:02d}/" if ny == y else f"../../{ny}/{nm:02d}/"
        links.append(Link(root + trap_month_path(ny, nm), "a", raw, url))
    links.append(Link(root + "/", "a", "/", url))
    body = (f"<html><head><title>{y}-{m:02d}</title></head><body><h1>{y}-{m:02d}</h1>"
            + "".join(f'<a href="{lk.raw}">{i}</a> ' for i, lk in enumerate(links))
            + "</body></html>\n").encode()
    return Resource(200, "text/html; charset=utf-8", body, tuple(links), layer=trap_layer(pq) or 0)
