"""Flow control against servers with a capacity: fixed cap vs adaptive vs Scrapy.

    python bench/flow_control.py [--quick] [--rounds N] [--no-peer]

The sim serves ``--servers`` loopback IPs of ``--sites`` sites each; each IP
is a server of ``--capacity`` workers with a base answer time of ``--base``
seconds (the sim's load model: beyond its capacity a server gets no faster,
only slower).  The same crawl (waitDuration 0, up to 100 connections per IP,
one per site) runs with a fixed pagesConnexions of 100, with flow control
on, and with Scrapy's AutoThrottle (its own venv; its per-site target
concurrency set from the true capacity, a hint it would not have in
practice), turn by turn (A, B, C, A, B, C...).  The per-server pace is off
(serverRttFactor 0) to measure the global controller alone.

The sim runs in a child process (bench/simproc.py), so the crawler's round
trips do not include the time its own loop would spend serving pages.
Figures per setting (median over rounds): pages/s, p50 and p95 round-trip
time (request sent to end of headers for larbin_py; Scrapy's
download_latency), p50 and p95 of the answer times the servers' load gave
(the servers' own view), the servers' peak in-flight.  Aim: flow control keeps at
least 90 % of the fixed setting's throughput at a p95 at most twice the
unloaded round-trip time, and beats AutoThrottle.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

from common import median, peer_python, percentile, report, table

from larbin_py.config import parse_config_text
from larbin_py.engine import Engine
from larbin_py.sim import SimConfig
from simproc import SimProcess


def sim_config(args) -> SimConfig:
    ips = [f"127.0.1.{i + 1}" for i in range(args.servers)]
    return SimConfig(seed=23, hosts=args.servers * args.sites, hosts_per_ip=args.sites,
                     pages_per_host=(args.pages, args.pages), dns=True, extras=False, trap=False,
                     robots_mix={"absent": 1.0}, p_redirect=0.0, p_loop=0.0, p_missing=0.0,
                     robots_agent="larbin_py", load={ip: (args.base, 0.0, args.capacity) for ip in ips})


async def run_larbin(args, flow: bool, work: str) -> dict:
    async with SimProcess(sim_config(args)) as sim:
        base = parse_config_text("", require_start_urls=False)
        config = base.replace(
            start_urls=tuple(sim.seeds), dns_servers=(("127.0.0.1", sim.dns_port),),
            private_networks="allow",
            save_dir=os.path.join(work, "save"), state_dir=os.path.join(work, "state"),
            http_port=0, output_mode="none", wait_duration=0.0, connexions_per_ip=100,
            pages_connexions=100, depth_in_site=10, get_cgi=True, forbidden_extensions=(),
            timeout_page=60.0, flow_control=flow, min_connexions=2, server_rtt_factor=0.0,
            rtt_min=1.5 * args.base, rtt_max=4 * args.base, rtt_interval=1.0,
        )
        engine = Engine(config, out=open(os.devnull, "w"))
        engine.counts.rtts = []  # keep every round-trip time, not the last 512
        t0 = time.monotonic()
        summary = await engine.run()
        wall = time.monotonic() - t0
    return {"pages": summary.pages, "pages_s": summary.pages / wall, **rtts(engine.counts.rtts), **served(sim.result)}


async def run_scrapy(args, python: str, work: str) -> dict:
    async with SimProcess(sim_config(args)) as sim:
        job = {
            "start_urls": sim.seeds,
            "hosts": sim.resolve_map,
            "save_dir": None,
            "out": os.path.join(work, "scrapy.json"),
            "settings": {
                "CONCURRENT_REQUESTS": 100,
                "CONCURRENT_REQUESTS_PER_DOMAIN": 100,
                "CONCURRENT_REQUESTS_PER_IP": 0,
                "DOWNLOAD_DELAY": 0,
                "AUTOTHROTTLE_ENABLED": True,
                "AUTOTHROTTLE_START_DELAY": args.base,
                "AUTOTHROTTLE_TARGET_CONCURRENCY": max(0.1, args.capacity / args.sites),
                "DOWNLOAD_TIMEOUT": 60,
            },
        }
        path = os.path.join(work, "job.json")
        with open(path, "w") as f:
            json.dump(job, f)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "scrapy_crawl.py")
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(python, script, path)
        await proc.wait()
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"scrapy exited with {proc.returncode}")
        with open(job["out"]) as f:
            res = json.load(f)
    return {"pages": res["pages"], "pages_s": res["pages"] / wall, **rtts(res["latencies"]), **served(sim.result)}


def rtts(samples: list[float]) -> dict:
    """The crawler's own round-trip times (they include its event loop's lag)."""
    return {"rtt_p50": percentile(samples, 0.5), "rtt_p95": percentile(samples, 0.95)}


def served(result: dict) -> dict:
    """The servers' view: answer times their load gave, and the peak in flight."""
    delays = result["load_delays"]
    return {"server_p50": percentile(delays, 0.5), "server_p95": percentile(delays, 0.95),
            "peak_in_flight": sum(result["peak_in_flight_ip"].values())}


