"""The Scrapy peer of the benchmarks (runs in bench's own venv, never ours).

    python scrapy_crawl.py JOB.json

JOB.json: ``start_urls``, ``hosts`` (host name -> IP: the sim's and nginx's
virtual hosts live on loopback IPs, so a resolver from this map replaces
DNS), ``settings`` (Scrapy settings merged over ours), ``save_dir`` (write
each body there, as a crawler that keeps pages must; null: do not) and
``out`` (where the figures go, as JSON).

The spider is the usual CrawlSpider with a LinkExtractor over the hosts of
the map, robots.txt obeyed.  Figures: pages, wall and CPU seconds, peak RSS,
and the download latency of every response (Scrapy's round-trip time).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time

from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.resolver import dnscache
from scrapy.spiders import CrawlSpider, Rule
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

JOB = json.load(open(sys.argv[1]))
HOSTS: dict[str, str] = JOB["hosts"]


@implementer(IResolverSimple)
class MapResolver:
    """Resolves the job's host names from its map (no DNS server needed)."""

    def __init__(self, reactor):
        self.reactor = reactor

    @classmethod
    def from_crawler(cls, crawler, reactor):
        return cls(reactor)

    def install_on_reactor(self):
        self.reactor.installResolver(self)

    def getHostByName(self, name, timeout=()):
        ip = HOSTS.get(name.lower())
        if ip is None:
            return defer.fail(DNSLookupError(name))
        dnscache[name] = ip  # what CONCURRENT_REQUESTS_PER_IP keys its slots on
        return defer.succeed(ip)


class BenchSpider(CrawlSpider):
    name = "bench"
    start_urls = JOB["start_urls"]
    allowed_domains = sorted(HOSTS)
    # Not LinkExtractor(allow_domains=...): it compares the netloc, port included;
    # allowed_domains (the offsite middleware) compares host names.
    rules = (Rule(LinkExtractor(), callback="parse_item", follow=True, process_links="http_only"),)
    pages = 0
    latencies: list[float] = []

    def http_only(self, links):
        """Only http(s) links, as larbin_py (ftp: and the like are not crawled)."""
        return [link for link in links if link.url.startswith(("http://", "https://"))]

    def parse_start_url(self, response):
        return self.parse_item(response)

    def parse_item(self, response):
        BenchSpider.pages += 1
        latency = response.meta.get("download_latency")
        if latency is not None:
            BenchSpider.latencies.append(latency)
        save_dir = JOB.get("save_dir")
        if save_dir:
            name = hashlib.sha1(response.url.encode()).hexdigest()
            path = os.path.join(save_dir, name[:2], name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "wb") as f:
                f.write(response.body)
            os.replace(path + ".tmp", path)
        return None


def peak_rss_mb() -> float:
    """VmHWM: this process's peak RSS since exec (ru_maxrss would count the forked parent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    settings = {
        "LOG_LEVEL": os.environ.get("SCRAPY_LOG_LEVEL", "ERROR"),
        "ROBOTSTXT_OBEY": True,
        "DNS_RESOLVER": "__main__.MapResolver",
        "TELNETCONSOLE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "RETRY_ENABLED": True,
        "DEPTH_LIMIT": 0,
        "USER_AGENT": "larbin_py-bench-scrapy",
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
    }
    settings.update(JOB.get("settings", {}))
    process = CrawlerProcess(settings=settings)
    process.crawl(BenchSpider)
    t0, c0 = time.monotonic(), time.process_time()
    process.start()
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    with open(JOB["out"], "w") as f:
        json.dump({
            "pages": BenchSpider.pages,
            "wall_s": wall,
            "cpu_s": cpu,
            "peak_rss_mb": peak_rss_mb(),
            "latencies": BenchSpider.latencies,
        }, f)


if __name__ == "__main__":
    main()
