"""Standalone sim: ``python -m larbin_py.sim [serve options]`` or ``... export DIR``.

Serve (default): starts HTTP (every host IP, one port) and DNS (127.0.0.1),
prints where they listen and a few seed URLs, runs until SIGINT/SIGTERM.
Export: writes the web as static files and an nginx.conf (see
:mod:`larbin_py.sim.export`); pass the port nginx should listen on.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from .web import DEFAULT_ROBOTS_MIX, SimConfig, SimWeb


def _range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def _mix(text: str) -> dict[str, float]:
    out = {}
    for part in text.split(","):
        name, _, weight = part.partition("=")
        if name not in DEFAULT_ROBOTS_MIX:
            raise argparse.ArgumentTypeError(f"unknown robots profile {name!r}")
        out[name] = float(weight or 1)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m larbin_py.sim", description=__doc__.split("\n")[0])
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=0, help="HTTP port (0: a free one)")
    p.add_argument("--dns-port", type=int, default=0, help="DNS port (0: a free one)")
    p.add_argument("--no-dns", action="store_true")
    p.add_argument("--ip-base", default="127.0.1.1")
    p.add_argument("--hosts-per-ip", type=int, default=4)
    p.add_argument("--pages", type=_range, default=(3, 10), help="pages per host, MIN-MAX")
    p.add_argument("--links", type=_range, default=(2, 6), help="extra links per page, MIN-MAX")
    p.add_argument("--body", type=_range, default=(400, 3000), help="body bytes, MIN-MAX")
    p.add_argument("--robots", type=_mix, default=None, help="profile mix, e.g. absent=3,rules=1")
    p.add_argument("--no-trap", action="store_true")
    p.add_argument("--no-extras", action="store_true")
    return p


def config_from(args: argparse.Namespace) -> SimConfig:
    return SimConfig(seed=args.seed, hosts=args.hosts, port=args.port, dns=not args.no_dns,
                     dns_port=args.dns_port, ip_base=args.ip_base, hosts_per_ip=args.hosts_per_ip,
                     pages_per_host=args.pages, links_per_page=args.links, body_size=args.body,
                     robots_mix=args.robots, trap=not args.no_trap, extras=not args.no_extras)


async def serve(config: SimConfig) -> None:
    from .facade import Sim
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Sim(config) as sim:
        ips = sim.ips
        print(f"sim: {len(sim.web.hosts)} hosts, {sim.web.page_count()} pages, "
              f"seed {config.seed}", flush=True)
        print(f"http: port {sim.port} on {len(ips)} IPs {ips[0]}..{ips[-1]}", flush=True)
        if sim.dns is not None:
            print(f"dns: 127.0.0.1:{sim.dns_port}", flush=True)
        for url in sim.seeds[:5]:
            print(f"seed: {url}", flush=True)
        print("ready", flush=True)
        await stop.wait()
    print(f"stopped after {len(sim.log.requests)} requests", flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "export":
        p = _parser()
        p.prog += " export"
        p.add_argument("dir")
        args = p.parse_args(argv[1:])
        from .export import export
        port = args.port or 8080
        web = SimWeb.generate(config_from(args), port)
        counts = export(web, args.dir)
        print(f"exported {counts['hosts']} hosts, {counts['files']} files, "
              f"{counts['redirects']} redirects to {args.dir} (port {port})")
        print(f"check: nginx -t -p {args.dir} -e {args.dir}/logs/error.log -c {args.dir}/nginx.conf")
        return 0
    args = _parser().parse_args(argv)
    try:
        import uvloop
        uvloop.run(serve(config_from(args)))
    except ImportError:  # pragma: no cover - uvloop is a dependency
        asyncio.run(serve(config_from(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
