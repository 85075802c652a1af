"""The edge: every socket the crawl opens, behind the interfaces of
larbin_py.frontier.interfaces.

DNS with c-ares (:mod:`.dns`), HTTP/1.1 with h11 and llhttp (:mod:`.http`,
:mod:`.fastread`, :mod:`.decode`), bandwidth (:mod:`.bandwidth`), cookies
(:mod:`.cookies`), and dynamic pages in Chromium over its DevTools pipe
(:mod:`.browser`, :mod:`.cdp`, :mod:`.dynamic`).  Failures are values
(a result with a reason), never exceptions into the engine.

May import the policy modules (``url``, ``transitions``, ``loopclock``,
``owner_only``) and the frontier's small helpers (``site_key``); never the
engine, the outputs, the web server, the analysis stage, the distributed
mode or the synthetic web (tests/test_imports.py checks it).
"""
