"""The polite regime: how close to the politeness bound a crawl runs.

    python bench/politeness.py [--quick] [--hosts 2000] [--ips 50] [--wait 1] [--no-peer]

The sim serves ``--hosts`` hosts on ``--ips`` loopback IPs, ``--pages``
pages each, every answer after ``--latency`` seconds.  With waitDuration
``--wait`` and one connection per IP, the crawl can make at most one request
per IP per wait: the crawl cannot be shorter than the busiest IP's requests
one wait apart (the bound), nor faster than ``ips / wait`` requests per
second.  larbin_py
(``python -m larbin_py``) and Scrapy with the equivalent settings
(DOWNLOAD_DELAY = wait, one request per IP at a time, no random delay) crawl
it in the same run.  Figures: requests, wall s, requests/s, the share of
the bound (aim >= 95 %), requests/s over ``ips / wait``, and the smallest
gap between two requests to one IP as the server saw it (must be >= wait).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

from common import peer_python, report, table

from larbin_py.config import format_config, parse_config_text
from larbin_py.sim import Fault, Sim, SimConfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def sim_config(args) -> SimConfig:
    return SimConfig(seed=31, hosts=args.hosts, hosts_per_ip=max(1, args.hosts // args.ips),
                     pages_per_host=(args.pages, args.pages), dns=True, extras=False, trap=False,
                     robots_mix={"absent": 1.0}, p_redirect=0.0, p_loop=0.0, p_missing=0.0,
                     p_nonhtml=0.0, robots_agent="larbin_py",
                     faults=[Fault("latency", 1.0, transient=True, delay=args.latency)])


def measured(sim: Sim, wall: float, args) -> dict:
    """The crawl's pace against the bound politeness sets.

    Each IP takes at most one request per wait, so the crawl cannot take less
    than ``(n - 1) * wait`` where ``n`` is the request count of its busiest
    IP: ``share_of_bound`` is that time over the time the crawl took (first
    to last request).  ``share_of_ips_rate`` is the older, stricter figure,
    requests/s over ``ips / wait``: it also counts against the crawler that
    the sim gives some IPs more requests than others.
    """
    requests = len(sim.log.requests)
    starts = sim.log.starts_by_ip()
    gaps = [sim.log.min_gap(s) for s in starts.values() if len(s) > 1]
    first = min(r.t for r in sim.log.requests)
    last = max(r.t for r in sim.log.requests)
    span = max(last - first, 1e-9)
    busiest = max(len(s) for s in starts.values())
    return {"requests": requests, "wall_s": wall, "requests_s": requests / span,
            "share_of_bound": (busiest - 1) * args.wait / span,
            "share_of_ips_rate": requests / span / (len(starts) / args.wait),
            "min_gap_s": min(gaps) if gaps else None, "ips": len(starts), "busiest_ip_requests": busiest,
            "mean_ip_requests": requests / len(starts)}


async def run_larbin(args, work: str) -> dict:
    async with Sim(sim_config(args)) as sim:
        config = parse_config_text("", require_start_urls=False).replace(
            start_urls=tuple(sim.seeds), dns_servers=(("127.0.0.1", sim.dns_port),),
            private_networks="allow",
            save_dir=os.path.join(work, "save"), state_dir=os.path.join(work, "state"), http_port=0,
            output_mode="none", wait_duration=args.wait, pages_connexions=max(100, 2 * args.ips),
            depth_in_site=sim.web.max_depth(True) + 1, depth_by_site=True, get_cgi=True,
            forbidden_extensions=())
        conf = os.path.join(work, "larbin.conf")
        with open(conf, "w") as f:
            f.write(format_config(config))
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "larbin_py", "-c", conf, cwd=work,
                                                    stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.DEVNULL)
        if await proc.wait() != 0:
            raise RuntimeError("larbin_py failed")
        return measured(sim, time.monotonic() - t0, args)


async def run_scrapy(args, python: str, work: str) -> dict:
    async with Sim(sim_config(args)) as sim:
        job = {"start_urls": sim.seeds, "hosts": sim.resolve_map(), "save_dir": None,
               "out": os.path.join(work, "scrapy.json"),
               "settings": {"DOWNLOAD_DELAY": args.wait, "RANDOMIZE_DOWNLOAD_DELAY": False,
                            "CONCURRENT_REQUESTS_PER_IP": 1, "CONCURRENT_REQUESTS": max(100, 2 * args.ips),
                            "AUTOTHROTTLE_ENABLED": False,
                            # its default queue refuses CONCURRENT_REQUESTS_PER_IP
                            "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue"}}
        path = os.path.join(work, "job.json")
        with open(path, "w") as f:
            json.dump(job, f)
        t0 = time.monotonic()
        err = open(os.path.join(work, "scrapy.err"), "w+")
        proc = await asyncio.create_subprocess_exec(python, os.path.join(HERE, "peers", "scrapy_crawl.py"), path,
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=err)
        code = await proc.wait()
        err.seek(0)
        if code != 0 or not sim.log.requests:
            raise RuntimeError(f"scrapy failed ({code}): {err.read()[-3000:]}")
        return measured(sim, time.monotonic() - t0, args)


async def main_async(args) -> None:
    python = None if args.no_peer else peer_python("scrapy")
    figures, rows = {}, []
    for label, key in [("larbin_py", "larbin")] + ([("scrapy", "scrapy")] if python else []):
        with tempfile.TemporaryDirectory(prefix="larbin-bench-") as work:
            f = await (run_larbin(args, work) if key == "larbin" else run_scrapy(args, python, work))
        figures[key] = f
        print(f"politeness: {label} done: {f['requests']} requests in {f['wall_s']:.0f} s, "
              f"{100 * f['share_of_bound']:.1f} % of the bound", file=sys.stderr, flush=True)
        rows.append([label, f["requests"], f["wall_s"], f["requests_s"], 100 * f["share_of_bound"],
                     100 * f["share_of_ips_rate"], f["min_gap_s"]])
    print(table(f"politeness: {args.hosts} hosts on {args.ips} IPs, wait {args.wait:g} s, "
                f"latency {args.latency:g} s; at most {args.ips / args.wait:g} requests/s",
                ["crawler", "requests", "wall s", "requests/s", "% of bound", "% of ips/wait", "min gap per IP s"],
                rows))
    report("politeness", {"crawlers": figures, "hosts": args.hosts, "ips": args.ips, "wait": args.wait,
                          "latency": args.latency, "quick": args.quick})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="100 hosts on 10 IPs, wait 0.2 s, no peer")
    p.add_argument("--hosts", type=int, default=2000)
    p.add_argument("--ips", type=int, default=50)
    p.add_argument("--pages", type=int, default=20)
    p.add_argument("--wait", type=float, default=1.0)
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--no-peer", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.hosts, args.ips, args.pages, args.wait, args.no_peer = 100, 10, 3, 0.2, True
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main_async(args))


if __name__ == "__main__":
    main()
