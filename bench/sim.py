"""The synthetic web's own speed: how fast it is generated and served, nginx the peer.

    python bench/sim.py [--quick] [--hosts H] [--pages P] [--clients C] [--rounds R]

The end-to-end tests and the other benchmarks stand on ``larbin_py.sim``; a
slow sim would make them measure the sim.  This benchmark is where its speed
is measured (the tests assert only what it serves, never how fast).

* generation: ``SimWeb.generate`` of the tests' 300-host web
  (``SimConfig(hosts=300, seed=11)``) and of this benchmark's web;
* serving: the web of bench/throughput.py (``--hosts`` x ``--pages`` pages of
  10-60 KB, 4 hosts an IP) fetched whole, every 200 page ``--copies`` times,
  by ``--clients`` keep-alive clients (larbin_py/sim/client.py, each
  keeping one connection per IP) on this process's uvloop, from

  - the sim on the same loop as the clients (as the sim's own tests run it);
  - the sim in a process of its own (bench/simproc.py, as the e2e
    benchmarks run it);
  - nginx serving the same web exported as static files (the peer).

  Figures: pages/s, the clients' CPU (this process), the server's CPU over
  the fetches (``/proc/PID/stat`` of every process below this one: the sim
  child, or nginx's master and workers; not their start), its CPU per page.

Rounds run turn by turn (sim, sim process, nginx, then again); medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from common import cpu_seconds, descendants, median, process_cpu, report, table  # noqa: E402
from simproc import SimProcess  # noqa: E402
from throughput import bench_web, served  # noqa: E402

from larbin_py.sim import Sim, SimConfig, SimWeb  # noqa: E402
from larbin_py.sim.client import Client  # noqa: E402
from larbin_py.sim.urls import split_url  # noqa: E402


def descendants_cpu() -> float:
    """CPU seconds so far of every process below this one (the server under test)."""
    return sum(process_cpu(pid) for pid in descendants(os.getpid()))


def work_of(web: SimWeb, copies: int) -> list[tuple[str, str, str]]:
    """(ip, host, path) of every 200 page, ``copies`` times."""
    pages = [(h.ip, h.name, pq) for h in web.hosts.values() for pq, r in h.resources.items() if r.status == 200]
    return pages * copies


async def fetch_all(work: list[tuple[str, str, str]], port: int, clients: int) -> tuple[int, int]:
    """Fetch ``work`` with ``clients`` clients; (pages answered 200, body bytes)."""
    async def client(items):
        conns: dict[str, Client] = {}
        ok = size = 0
        try:
            for ip, host, pq in items:
                c = conns.get(ip)
                if c is None:
                    c = conns[ip] = await Client.connect(ip, port)
                r = await c.get(host, pq)
                ok += r.status == 200
                size += len(r.body)
        finally:
            for c in conns.values():
                await c.close()
        return ok, size

    done = await asyncio.gather(*(client(work[i::clients]) for i in range(clients)))
    return sum(d[0] for d in done), sum(d[1] for d in done)


async def timed(work, port: int, clients: int) -> dict:
    c0, s0, w0 = cpu_seconds(), descendants_cpu(), time.perf_counter()
    ok, size = await fetch_all(work, port, clients)
    wall = time.perf_counter() - w0
    return {"pages": ok, "bytes": size, "wall_s": wall, "pages_per_s": ok / wall, "client_cpu_s": cpu_seconds() - c0,
            "server_cpu_s": descendants_cpu() - s0}


async def serve_in_loop(cfg: SimConfig, work, clients: int) -> dict:
    async with Sim(cfg) as sim:
        res = await timed(work, sim.port, clients)
        assert len(sim.log.requests) == len(work), (len(sim.log.requests), len(work))
    res["server_cpu_s"] = None  # on the clients' loop: counted in theirs
    return res


async def serve_in_process(cfg: SimConfig, work, clients: int) -> dict:
    async with SimProcess(cfg) as sp:
        res = await timed(work, split_url(sp.seeds[0])[1], clients)
    assert sp.result.get("requests") == len(work), (sp.result.get("requests"), len(work))
    return res


async def serve_nginx(web: SimWeb, port: int, work, clients: int) -> dict:
    async with served(web, port, prefix="larbin-bench-sim-"):
        return await timed(work, port, clients)


def generation(cfg: SimConfig, rounds: int) -> dict:
    times, pages = [], 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        web = SimWeb.generate(cfg, 8080)
        times.append(time.perf_counter() - t0)
        pages = web.page_count()
    s = median(times)
    return {"hosts": len(web.hosts), "pages": pages, "seconds": s, "pages_per_s": pages / s}


async def main_async(args) -> int:
    web, port = bench_web(args.hosts, args.pages)
    cfg = web.config
    work = work_of(web, args.copies)
    gen_tests = generation(SimConfig(hosts=300, seed=11), args.rounds)
    gen_bench = generation(cfg, args.rounds)

    kinds = {"sim, same loop": lambda: serve_in_loop(cfg, work, args.clients),
             "sim, own process": lambda: serve_in_process(cfg, work, args.clients),
             "nginx (peer)": lambda: serve_nginx(web, port, work, args.clients)}
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for name, run in kinds.items():
            res = await run()
            if res["pages"] != len(work):
                print(f"bench: {name} answered {res['pages']} of {len(work)} pages with 200", file=sys.stderr)
                return 1
            runs[name].append(res)

    def med(name, key):
        vals = [r[key] for r in runs[name] if r[key] is not None]
        return median(vals) if vals else None

    peer = med("nginx (peer)", "pages_per_s")
    rows, figures = [], {}
    for name in kinds:
        server = med(name, "server_cpu_s")
        pps = med(name, "pages_per_s")
        row = {"pages_per_s": pps, "client_cpu_s": med(name, "client_cpu_s"), "server_cpu_s": server,
               "server_us_per_page": None if server is None else server / len(work) * 1e6,
               "vs_nginx": pps / peer}
        figures[name.split(" (")[0].replace(", ", "_").replace(" ", "_")] = row
        rows.append([name, len(work), med(name, "wall_s"), pps, row["client_cpu_s"], server,
                     row["server_us_per_page"], row["vs_nginx"]])

    print(table(f"sim serving: {len(web.hosts)} hosts, {len(work):,} GETs of 200 pages "
                f"({runs['nginx (peer)'][0]['bytes'] // len(work):,} B on average), "
                f"{args.clients} keep-alive clients ({args.rounds} rounds, medians)",
                ["server", "pages", "wall s", "pages/s", "client CPU s", "server CPU s", "server us/page",
                 "vs nginx"], rows))
    print()
    print(table("sim generation (medians)", ["web", "hosts", "pages", "seconds", "pages/s"],
                [["tests' SimConfig(hosts=300, seed=11)", gen_tests["hosts"], gen_tests["pages"],
                  gen_tests["seconds"], gen_tests["pages_per_s"]],
                 ["this benchmark's web", gen_bench["hosts"], gen_bench["pages"], gen_bench["seconds"],
                  gen_bench["pages_per_s"]]]))
    report("sim", {"serving": figures, "requests": len(work), "clients": args.clients, "rounds": args.rounds,
                   "generation_tests_300_hosts": gen_tests, "generation_bench_web": gen_bench})
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small web, one round (seconds)")
    p.add_argument("--hosts", type=int, default=100)
    p.add_argument("--pages", type=int, default=30)
    p.add_argument("--copies", type=int, default=3, help="times each page is fetched")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if args.quick:
        args.hosts, args.pages, args.copies, args.rounds = 20, 10, 2, 1
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
