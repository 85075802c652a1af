"""The edge: every socket the crawl opens, behind the interfaces of
larbin_py.frontier.interfaces.

DNS with c-ares, A and AAAA (:mod:`.dns`), HTTP/1.1 with h11 and llhttp
(:mod:`.http`, :mod:`.fastread`, :mod:`.decode`: gzip, deflate, br, zstd),
HTTP/2 with h2 (:mod:`.h2conn`), opening connections: Happy Eyeballs, a
proxy's CONNECT tunnel, TLS (:mod:`.connect`, :mod:`.proxy`, :mod:`.tls`),
HTTP authentication (:mod:`.auth`), bandwidth (:mod:`.bandwidth`), cookies
(:mod:`.cookies`), and dynamic pages in Chromium over its DevTools pipe
(:mod:`.browser`, :mod:`.cdp`, :mod:`.dynamic`).  Failures are values
(a result with a reason), never exceptions into the engine.

May import the policy modules (``url``, ``transitions``, ``loopclock``, ``lazyimport``,
``owner_only``, ``core_pin``) and the frontier's small helpers (``site_key``); never the
engine, the outputs, the web server, the analysis stage, the distributed
mode or the synthetic web (tests/test_imports.py checks it).
"""
