"""The frontier: which URL is fetched next, and when (Larbin's core).

:class:`~larbin_py.frontier.scheduler.Frontier` keeps Larbin's gate, site
FIFOs, IP heap, politeness and pace (:mod:`.scheduler`, :mod:`.sites`);
each other job is a room of its own, passed in at construction: the URL
lanes (:mod:`.lanes`, on the stores of :mod:`.store`), the way in
(:mod:`.admission`: offer, the seen test of :mod:`.seen` / :mod:`.sieve`,
the distributed sink), the names to resolve (:mod:`.dns_queue`, with the
private-address policy of :mod:`.addresses`), pruning (:mod:`.pruning`),
the IP-lease gate (:mod:`.ip_leases`), politeness after a start
(:mod:`.follow_ups`), the wait lane's refills (:mod:`.refill`), the
checkpoint codec (:mod:`.codec`) and the stats (:mod:`.stats`,
:mod:`.topcounts`).  :mod:`.assembly` builds a frontier from plain settings;
:mod:`.protocol` publishes what its callers may use of it; :mod:`.interfaces`
the seams the engine and the distributed mode plug into.  Sans-I/O but for
the stores' files: time comes in as ``now`` or an injected clock.

May import the policy modules (``url``, ``robots``, ``rules``, ``throttle``,
``transitions``, ``logline``, ``owner_only``, ``malloc_tuning``, ``core_pin``) and the edge's
result types for annotations only (in :mod:`.interfaces`); never the engine,
the network, the outputs, the web server, the analysis stage, the
distributed mode or the synthetic web (tests/test_imports.py checks it).
"""
