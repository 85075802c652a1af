"""The sim's JavaScript host: pages whose links appear only once scripts run (issue 23).

Opt-in (``SimConfig(dynamic=True)``): the host ``js.sim.test`` joins the web
and its root joins the seeds; without the option the web is unchanged, so the
ground truth of every other test stays the same.

``/`` links, in plain HTML, to the pages below; each of them has *no* link in
its HTML and writes its links into the DOM with ``/app.js``'s ``addLinks``:

=================  =====================================  ==================
page               when its links appear                  trigger it needs
=================  =====================================  ==================
``/onload.html``   on the window's ``load`` event         none
``/scroll.html``   on the first ``scroll`` event          ``scroll``
``/call.html``     when ``loadMore()`` is called          ``call:loadMore``
``/xhr.html``      after ``fetch('/api/links.json')``     none
``/endless.html``  on load; then polls ``/api/tick.json``  none (never settles)
``/refresh.html``  on load; its meta refresh leaves at 0 s  none
``/busy.html``     before a script that spins for ever     never (unreadable)
=================  =====================================  ==================

Sub-requests a renderer must police: ``/onload.html`` shows an image
(``/img/logo.png``: refused, images are blocked) and loads a script from
another host (``other.sim.test``: refused without ``dynamicOtherHosts``);
``/xhr.html`` also fetches ``/private/secret.json``, which robots.txt
disallows -- its link (``/dyn/secret-1.html``) must never be found.
``/endless.html`` fetches ``/api/tick.json?n=N`` one after the other for
ever (404s), so the page never goes idle: it ends at ``dynamicTimeout`` with
the link it wrote on load.

``/refresh.html`` would leave for ``/dyn/refresh-target.html`` at once (a
meta refresh, a plain link of the page): a renderer must keep the page
itself, whose JavaScript link is the one to find.

The links found are leaf pages ``/dyn/*.html``.  The truth of a page's
JavaScript links: :attr:`Resource.js_links`, followed by
:func:`larbin_py.sim.truth.compute_truth` when ``CrawlRules.dynamic_pages``
renders the page with the trigger it needs (:attr:`Resource.js_needs`);
:attr:`Resource.js_fetches` lists the same-host sub-requests its scripts make.
"""

from __future__ import annotations

import json

from .model import Host, Link, Resource, RobotsProfile, base_url

__all__ = ["JS_HOST", "js_host", "JS_PAGES", "DYN_LINKS"]

JS_HOST = "js.sim.test"
ROBOTS = b"User-agent: *\nDisallow: /private/\n"

APP_JS = b"""function addLinks(paths) {
  var out = document.getElementById('out') || document.body;
  paths.forEach(function (p) {
    var a = document.createElement('a');
    a.href = p; a.textContent = p;
    out.appendChild(a);
  });
}
"""

#: The links each JavaScript page writes (paths on js.sim.test).
DYN_LINKS: dict[str, tuple[str, ...]] = {
    "/onload.html": ("/dyn/onload-1.html", "/dyn/onload-2.html"),
    "/scroll.html": ("/dyn/scroll-1.html", "/dyn/scroll-2.html"),
    "/call.html": ("/dyn/call-1.html", "/dyn/call-2.html"),
    "/xhr.html": ("/dyn/xhr-1.html", "/dyn/xhr-2.html"),
    "/endless.html": ("/dyn/endless-1.html",),
    "/refresh.html": ("/dyn/refresh-1.html",),
}
#: page -> (trigger it needs, same-host sub-requests its scripts make)
JS_PAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "/onload.html": ("none", ("/app.js",)),
    "/scroll.html": ("scroll", ("/app.js",)),
    "/call.html": ("call:loadMore", ("/app.js",)),
    "/xhr.html": ("none", ("/app.js", "/api/links.json", "/private/secret.json")),
    "/endless.html": ("none", ("/app.js",)),
    "/refresh.html": ("none", ("/app.js",)),
    "/busy.html": ("never", ()),
}
#: /busy.html writes this link, then spins for ever: its renderer can never be read.
BUSY_LINKS = ("/dyn/busy-1.html",)
#: /refresh.html's meta refresh: a plain link of the page (the rendered page must stay itself).
REFRESH_TARGET = "/dyn/refresh-target.html"
SECRET_LINKS = ("/dyn/secret-1.html",)


def _page(title: str, body: str, head: str = "", app: bool = True) -> bytes:
    script = "<script src=\"/app.js\"></script>" if app else ""
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>{head}"
            f"{script}</head>\n<body><h1>{title}</h1><div id=\"out\"></div>\n"
            f"{body}\n</body></html>\n").encode()


