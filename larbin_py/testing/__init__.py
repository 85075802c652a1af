"""Test doubles of the crawl's seams: in-memory URL lanes and seen set
(:mod:`.fakes`), a crawl state that keeps nothing (:mod:`.state`).

Used by the tests and the benchmarks, never by a crawl.  May import the
frontier, the crawl state's Protocol and the state module's errors; nothing
at the edge (sockets, Redis, browsers).
"""
