"""What every worker of a crawl must agree on: the crawl's meta (sans-I/O).

The first worker to join creates the crawl with :func:`crawl_meta` of its
configuration; every joiner is checked against it (``RedisIO.join_crawl``:
one that differs is refused with the keys named).  Kept apart from the
launcher so that the worker (larbin_py.distributed.crawl_worker), which the launcher
runs, does not import the launcher; the launcher imports these.
"""

from __future__ import annotations

from .redisio import CrawlMeta

__all__ = ["SHARED_KEYS", "crawl_meta"]

#: The keys every worker of a crawl must agree on (beyond partitions and
#: seenBuckets): what is crawled and how politely.
SHARED_KEYS = (
    "UserAgent", "waitDuration", "depthInSite", "depthBySite", "maxRedirects", "noExternalLinks",
    "getCGI", "getImage", "anyType", "specificSearch", "specificSet", "limitToDomain",
    "forbiddenExtensions", "punycode", "ignoreRobots", "maxUrlSize", "privateNetworks",
    "pageNoDuplicate", "outputMode", "limitPage", "leaseTtl", "membership", "zkPath", "partitionShares",
)


def crawl_meta(config) -> CrawlMeta:
    """What the crawl is created with: partitions, seenBuckets and :data:`SHARED_KEYS`."""
    from ..config import KEYS

    by_name = {k.name: k for k in KEYS}
    rules = {}
    for name in SHARED_KEYS:
        key = by_name[name]
        rules[name] = " | ".join(key.format(getattr(config, key.attr))) or "-"
    return CrawlMeta(config.partitions, config.seen_buckets, rules)
