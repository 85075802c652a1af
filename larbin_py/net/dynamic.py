"""Dynamic pages: the URLs ``dynamicPages`` names, rendered in headless Chromium (issue 23).

:class:`DynamicFetcher` has the :class:`~larbin_py.frontier.interfaces.Fetcher`
interface; the engine hands it the page requests whose URL a ``dynamicPages``
rule matches (:class:`DynamicRules`) and everything else to the HTTP fetcher.
The frontier schedules a dynamic page like any other (robots.txt, the site's
and the IP's politeness): only the fetch differs.

One page, step by step:

1. The page itself is fetched by the crawler's own HTTP fetcher, exactly as
   a static page (same request, cookies, limits, raw bytes for WARC).  An
   error, a status other than 200 or a type other than HTML goes back as is:
   the outcome rules treat it like any answer (a redirect is followed to a
   URL that may or may not be dynamic).
2. A tab (:class:`_Tab`, from a small pool: ``dynamicConnexions`` render at
   once) navigates to the URL with every request intercepted (DevTools
   ``Fetch`` domain, request stage).  The document request is answered with
   the body of step 1; the browser never touches the network itself.
   :data:`INIT_SCRIPT` runs first in every frame of the tab: WebRTC,
   WebTransport and the capture devices are gone from the page.
3. Every *sub-request* the page makes (scripts, XHR, fetch, EventSource,
   stylesheets, same-site frames and their requests, dedicated workers and
   their requests; a cross-site frame's document too) is policed before the
   crawler makes it for the browser:

   * images, media and fonts are refused (``blocked``);
   * a scheme other than http(s), a method other than GET/HEAD: refused;
   * the page navigating away from itself (a meta refresh, ``location.href
     = ...``): refused (``navigation``), the page stays the one rendered
     (the refresh's target is a link of the page, followed as for any page);
   * another host than the page's: refused unless ``dynamicOtherHosts``
     (``otherHost``), and then only a host the crawl already knows (its
     address and robots.txt are in the frontier: ``robotsUnknown`` else);
   * robots.txt is obeyed (``forbiddenRobots``) unless ``ignoreRobots``;
   * **politeness**: a sub-request is a follow-up of the page's request, in
     its slot: it starts no sooner than the site's and the IP's next allowed
     time and pushes both by ``waitDuration`` (the crawl-delay, the server's
     pace), exactly as a robots.txt redirect hop does
     (``frontier.follow_ups.delay`` / ``started``).  The page holds
     its IP's connection slot meanwhile, so nothing else of that IP starts
     between.  So a host sees its requests ``waitDuration`` apart whether
     they come from pages or from the scripts of a page -- and a page with
     many sub-requests takes ``waitDuration`` per sub-request to render.
     In the distributed mode a sub-request starts only while the IP's lease
     allows (``frontier.follow_ups.allowed``; refused ``paused`` otherwise).
   * with ``useCookies`` a sub-request carries the crawl's cookies and its
     Set-Cookie goes to the crawl's jar, as for a page;
   * every sub-request made is counted in the engine's requests and bytes
     (``on_sub_request``) and in :attr:`DynamicFetcher.counters`.
4. After the load event the trigger runs (``scroll``: to the bottom, and
   again while the page grows, at most :data:`SCROLL_ROUNDS` times;
   ``call:FUNCTION``: the page's function is called; ``none``), then the page
   settles: no sub-request in flight nor started for :data:`IDLE` seconds.
   Everything is bounded by ``dynamicTimeout`` from the start of the render.
5. The rendered DOM (what ``document.documentElement.outerHTML`` gives,
   after the doctype) is the page's body (:class:`RenderedResult`,
   ``rendered`` True): saved, archived (the WARC gets the HTTP response and
   the rendering as a ``conversion`` record) and parsed for links like any
   page.  It is serialized *inside the page*, in an isolated world of the
   crawler's (:data:`WORLD`: page scripts can neither see nor redefine what
   it uses), by :data:`_SERIALIZE_JS`, which stops at maxPageSize bytes of
   UTF-8 (between two characters; counted ``renderTooBig``), and read in
   slices of :data:`CHUNK` code units: a page of any size never costs more
   than maxPageSize, and no DevTools answer more than a slice.

What a page cannot reach: requests that interception does not see (a
cross-site frame's or a shared or service worker's own requests, a
WebSocket) go to the closed proxy of the browser's flags and fail there;
Chromium resolves no name itself; UDP (WebRTC, QUIC) is off by flags and by
:data:`INIT_SCRIPT` (see :mod:`larbin_py.net.browser`).

Failures:

* a page that never settles (a script that polls for ever) is stopped at
  ``dynamicTimeout``; what was rendered by then is kept and the page is
  counted under ``dynamicTimeout`` (:attr:`RenderedResult.render_reason`);
* ``call:F`` when the page has no function ``F``: the page as loaded, counted
  ``noFunction``;
* a renderer that cannot be read (a script in an endless loop): the tab is
  closed, the body fetched in step 1 is kept, counted ``renderFailed``;
* the browser crashes (or is killed): the result is ``noConnection`` ("browser
  crashed"), which the engine retries like any connection failure, and the
  next page restarts the browser (:class:`larbin_py.net.browser.Browser`).

:meth:`DynamicFetcher.fetch` never raises.  Whatever keeps a page from being
rendered at all -- the browser dead or unable to restart, a tab that cannot
be opened by the render's deadline (each command of the render, the tab's
opening included, is bounded by ``dynamicTimeout``), another DevTools error,
an answer of an unexpected shape -- is the same ``noConnection`` outcome:
retried, then forgotten after the URL's retries, and counted in
:attr:`DynamicFetcher.unrendered` by why (``browser``, ``noTab``,
``devtools``, ``error``; the stats' ``unrendered``).  A tab half opened is
disposed of with its browser context.

A render holds its page (``FetchResult``, up to maxPageSize) only while it
runs: :meth:`_Render.end` takes its callback off the connection's ``closed``
future, which lives as long as the browser, and clears the tab's handlers.

Tabs are recycled: a tab serves :data:`TAB_PAGES` pages (each one starting
from ``about:blank``) in its own browser context, then the tab and its
context are closed and a fresh one is made, so a leaky page cannot make the
browser grow without bound.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections import Counter
from dataclasses import dataclass, fields
from typing import Awaitable, Callable, Protocol

from ..frontier.scheduler import site_key
from .browser import Browser, BrowserUnavailable
from .cdp import BrowserClosed, CDPConnection, CDPError, Session
from .http import FetchResult

__all__ = ["DynamicFetcher", "DynamicRules", "FrontierGate", "RenderedResult", "TRIGGERS", "build_dynamic",
           "parse_rule", "RENDER_REASONS"]

#: Seconds without a sub-request in flight or started after which a page has settled.
IDLE = 0.5
#: Pages a tab renders before it is closed with its browser context.
TAB_PAGES = 20
#: Scrolls to the bottom at most, while the page keeps growing.
SCROLL_ROUNDS = 3
#: Seconds for each command that reads the DOM (past dynamicTimeout) before the renderer counts as hung.
READ_TIMEOUT = 5.0
#: UTF-16 code units of the rendered DOM per DevTools answer (at most ~6 MB of JSON each).
CHUNK = 1 << 20
#: The isolated world the crawler's own scripts run in (page scripts can neither see nor alter it).
WORLD = "larbin_py"
#: Resource types never fetched for a page (DevTools Network.ResourceType).
BLOCKED_TYPES = frozenset({"Image", "Media", "Font"})
#: Headers of the fetched answer not handed to the browser: the body it gets is decoded and whole.
_HOP_HEADERS = frozenset({b"content-encoding", b"content-length", b"transfer-encoding", b"connection",
                          b"keep-alive"})
TRIGGERS = ("none", "scroll", "call")
#: Why a rendered page ended as it did (the stats' ``dynamic.pages`` counter).
RENDER_REASONS = ("ok", "dynamicTimeout", "noFunction", "renderFailed")
_FUNCTION_RE = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*\Z")

#: Run in every frame before its own scripts (Page.addScriptToEvaluateOnNewDocument, in the page's
#: world): the APIs that send what interception cannot see are gone.  WebRTC (RTCPeerConnection and
#: every RTC* / webkitRTC* interface) speaks UDP to any address; WebTransport speaks QUIC; capture
#: devices (navigator.mediaDevices, getUserMedia) have no use in a crawl (an http: page has none
#: anyway: they exist in secure contexts only).  The browser's flags stop the same traffic
#: (larbin_py.net.browser): this is the second lock, and the one a page sees.
INIT_SCRIPT = r"""(() => {
  const g = globalThis;
  for (const name of Object.getOwnPropertyNames(g)) {
    if (/^(webkit)?RTC|^WebTransport/.test(name)) { try { delete g[name]; } catch (e) {} }
  }
  const nav = g.Navigator && g.Navigator.prototype;
  for (const name of ['mediaDevices', 'getUserMedia', 'webkitGetUserMedia']) {
    try { if (nav) delete nav[name]; } catch (e) {}
  }
})();"""

#: Serializes the document as outerHTML does (its doctype first) in the crawler's isolated world,
#: walking the tree without recursion and stopping at MAX bytes of UTF-8 (cut between two
#: characters): nothing larger than the limit is ever built, whatever the page's size or depth,
#: and page scripts cannot alter the built-ins it uses.  The parts wait in the world's global for
#: _CHUNK_JS; the answer is {cut, bytes}.
_SERIALIZE_JS = r"""(() => {
  const MAX = %(max)d;
  const VOID = new Set(['area', 'base', 'basefont', 'bgsound', 'br', 'col', 'embed', 'frame', 'hr', 'img',
                        'input', 'keygen', 'link', 'meta', 'param', 'source', 'track', 'wbr']);
  const RAW = new Set(['style', 'script', 'xmp', 'iframe', 'noembed', 'noframes', 'plaintext', 'noscript']);
  const NS = 'http://www.w3.org/1999/xhtml';
  const ASCII = /^[\x00-\x7f]*$/;
  const ENT = {'&': '&amp;', '\u00a0': '&nbsp;', '"': '&quot;', '<': '&lt;', '>': '&gt;'};
  const enc = new TextEncoder(), dec = new TextDecoder();
  const parts = [];
  let size = 0, cut = false;
  const room = () => MAX - size;
  const put = (s) => {
    if (cut || !s) return;
    if (s.length > room()) { s = s.slice(0, room()); cut = true; }
    if (ASCII.test(s)) { size += s.length; parts.push(s); return; }
    const b = enc.encode(s);
    if (b.length > room()) {  // back to the start of the character the limit falls in
      let k = room();
      while (k > 0 && (b[k] & 0xc0) === 0x80) k--;
      s = dec.decode(b.subarray(0, k)); size += k; cut = true;
    } else size += b.length;
    parts.push(s);
  };
  const html = (n) => n.nodeType === 1 && n.namespaceURI === NS;
  const tag = (n) => html(n) ? n.localName : n.tagName;
  const some = (s) => s.slice(0, room() + 1);
  const leaf = (n) => {
    switch (n.nodeType) {
      case 3: {
        const raw = n.parentNode && html(n.parentNode) && RAW.has(n.parentNode.localName);
        put(raw ? some(n.data) : some(n.data).replace(/[&\u00a0<>]/g, c => ENT[c]));
        break;
      }
      case 4: put('<![CDATA[' + some(n.data) + ']]>'); break;
      case 7: put('<?' + n.target + ' ' + some(n.data) + '>'); break;
      case 8: put('<!--' + some(n.data) + '-->'); break;
    }
  };
  const d = document, root = d.documentElement;
  const open = [];  // the elements whose end tag is due, innermost last
  const after = (n) => {  // the node after n's subtree, closing the elements that end with it
    for (;;) {
      if (n === root) return null;
      if (n.nextSibling !== null) return n.nextSibling;
      n = open.pop();
      if (n === undefined) return null;
      put('</' + tag(n) + '>');
    }
  };
  if (d.doctype) put('<!DOCTYPE ' + d.doctype.name + '>\n');
  let n = root;
  while (n !== null && !cut) {
    if (n.nodeType === 1) {
      let start = '<' + tag(n);
      for (const a of n.attributes) {
        start += ' ' + a.name + '="' + some(a.value).replace(/[&\u00a0"<>]/g, c => ENT[c]) + '"';
        if (start.length > room()) break;
      }
      put(start + '>');
      if (!(html(n) && VOID.has(n.localName))) {
        const first = (html(n) && n.localName === 'template' ? n.content : n).firstChild;
        if (first !== null) { open.push(n); n = first; continue; }
        put('</' + tag(n) + '>');
      }
    } else leaf(n);
    n = after(n);
  }
  globalThis.__larbinDom = {parts, i: 0};
  return {cut, bytes: size};
})()"""

#: The next slice of the serialized DOM, [text, done]: at most CHUNK code units (never half of
#: a surrogate pair), so that no DevTools answer is large whatever maxPageSize is.
_CHUNK_JS = r"""(() => {
  const st = globalThis.__larbinDom;
  if (!st) return ['', true];
  let out = '', n = 0;
  while (st.i < st.parts.length && n < %(chunk)d) {
    const p = st.parts[st.i];
    if (n + p.length <= %(chunk)d) { out += p; n += p.length; st.i++; continue; }
    let k = %(chunk)d - n;
    const c = p.charCodeAt(k - 1);
    if (c >= 0xd800 && c <= 0xdbff) k--;
    if (k <= 0) break;
    out += p.slice(0, k); st.parts[st.i] = p.slice(k); n += k;
    break;
  }
  const done = st.i >= st.parts.length;
  if (done) delete globalThis.__larbinDom;
  return [out, done];
})()"""

#: The scroll trigger, in the isolated world (the page's listeners still get the event).
_SCROLL_JS = ("window.scrollTo(0, document.documentElement.scrollHeight);"
              "window.dispatchEvent(new Event('scroll'));"
              "document.documentElement.scrollHeight")


def parse_rule(words: list[str] | tuple[str, ...]) -> tuple[str, str]:
    """``(pattern, trigger)`` of a ``dynamicPages`` line's words; ValueError if bad.

    PATTERN is a URL prefix (``http://host/path``) or ``re:REGEX`` (searched
    from the URL's start, ``re.match``); TRIGGER is ``none`` (default),
    ``scroll`` or ``call:FUNCTION`` (a JavaScript name, dots allowed).
    """
    if not words or len(words) > 2:
        raise ValueError(f"expected 'PATTERN [TRIGGER]', got {' '.join(words)!r}")
    pattern = words[0]
    trigger = words[1] if len(words) == 2 else "none"
    if pattern.startswith("re:"):
        try:
            re.compile(pattern[3:])
        except re.error as exc:
            raise ValueError(f"bad regular expression {pattern[3:]!r}: {exc}") from None
        if not pattern[3:]:
            raise ValueError("empty regular expression after 're:'")
    elif not re.match(r"https?://[^\s/?#]+", pattern, re.IGNORECASE):
        raise ValueError(f"a pattern is an http(s) URL prefix or re:REGEX, got {pattern!r}")
    if trigger not in ("none", "scroll"):
        name = trigger[5:] if trigger.startswith("call:") else None
        if name is None:
            raise ValueError(f"trigger must be none, scroll or call:FUNCTION, got {trigger!r}")
        if not _FUNCTION_RE.match(name):
            raise ValueError(f"call: needs a JavaScript function name, got {name!r}")
    return pattern, trigger


class DynamicRules:
    """The ``dynamicPages`` rules: the first whose pattern matches a URL gives its trigger."""

    def __init__(self, rules) -> None:
        self.rules = tuple(rules)
        self._compiled = [(re.compile(p[3:]) if p.startswith("re:") else p, t) for p, t in self.rules]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def trigger(self, url: str) -> str | None:
        """The trigger for ``url``, or None when it is a static page."""
        for pattern, trigger in self._compiled:
            if isinstance(pattern, str):
                if url.startswith(pattern):
                    return trigger
            elif pattern.match(url):
                return trigger
        return None


@dataclass(slots=True)
class RenderedResult(FetchResult):
    """A FetchResult whose ``body`` is the rendered DOM (UTF-8 HTML).

    ``static_body`` is the body as fetched (the WARC's response record keeps
    the raw bytes anyway); ``render_reason`` one of :data:`RENDER_REASONS`.
    """

    rendered: bool = True
    render_reason: str = "ok"
    trigger: str = "none"
    static_body: bytes = b""
    sub_requests: int = 0
    render_time: float = 0.0


_RESULT_FIELDS = tuple(f.name for f in fields(FetchResult))


def _rendered(res: FetchResult, **kw) -> RenderedResult:
    return RenderedResult(**{**{n: getattr(res, n) for n in _RESULT_FIELDS}, **kw})


class SubRequestGate(Protocol):
    """Admits a page's sub-request: robots.txt, other hosts, politeness (see :class:`FrontierGate`)."""

    async def admit(self, page_request, url: str) -> tuple[str, int] | str:
        """Wait for the sub-request's turn; ``(ip, port)`` to fetch it from, or why it is refused."""
        ...


class _Slot:
    """What the frontier's follow_ups read of a request: its site and its IP."""

    __slots__ = ("site", "ip")

    def __init__(self, site, ip: str) -> None:
        self.site = site
        self.ip = ip


class FrontierGate:
    """Sub-requests policed by the frontier's own state (see the module docstring, step 3)."""

    def __init__(self, frontier, *, other_hosts: bool, now: Callable[[], float],
                 sleep: Callable[[float], Awaitable] = asyncio.sleep) -> None:
        self.frontier = frontier
        self.other_hosts = other_hosts
        self.now = now
        self.sleep = sleep

    async def admit(self, page_request, url: str) -> tuple[str, int] | str:
        fr = self.frontier
        parsed = site_key(url)
        if parsed is None:
            return "badUrl"
        if page_request is None:  # no frontier request (a bench or a tool): no politeness to keep
            return "noSlot"
        if parsed[0] == page_request.site.key:
            site, ip = page_request.site, page_request.ip
        else:
            if not self.other_hosts:
                return "otherHost"
            site = fr.sites.get(parsed[0])
            if site is None or site.ip_site is None or (fr.obey_robots and site.robots is None):
                return "robotsUnknown"
            ip = site.ip_site.ip
        if fr.obey_robots and site.robots is not None and not site.robots.allowed(fr.agent, url):
            return "forbiddenRobots"
        slot = _Slot(site, ip)
        while True:  # re-checked after the sleep: a page may have taken the slot meanwhile
            delay = fr.follow_ups.delay(slot, self.now())
            if delay <= 0:
                break
            await self.sleep(delay)
        if not fr.follow_ups.allowed(slot, self.now()):
            return "paused"  # the IP's lease lapsed (distributed mode): no request starts
        fr.follow_ups.started(slot, self.now())
        return ip, site.port


class _Tab:
    """One tab in its own browser context, with interception on; serves TAB_PAGES pages."""

    def __init__(self, conn: CDPConnection, context_id: str, target_id: str, session: Session) -> None:
        self.conn = conn
        self.context_id = context_id
        self.target_id = target_id
        self.session = session
        self.pages = 0

    @classmethod
    async def open(cls, conn: CDPConnection, remaining: Callable[[], float]) -> "_Tab":
        """A new tab, each command bounded by ``remaining()`` seconds (the render's deadline).

        Raises :class:`_NoTab` (the DevTools error as its cause) or BrowserClosed; what was
        made before the failure is disposed of (its browser context, and so its tab).
        """
        ctx = None
        try:
            ctx = (await conn.send("Target.createBrowserContext", {"disposeOnDetach": True},
                                   timeout=remaining()))["browserContextId"]
            tid = (await conn.send("Target.createTarget", {"url": "about:blank", "browserContextId": ctx},
                                   timeout=remaining()))["targetId"]
            sid = (await conn.send("Target.attachToTarget", {"targetId": tid, "flatten": True},
                                   timeout=remaining()))["sessionId"]
            tab = cls(conn, ctx, tid, conn.session(sid))
            s = tab.session
            await s.send("Page.enable", timeout=remaining())
            await s.send("Page.setLifecycleEventsEnabled", {"enabled": True}, timeout=remaining())
            await s.send("Page.addScriptToEvaluateOnNewDocument", {"source": INIT_SCRIPT}, timeout=remaining())
            await s.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]},
                         timeout=remaining())
            return tab
        except (CDPError, KeyError, TypeError) as exc:
            if ctx is not None:  # answered in turn, after any late createTarget: its tab goes too
                conn.post("Target.disposeBrowserContext", {"browserContextId": ctx})
            if conn.is_closed:
                raise BrowserClosed("the browser exited while a tab was opened") from None
            raise _NoTab(str(exc) or type(exc).__name__) from exc

    async def close(self) -> None:
        self.session.detach()
        if self.conn.is_closed:
            return
        try:
            await self.conn.send("Target.closeTarget", {"targetId": self.target_id}, timeout=5.0)
            await self.conn.send("Target.disposeBrowserContext", {"browserContextId": self.context_id},
                                 timeout=5.0)
        except (CDPError, BrowserClosed):
            pass


