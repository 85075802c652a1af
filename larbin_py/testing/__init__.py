"""Test doubles of the crawl's seams: in-memory URL lanes and seen set
(:mod:`.fakes`), a crawl state that keeps nothing (:mod:`.state`).

Used by the tests and the benchmarks, never by a crawl.  May import the
frontier, the crawl state's Protocol and the state module's errors; never
the engine, the network, the web server, the distributed mode or the
synthetic web (tests/test_imports.py).
"""
