"""The distributed mode: one crawl over N worker processes coordinated through Redis.

See docs/distributed.md (what is built) and docs/distributed-design.md (why).  Nothing here is
imported by a single-process crawl (no ``redisUrl``).

The outermost room: it may import the engine and every part it swaps
(frontier, outputs, the crawl state), the stats server (the launcher's),
the configuration; never the demo or the synthetic web
(tests/test_imports.py).
"""