async def main_async(args) -> None:
    python = None if args.no_peer else peer_python("scrapy")
    settings = [("fixed 100", "fixed"), ("flow control", "flow")]
    if python:
        settings.append(("scrapy autothrottle", "scrapy"))
    runs: dict[str, list[dict]] = {key: [] for _label, key in settings}
    for _round in range(args.rounds):
        for _label, key in settings:
            with tempfile.TemporaryDirectory(prefix="larbin-bench-") as work:
                if key == "scrapy":
                    runs[key].append(await run_scrapy(args, python, work))
                else:
                    runs[key].append(await run_larbin(args, key == "flow", work))
    figures = {}
    rows = []
    for label, key in settings:
        f = {name: median([r[name] for r in runs[key]]) for name in runs[key][0]}
        figures[key] = f
        rows.append([label, int(f["pages"]), f["pages_s"], f["rtt_p50"], f["rtt_p95"], f["server_p50"],
                     f["server_p95"], int(f["peak_in_flight"])])
    capacity = args.servers * args.capacity
    print(table(f"flow control: {args.servers} servers x capacity {args.capacity} ({args.sites} sites each), "
                f"base RTT {args.base:g} s "
                f"({args.rounds} rounds, medians)",
                ["setting", "pages", "pages/s", "p50 RTT s", "p95 RTT s", "server p50 s", "server p95 s",
                 "peak in flight"], rows))
    fixed, flow = figures["fixed"], figures["flow"]
    ratio = flow["pages_s"] / fixed["pages_s"] if fixed["pages_s"] else None
    p95_ratio = flow["rtt_p95"] / args.base if flow["rtt_p95"] else None
    print(f"flow/fixed throughput {ratio:.2f} (aim >= 0.90); flow p95 / unloaded RTT {p95_ratio:.2f} "
          f"(aim <= 2; as the servers saw it {flow['server_p95'] / args.base:.2f}); capacity {capacity}")
    if "scrapy" in figures:
        print(f"flow/scrapy throughput {flow['pages_s'] / figures['scrapy']['pages_s']:.2f}")
    report("flow_control", {"settings": figures, "flow_over_fixed": ratio, "flow_p95_over_base": p95_ratio,
                            "flow_server_p95_over_base": flow["server_p95"] / args.base,
                            "capacity": capacity, "rounds": args.rounds, "quick": args.quick})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a few seconds: small web, one round, no peer")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--servers", type=int, default=4)
    p.add_argument("--sites", type=int, default=100, help="sites per server")
    p.add_argument("--pages", type=int, default=10, help="pages per site")
    p.add_argument("--capacity", type=int, default=4)
    p.add_argument("--base", type=float, default=0.05)
    p.add_argument("--no-peer", action="store_true")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.servers, args.sites, args.pages, args.no_peer = 1, 2, 30, 5, True
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
