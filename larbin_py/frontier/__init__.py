"""The frontier: which URL is fetched next, and when (Larbin's core).

The URL stores on disk and the seen test (:mod:`.store`, :mod:`.seen`,
:mod:`.sieve`), the per-site FIFOs, the IP heap, the gate that stops loading
while the sites are full, politeness and pace (:mod:`.scheduler`,
:mod:`.sites`), private addresses (:mod:`.addresses`), and the seams the
engine and the distributed mode plug into (:mod:`.interfaces`).  Sans-I/O
but for the stores' files: time comes in as ``now`` or an injected clock.

May import the policy modules (``url``, ``robots``, ``rules``, ``throttle``,
``transitions``, ``logline``, ``owner_only``, ``malloc_tuning``) and the edge's
result types for annotations only; never the engine, the network, the
outputs, the web server, the analysis stage, the distributed mode or the
synthetic web (tests/test_imports.py checks it).
"""