def _scripts(port: int) -> dict[str, bytes]:
    links = {p: json.dumps(list(v)) for p, v in DYN_LINKS.items()}
    other = base_url("other.sim.test", port) + "/other.js"
    return {
        "/onload.html": _page("onload", (
            f"<img src=\"/img/logo.png\" alt=\"\"><script src=\"{other}\"></script>\n"
            f"<script>window.addEventListener('load', function () {{ addLinks({links['/onload.html']}); }});"
            "</script>")),
        "/scroll.html": _page("scroll", (
            "<div style=\"height:5000px\">a long list</div>\n"
            "<script>var shown = false; window.addEventListener('scroll', function () {"
            f" if (shown) return; shown = true; addLinks({links['/scroll.html']}); }});</script>")),
        "/call.html": _page("call", (
            f"<script>function loadMore() {{ addLinks({links['/call.html']}); }}</script>\n"
            "<button onclick=\"loadMore()\">more</button>")),
        "/xhr.html": _page("xhr", (
            "<script>fetch('/api/links.json').then(function (r) { return r.json(); }).then(addLinks);\n"
            "fetch('/private/secret.json').then(function (r) { return r.json(); }).then(addLinks)"
            ".catch(function () {});</script>")),
        "/refresh.html": _page("refresh", (
            f"<script>addLinks({links['/refresh.html']});</script>"), head=(
            f"<meta http-equiv=\"refresh\" content=\"0; url={REFRESH_TARGET}\">")),
        "/busy.html": _page("busy", (  # no external script: it spins as soon as it is parsed
            f"<script>document.getElementById('out').innerHTML = '<a href=\"{BUSY_LINKS[0]}\">1</a>';"
            " while (true) { }</script>"), app=False),
        "/endless.html": _page("endless", (
            f"<script>addLinks({links['/endless.html']}); var n = 0;\n"
            "function tick() { fetch('/api/tick.json?n=' + (n++)).then(function () { setTimeout(tick, 20); },"
            " function () { setTimeout(tick, 20); }); }\ntick();</script>")),
    }


def js_host(port: int, ip: str) -> Host:
    """The JavaScript host of the sim (see the module docstring), for a server on ``port``."""
    host = Host(JS_HOST, ip)
    url = lambda pq: base_url(JS_HOST, port) + pq  # noqa: E731
    root_links = tuple(Link(url(p), "a", p, url("/")) for p in (*JS_PAGES, "/static.html"))
    items = "".join(f"<li><a href=\"{lk.raw}\">{lk.raw}</a></li>" for lk in root_links)
    host.resources["/"] = Resource(body=f"<!DOCTYPE html>\n<html><body><ul>{items}</ul></body></html>\n"
                                   .encode(), links=root_links, layer=0)
    host.resources["/static.html"] = Resource(
        body=b"<!DOCTYPE html>\n<html><body><p>no script here</p><a href=\"/dyn/static-1.html\">1</a>"
             b"</body></html>\n",
        links=(Link(url("/dyn/static-1.html"), "a", "/dyn/static-1.html", url("/static.html")),), layer=1)
    host.resources["/dyn/static-1.html"] = _leaf("static-1", 2)
    for pq, body in _scripts(port).items():
        needs, fetches = JS_PAGES[pq]
        written = BUSY_LINKS if pq == "/busy.html" else DYN_LINKS[pq]
        js_links = tuple(Link(url(p), "a", p, url(pq)) for p in written)
        links = ((Link(url(REFRESH_TARGET), "refresh", REFRESH_TARGET, url(pq)),)
                 if pq == "/refresh.html" else ())
        host.resources[pq] = Resource(body=body, layer=1, links=links, js_links=js_links, js_needs=needs,
                                      js_fetches=fetches)
        for p in written:
            host.resources[p] = _leaf(p.rsplit("/", 1)[1][:-5], 2)
    host.resources["/app.js"] = Resource(content_type="application/javascript", body=APP_JS, kind="script")
    host.resources["/api/links.json"] = Resource(
        content_type="application/json", body=json.dumps(list(DYN_LINKS["/xhr.html"])).encode(), kind="data")
    host.resources["/private/secret.json"] = Resource(
        content_type="application/json", body=json.dumps(list(SECRET_LINKS)).encode(), kind="data")
    host.resources["/img/logo.png"] = Resource(content_type="image/png", body=b"\x89PNG\r\n\x1a\n", kind="image")
    for p in SECRET_LINKS:
        host.resources[p] = _leaf("secret", 2)
    host.resources[REFRESH_TARGET] = _leaf("refresh-target", 2)
    host.robots = RobotsProfile(kind="rules", status=200, body=ROBOTS)
    return host


def _leaf(name: str, layer: int) -> Resource:
    return Resource(body=f"<!DOCTYPE html>\n<html><body><p>{name}: rendered links lead here</p></body></html>\n"
                    .encode(), layer=layer)