class _NoTab(Exception):
    """No tab could be opened (the browser did not answer in time, or refused)."""


class _Render:
    """The state of one page's render: its sub-requests in flight and the idle clock."""

    def __init__(self, fetcher: "DynamicFetcher", tab: _Tab, url: str, res: FetchResult, page_request) -> None:
        self.f = fetcher
        self.tab = tab
        self.url = url
        self.res = res
        self.page_request = page_request
        self.main_served = False
        self.in_flight = 0
        self.last_activity = fetcher.clock()
        self.changed = asyncio.Event()
        self.loaded = asyncio.Event()
        self.loader_id: str | None = None
        self.loads: set = set()
        self.tasks: set[asyncio.Task] = set()
        self.sub_requests = 0
        self.world: int | None = None  # the isolated world's execution context, once made
        tab.conn.closed.add_done_callback(self._browser_gone)

    def _browser_gone(self, _fut) -> None:
        """The browser died: wake every wait of this render (it then raises BrowserClosed)."""
        self.changed.set()
        self.loaded.set()

    def end(self) -> None:
        """The render is over: its sub-requests cancelled, nothing left that refers to it
        (the connection's ``closed`` future outlives every render: a callback left there would
        keep this render, and its page, alive until the browser dies)."""
        for task in list(self.tasks):
            task.cancel()
        self.tab.conn.closed.remove_done_callback(self._browser_gone)
        self.tab.session.handlers.clear()

    # -- events (called by the connection's reader: no await here) --------
    def on_paused(self, p: dict) -> None:
        request = p.get("request") or {}
        rid = p.get("requestId")
        if p.get("resourceType") == "Document" and p.get("frameId") == self.tab.target_id:
            if not self.main_served:
                self.main_served = True
                self._fulfill(rid, self.res.status or 200, self.res.headers, self.res.body)
            else:  # the page leaving itself (meta refresh, location.href=): it stays as it is
                self.f.refused["navigation"] += 1
                self._fail(rid, "Aborted")  # Aborted keeps the document; BlockedByClient shows an error page
            return
        self.in_flight += 1
        self._touch()
        task = asyncio.get_running_loop().create_task(self._serve(rid, request, p.get("resourceType", "")))
        self.tasks.add(task)
        task.add_done_callback(self._served)

    def on_lifecycle(self, p: dict) -> None:
        """The ``load`` of this page's navigation (a reused tab may still report about:blank's)."""
        if p.get("name") == "load" and p.get("frameId") == self.tab.target_id:
            self.loads.add(p.get("loaderId"))
            if self.loader_id is not None and self.loader_id in self.loads:
                self._loaded()

    def navigated(self, loader_id: str | None) -> None:
        self.loader_id = loader_id
        if loader_id in self.loads:
            self._loaded()

    def _loaded(self) -> None:
        """The page loaded: the idle clock starts again from here.  The network
        service's ``Fetch.requestPaused`` for a request the page's scripts made
        while loading may come after the renderer's ``load`` event (seen on a
        loaded machine): a page loaded after more than IDLE s must still give
        it IDLE s to arrive, or the render ends before the request is served."""
        self._touch()
        self.loaded.set()

    def _served(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        self.in_flight -= 1
        self._touch()
        if not task.cancelled() and task.exception() is not None:
            self.f.counters["subError"] += 1

    def _touch(self) -> None:
        self.last_activity = self.f.clock()
        self.changed.set()

    # -- sub-requests ---------------------------------------------------------
    async def _serve(self, rid: str, request: dict, rtype: str) -> None:
        f = self.f
        url = request.get("url", "")
        method = request.get("method", "GET")
        refused = None
        if rtype in BLOCKED_TYPES or url.endswith("/favicon.ico"):  # the browser's own icon fetch
            refused = "blocked"
        elif not url.startswith(("http://", "https://")):
            refused = "badUrl"
        elif method not in ("GET", "HEAD"):
            refused = "method"
        admitted = refused if refused is not None else await f.gate.admit(self.page_request, url)
        if isinstance(admitted, str):
            f.refused[admitted] += 1
            self._fail(rid, "BlockedByClient")
            return
        ip, port = admitted
        jar = f.jar
        if jar is None:
            sub = await f.http.fetch(url, ip, port, method=method)
        else:  # useCookies: a script's request carries the crawl's cookies, like a page's
            sub = await f.http.fetch(url, ip, port, method=method, cookie=jar.header_for(url, time.time()))
            if sub.status is not None:
                jar.receive(url, [v for n, v in sub.headers if n == b"set-cookie"], time.time())
        self.sub_requests += 1
        f.counters["subRequests"] += 1
        f.counters["subBytes"] += sub.bytes_read
        if f.on_sub_request is not None:
            f.on_sub_request(self.page_request, sub)
        if sub.status is None or (sub.error is not None and sub.error != "tooBig"):
            f.counters["subFailed"] += 1
            self._fail(rid, "TimedOut" if sub.error == "timeout" else "Failed")
            return
        self._fulfill(rid, sub.status, sub.headers, sub.body)

    def _fulfill(self, rid: str, status: int, headers, body: bytes) -> None:
        hdrs = [{"name": n.decode("latin-1"), "value": v.decode("latin-1")}
                for n, v in headers if n.lower() not in _HOP_HEADERS]
        self.tab.conn.post("Fetch.fulfillRequest", {
            "requestId": rid, "responseCode": status, "responseHeaders": hdrs,
            "body": base64.b64encode(body).decode("ascii")}, session_id=self.tab.session.session_id)

    def _fail(self, rid: str, reason: str) -> None:
        self.tab.conn.post("Fetch.failRequest", {"requestId": rid, "errorReason": reason},
                           session_id=self.tab.session.session_id)

    # -- waiting ------------------------------------------------------------
    async def wait_event(self, event: asyncio.Event, deadline: float) -> bool:
        remaining = deadline - self.f.clock()
        if remaining > 0:
            try:
                await asyncio.wait_for(event.wait(), remaining)
            except asyncio.TimeoutError:
                return False
        if self.tab.conn.is_closed:
            raise BrowserClosed("the browser exited during the render")
        return event.is_set()

    async def settle(self, deadline: float) -> bool:
        """Wait until no sub-request has been in flight or started for IDLE s; False at the deadline."""
        clock = self.f.clock
        while True:
            if self.tab.conn.is_closed:
                raise BrowserClosed("the browser exited during the render")
            now = clock()
            if self.in_flight == 0 and now - self.last_activity >= IDLE:
                return True
            if now >= deadline:
                return False
            self.changed.clear()
            wake = deadline if self.in_flight else min(deadline, self.last_activity + IDLE)
            try:
                await asyncio.wait_for(self.changed.wait(), max(0.0, wake - now))
            except asyncio.TimeoutError:
                pass

    async def evaluate(self, expression: str, timeout: float):
        """``expression``'s value, run in the crawler's isolated world of the page (made on first use)."""
        s = self.tab.session
        if self.world is None:
            got = await s.send("Page.createIsolatedWorld", {"frameId": self.tab.target_id, "worldName": WORLD},
                               timeout=timeout)
            self.world = got["executionContextId"]
        got = await s.send("Runtime.evaluate", {"expression": expression, "contextId": self.world,
                                                "returnByValue": True}, timeout=timeout)
        return (got.get("result") or {}).get("value")


class DynamicFetcher:
    """Fetch-and-render for the dynamic pages; see the module docstring.

    ``http``: the crawler's HTTP fetcher (it makes every request, page and
    sub-requests); ``browser``: the :class:`Browser`; ``rules``: the
    :class:`DynamicRules`; ``gate``: the :class:`SubRequestGate`;
    ``on_sub_request(page_request, result)``: each sub-request made (the
    engine counts it in its requests and bytes).
    """

    def __init__(self, http, browser: Browser, rules: DynamicRules, gate: SubRequestGate, *,
                 tabs: int = 2, timeout: float = 10.0, max_page_size: int = 5_000_000,
                 on_sub_request=None, jar=None, clock: Callable[[], float] = time.monotonic) -> None:
        self.http = http
        self.jar = jar  # useCookies: the crawl's cookie jar (larbin_py.net.cookies), for sub-requests
        self.browser = browser
        self.rules = rules
        self.gate = gate
        self.tabs = tabs
        self.timeout = timeout
        self.max_page_size = max_page_size
        self.on_sub_request = on_sub_request
        self.clock = clock
        self._slots = asyncio.Semaphore(tabs)
        self._idle_tabs: list[_Tab] = []
        #: Pages by how their render ended (RENDER_REASONS), crashes, tabs, sub-requests.
        self.counters: Counter[str] = Counter()
        #: Sub-requests refused, by reason (blocked, otherHost, forbiddenRobots...).
        self.refused: Counter[str] = Counter()
        #: Pages given back unrendered as noConnection (retried), by why: browser (crashed or
        #: would not restart), noTab, devtools (another DevTools error), error (an unexpected answer).
        self.unrendered: Counter[str] = Counter()
        self._closing = False

    def trigger(self, url: str) -> str | None:
        """The trigger of ``url`` when it is a dynamic page, else None (the engine's dispatch)."""
        return self.rules.trigger(url)

    @property
    def stats(self) -> dict:
        return {"pages": {r: self.counters[r] for r in RENDER_REASONS},
                "static_answers": self.counters["static"],
                "crashes": self.counters["crashes"],
                "browser_starts": self.browser.starts,
                "tabs_opened": self.counters["tabsOpened"],
                "tabs_recycled": self.counters["tabsRecycled"],
                "sub_requests": self.counters["subRequests"],
                "sub_bytes": self.counters["subBytes"],
                "sub_failed": self.counters["subFailed"],
                "sub_refused": dict(self.refused),
                "unrendered": dict(self.unrendered)}

    async def start(self) -> None:
        """Start the browser now (BrowserUnavailable: the crawl cannot run as configured)."""
        await self.browser.start()

    async def fetch(self, url: str, ip: str, port: int, *, cookie: bytes | None = None,
                    request=None, trigger: str | None = None) -> FetchResult:
        """Fetch ``url`` over HTTP and, when it is an HTML page, render it; never raises."""
        addresses = getattr(getattr(request, "site", None), "ips", ())  # Happy Eyeballs: the site's others
        res = await self.http.fetch(url, ip, port, cookie=cookie, addresses=addresses)
        if self.jar is not None and res.status is not None:  # before the render: its scripts' requests need them
            self.jar.receive(url, [v for n, v in res.headers if n == b"set-cookie"], time.time())
        if (res.error is not None or res.status != 200 or res.content_type is None
                or res.content_type not in ("text/html", "application/xhtml+xml")):
            self.counters["static"] += 1
            return res
        if trigger is None:
            trigger = self.rules.trigger(url) or "none"
        async with self._slots:
            started = self.clock()
            try:
                out = await self._render(url, res, trigger, request)
            except Exception as exc:  # noqa: BLE001 -- every failure of the browser is an outcome
                return self._unrendered(res, trigger, exc)
            out.render_time = self.clock() - started
        self.counters[out.render_reason] += 1
        return out

    def _unrendered(self, res: FetchResult, trigger: str, exc: Exception) -> RenderedResult:
        """The page could not be rendered at all: ``noConnection`` (retried like any connection
        failure, forgotten after its retries), counted in ``unrendered`` by why."""
        if isinstance(exc, (BrowserClosed, BrowserUnavailable)):
            self.counters["crashes"] += 1
            why, detail = "browser", f"browser crashed: {exc}"
        elif isinstance(exc, _NoTab):
            why, detail = "noTab", f"browser: no tab could be opened: {exc}"
        elif isinstance(exc, CDPError):
            why, detail = "devtools", f"browser: {exc}"
        else:  # an answer of an unexpected shape: the crawl goes on, the page is retried
            why, detail = "error", f"render failed: {type(exc).__name__}: {exc}"
        self.unrendered[why] += 1
        out = _rendered(res, render_reason="renderFailed", trigger=trigger, static_body=res.body)
        out.error = "noConnection"
        out.error_detail = detail
        return out

    async def _tab(self, conn: CDPConnection, deadline: float) -> _Tab:
        while self._idle_tabs:
            tab = self._idle_tabs.pop()
            if tab.conn is conn and not conn.is_closed:
                return tab
        self.counters["tabsOpened"] += 1
        return await _Tab.open(conn, lambda: max(0.1, deadline - self.clock()))

    async def _release(self, tab: _Tab, healthy: bool) -> None:
        tab.pages += 1
        if healthy and tab.pages < TAB_PAGES and not self._closing and not tab.conn.is_closed:
            try:
                await tab.session.send("Page.navigate", {"url": "about:blank"}, timeout=5.0)
                self._idle_tabs.append(tab)
                return
            except (CDPError, BrowserClosed):
                pass
        self.counters["tabsRecycled"] += 1
        await tab.close()

    async def _render(self, url: str, res: FetchResult, trigger: str, page_request) -> RenderedResult:
        clock = self.clock
        deadline = clock() + self.timeout
        conn = await self.browser.connection()
        tab = await self._tab(conn, deadline)
        r = _Render(self, tab, url, res, page_request)
        s = tab.session
        s.on("Fetch.requestPaused", r.on_paused)
        s.on("Page.lifecycleEvent", r.on_lifecycle)
        healthy = False
        reason = "ok"
        dom: tuple[str, bool] | None = None
        try:
            try:
                nav = await s.send("Page.navigate", {"url": url}, timeout=max(0.1, deadline - clock()))
                if nav.get("errorText") or not r.main_served:  # the browser did not show our answer
                    self.counters["navigationFailed"] += 1
                    return _rendered(res, render_reason="renderFailed", trigger=trigger, static_body=res.body)
                r.navigated(nav.get("loaderId"))
                await r.wait_event(r.loaded, deadline)
                reason = await self._trigger(r, s, trigger, deadline)
                if not await r.settle(deadline):
                    reason = "dynamicTimeout"
            except CDPError:  # no answer by the deadline (a busy page), a navigation refused
                if conn.is_closed:
                    raise BrowserClosed("the browser exited during the render") from None
                reason = "dynamicTimeout" if clock() >= deadline else "renderFailed"
            try:  # what was rendered, settled or not
                dom = await self._read_dom(r)
                healthy = dom is not None
            except CDPError:  # a renderer stuck in a script: the tab is closed below
                if conn.is_closed:
                    raise BrowserClosed("the browser exited during the render") from None
        finally:
            r.end()
            if conn.is_closed:
                raise BrowserClosed("the browser exited during the render")
            await self._release(tab, healthy)
        if dom is None:
            self.counters["unreadable"] += 1
            return _rendered(res, render_reason="renderFailed", trigger=trigger, static_body=res.body,
                             sub_requests=r.sub_requests)
        html, cut = dom
        body = html.encode("utf-8", "replace")
        if cut or len(body) > self.max_page_size:
            body = body[:self.max_page_size]  # already within the limit but for lone surrogates
            self.counters["renderTooBig"] += 1
        return _rendered(res, body=body, charset="utf-8", content_type="text/html", render_reason=reason,
                         trigger=trigger, static_body=res.body, sub_requests=r.sub_requests)

    async def _read_dom(self, r: _Render) -> tuple[str, bool] | None:
        """The rendered document (at most maxPageSize bytes of UTF-8) and whether it was cut, or
        None when the page's answers are not what the scripts return.

        Serialized and cut inside the page (:data:`_SERIALIZE_JS`), then read in slices of
        :data:`CHUNK` code units: neither the renderer nor the DevTools pipe ever carries more
        than the limit, and no one answer more than a slice.  Each command is bounded by
        READ_TIMEOUT (CDPError: a renderer that does not answer).
        """
        head = await r.evaluate(_SERIALIZE_JS % {"max": self.max_page_size}, READ_TIMEOUT)
        if not isinstance(head, dict):
            return None
        chunks: list[str] = []
        read = _CHUNK_JS % {"chunk": CHUNK}
        for _ in range(self.max_page_size // CHUNK + 2):  # the slices there can be, and one more
            got = await r.evaluate(read, READ_TIMEOUT)
            if not (isinstance(got, list) and len(got) == 2 and isinstance(got[0], str)):
                return None
            chunks.append(got[0])
            if got[1]:
                return "".join(chunks), bool(head.get("cut"))
        return None

    async def _trigger(self, r: _Render, s: Session, trigger: str, deadline: float) -> str:
        """Run the page's trigger; the render reason so far ("ok" or "noFunction")."""
        clock = self.clock
        if trigger == "scroll":
            height = None
            for _ in range(SCROLL_ROUNDS):
                new = await r.evaluate(_SCROLL_JS, max(0.1, deadline - clock()))
                if new == height or not await r.settle(deadline):
                    break
                height = new
        elif trigger.startswith("call:"):
            name = trigger[5:]
            got = await s.send("Runtime.evaluate", {"expression": (
                f"(function(){{ try {{ if (typeof {name} !== 'function') return 'missing'; }}"
                f" catch (e) {{ return 'missing'; }} {name}(); return 'called'; }})()"),
                "returnByValue": True}, timeout=max(0.1, deadline - clock()))
            if (got.get("result") or {}).get("value") != "called":
                return "noFunction"
        return "ok"

    async def close(self) -> None:
        """Close the tabs and the browser (the HTTP fetcher is the engine's to close)."""
        self._closing = True
        tabs, self._idle_tabs = self._idle_tabs, []
        for tab in tabs:
            await tab.close()
        await self.browser.close()


def build_dynamic(config, http, frontier, browser: Browser, *, now: Callable[[], float],
                  clock: Callable[[], float], on_sub_request=None, jar=None) -> DynamicFetcher:
    """The engine's DynamicFetcher for ``config`` (its ``dynamic*`` keys), on the frontier's gate."""
    gate = FrontierGate(frontier, other_hosts=config.dynamic_other_hosts, now=now)
    return DynamicFetcher(http, browser, DynamicRules(config.dynamic_pages), gate,
                          tabs=config.dynamic_connexions, timeout=config.dynamic_timeout,
                          max_page_size=config.max_page_size, on_sub_request=on_sub_request, jar=jar,
                          clock=clock)
