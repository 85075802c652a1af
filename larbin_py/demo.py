"""``python -m larbin_py --demo``: a real crawl of the built-in synthetic web.

The demo starts :mod:`larbin_py.sim` (HTTP on loopback IPs, DNS on a free
loopback port), points the configuration at it (start URLs, DNS server),
crawls it with the real engine and the stats server on, then checks the crawl
against the sim's own ground truth and prints both summaries.  No internet is
needed and nothing outside the configured saveDir and stateDir is written.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys

from .owner_only import make_private_dir, opener
from .robots import product_token
from .statelock import LOCK_NAME

__all__ = ["run_demo", "run_demo_workers", "demo_workers_main", "crawl_rules", "DEMO_MARKER"]

#: A file the demo leaves in its stateDir, so that a later demo may clear it.
DEMO_MARKER = ".larbin-demo"


def crawl_rules(config, seeds):
    """The sim's :class:`~larbin_py.sim.CrawlRules` matching ``config``."""
    from .sim import CrawlRules

    return CrawlRules(
        seeds=tuple(seeds),
        depth_in_site=config.depth_in_site,
        depth_by_site=config.depth_by_site,
        no_external_links=config.no_external_links,
        obey_robots=not config.ignore_robots,
        user_agent=product_token(config.user_agent),
        forbidden_extensions=tuple(config.forbidden_extensions),
        get_images=config.get_image,
        any_type=config.any_type,
        get_cgi=config.get_cgi,
        limit_to_domain=tuple(config.limit_to_domain),
        page_no_duplicate=config.page_no_duplicate,
        dynamic_pages=tuple(config.dynamic_pages),
        sitemaps=config.sitemaps,
        respect_noindex=config.respect_noindex,
        follow_canonical=config.follow_canonical,
        url_include=tuple(config.url_include),
        url_exclude=tuple(config.url_exclude),
    )


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _clear_demo_state(state_dir: str) -> bool:
    """Empty a stateDir left by an earlier demo; False if it holds a real crawl.
    The lock this process holds (larbin_py.statelock) stays."""
    names = [name for name in os.listdir(state_dir) if name != LOCK_NAME] if os.path.isdir(state_dir) else []
    if not names:
        return True
    if not os.path.exists(os.path.join(state_dir, DEMO_MARKER)):
        return False
    for name in names:
        path = os.path.join(state_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    return True


async def run_demo(config, *, hosts: int = 30, seed: int = 7, out=None) -> int:
    """Crawl a fresh synthetic web with ``config``; the process exit code."""
    from .engine import Engine
    from .runner import run_engine
    from .sim import Sim, SimConfig

    out = out if out is not None else sys.stderr
    if not _clear_demo_state(config.state_dir):
        print(f"larbin_py: stateDir {config.state_dir!r} holds a crawl that is not a demo; "
              "choose another stateDir for --demo", file=out)
        return 2
    make_private_dir(config.state_dir)
    open(os.path.join(config.state_dir, DEMO_MARKER), "w", opener=opener).close()

    agent = product_token(config.user_agent)
    sim_config = SimConfig(seed=seed, hosts=hosts, dns=True, robots_agent=agent, crawl_delay=(0.5, 1.0))
    async with Sim(sim_config) as sim:
        http_port = config.http_port
        if http_port and not _port_free(config.http_bind, http_port):
            http_port = 0  # 8081 is taken: let the system pick a port
        demo = config.replace(
            start_urls=tuple(sim.seeds),
            dns_servers=(("127.0.0.1", sim.dns_port),),
            private_networks="allow",  # the synthetic web lives on loopback
            # Depth counted per site (Larbin's depthBySite), deep enough for
            # every page of the sim; the spider-trap host stops at that depth.
            depth_by_site=True,
            depth_in_site=max(config.depth_in_site, sim.web.max_depth(True)),
            timeout_page=min(config.timeout_page, 3.0),
            connect_timeout=min(config.connect_timeout, 3.0),
            http_port=http_port,
        )
        print(f"larbin_py demo: a synthetic web of {len(sim.web.hosts)} hosts on {len(sim.ips)} loopback IPs "
              f"(HTTP port {sim.port}, DNS port {sim.dns_port}); crawling {len(demo.start_urls)} start URLs "
              f"with waitDuration {demo.wait_duration:g} s", file=out)
        engine = Engine(demo)
        if demo.http_port:
            engine.on_servers_started = lambda e: print(
                f"larbin_py demo: live stats at http://{demo.http_bind}:{e.http_server.port}/", file=out)
        code = await run_engine(engine)
        truth = sim.truth(crawl_rules(demo, sim.seeds))
        requested = set(sim.log.urls())
        hit = truth.must_request & requested
        wrong = truth.must_not_request & requested
        share = 100.0 * len(hit) / len(truth.must_request) if truth.must_request else 100.0
        print(f"larbin_py demo: ground truth: {len(hit)} of {len(truth.must_request)} URLs a correct crawl "
              f"requests were requested ({share:.1f} %), {len(wrong)} it must not request were", file=out)
        if demo.output_mode in ("mirror", "save", "warc"):
            print(f"larbin_py demo: pages saved under {os.path.abspath(demo.save_dir)}", file=out)
    return code


async def run_demo_workers(config, workers: int, *, hosts: int = 30, seed: int = 7, out=None,
                           zygote=None) -> int:
    """``--demo --workers N``: the synthetic web served by the launcher, crawled by N workers.

    As ``--demo`` (:func:`run_demo`), with the sim on the launcher's loop (it
    only serves pages; the workers crawl) and a private redis-server; the
    ground truth is checked against every request the sim saw, whichever
    worker sent it.
    """
    from .distributed.launcher import EXIT_USAGE, Launcher
    from .sim import Sim, SimConfig

    out = out if out is not None else sys.stderr
    if not _clear_demo_state(config.state_dir):
        print(f"larbin_py: stateDir {config.state_dir!r} holds a crawl that is not a demo; "
              "choose another stateDir for --demo", file=out)
        return EXIT_USAGE
    make_private_dir(config.state_dir)
    open(os.path.join(config.state_dir, DEMO_MARKER), "w", opener=opener).close()
    sim_config = SimConfig(seed=seed, hosts=hosts, dns=True, robots_agent=product_token(config.user_agent),
                           crawl_delay=(0.5, 1.0))
    async with Sim(sim_config) as sim:
        http_port = config.http_port
        if http_port and not _port_free(config.http_bind, http_port):
            http_port = 0
        demo = config.replace(
            start_urls=tuple(sim.seeds), dns_servers=(("127.0.0.1", sim.dns_port),), private_networks="allow",
            depth_by_site=True, depth_in_site=max(config.depth_in_site, sim.web.max_depth(True)),
            timeout_page=min(config.timeout_page, 3.0), connect_timeout=min(config.connect_timeout, 3.0),
            http_port=http_port, redis_url=config.redis_url or "auto")
        print(f"larbin_py demo: a synthetic web of {len(sim.web.hosts)} hosts on {len(sim.ips)} loopback IPs "
              f"(HTTP port {sim.port}, DNS port {sim.dns_port}); crawling {len(demo.start_urls)} start URLs "
              f"with {workers} workers, waitDuration {demo.wait_duration:g} s", file=out)
        code = await Launcher(demo, workers, out=out, zygote=zygote).run()
        truth = sim.truth(crawl_rules(demo, sim.seeds))
        requested = set(sim.log.urls())
        hit = truth.must_request & requested
        wrong = truth.must_not_request & requested
        share = 100.0 * len(hit) / len(truth.must_request) if truth.must_request else 100.0
        print(f"larbin_py demo: ground truth: {len(hit)} of {len(truth.must_request)} URLs a correct crawl "
              f"requests were requested ({share:.1f} %), {len(wrong)} it must not request were", file=out)
    return code


def demo_workers_main(config, workers: int, cli_main=None) -> int:
    """``--demo --workers N`` on uvloop: the process exit code (``cli_main``: see
    larbin_py.distributed.launcher.launch_main)."""
    from .distributed.launcher import run_with_zygote

    return run_with_zygote(lambda zygote: run_demo_workers(config, workers, zygote=zygote), cli_main)
