"""The distributed mode: one crawl over N worker processes coordinated through Redis.

See docs/distributed.md and ../shared/DISTRIBUTED.md.  Nothing here is
imported by a single-process crawl (no ``redisUrl``).
"""
