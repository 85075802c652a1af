"""The analysis stage: pages analysed in processes beside the event loop.

The download side (the engine) saves a page, then puts one *task* per
analyzer on a durable queue in ``stateDir/analysis`` (:mod:`.queue`); the
analysis processes (:mod:`.pool`, each running :mod:`.worker`) run the
analyzers (:mod:`.analyzers`: the crawl's own link extractor, ``meta``, and
the user's ``python`` and ``exec`` analyzers); the links come back to the
frontier on the loop with their page's depth.  A failing task is tried again
with backoff, then marked failed and raised as an alert (:mod:`.alerts`).
:class:`.stage.AnalysisStage` is the object the engine talks to;
:mod:`.cli` the ``analyze`` subcommand over an earlier crawl's pages.
See docs/analysis.md.

May import the configuration, the parser and the policy modules (``parse``,
``logline``, ``loopclock``, ``owner_only``, ``statelock``, ``core_pin``) and the outputs'
index format; never the engine, the frontier, the network, the web server,
the distributed mode or the synthetic web (tests/test_imports.py).
"""
