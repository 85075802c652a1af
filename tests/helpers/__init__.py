"""What several test files share: the crawls of the synthetic web and their
checks (:mod:`.crawl`), the distributed mode's workers and checks
(:mod:`.distributed`), a scripted HTTP server (:mod:`.http_server`), crawls
in a process of their own and their state (:mod:`.state`), raw HTTP to the
stats server and headless Chromium (:mod:`.web`), a private ZooKeeper
(:mod:`.zookeeper`) and a Redis Sentinel set (:mod:`.sentinel`).

Test modules import from here, never from one another.
"""
