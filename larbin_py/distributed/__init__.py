"""The distributed mode: one crawl over N worker processes coordinated through Redis.

See docs/distributed.md (what is built) and docs/distributed-design.md (why).  Nothing here is
imported by a single-process crawl (no ``redisUrl``).
"""
