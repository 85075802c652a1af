"""Analysis beside the loop (issue 22): ``python bench/analysis.py [--quick]``.

Two measurements, each a table, then one JSON line:

1. How a page's body reaches an analysis process -- a pipe (the body
   written through it), shared memory (copied into a ring the child maps)
   or the spool file (``write()`` to a file in stateDir, the child
   ``pread``s it; what larbin_py does) -- as the loop's CPU per page and
   the wall time per page, on bodies of the sim's sizes.
2. The same crawl (a sim web exported to nginx, as bench/throughput.py)
   with ``analysisWorkers`` 0 (inline) and N, turn by turn in one sitting:
   pages, wall s, pages/s, pages per CPU-second (the crawler and its
   analysis processes), the loop process's own CPU per page, and the share
   of the loop's CPU per page moved to the analysis processes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time

from common import median, report, table
from throughput import NGINX, free_port, run_child

from larbin_py.config import format_config, parse_config_text
from larbin_py.sim.dns import SimDNSServer
from larbin_py.sim.export import export
from larbin_py.sim.web import SimConfig, SimWeb

CHILD = r'''
import os, sys
from multiprocessing import shared_memory
mode = sys.argv[1]
inp, out = sys.stdin.buffer, sys.stdout.buffer
if mode == "shm":
    shm = shared_memory.SharedMemory(name=sys.argv[2])
    from multiprocessing import resource_tracker
    resource_tracker.unregister(shm._name, "shared_memory")  # the parent unlinks it
if mode == "spool":
    fd = os.open(sys.argv[2], os.O_RDONLY)
total = 0
while True:
    line = inp.readline()
    if not line:
        break
    if mode == "pipe":
        n = int(line)
        data = inp.read(n)
    else:
        off, n = map(int, line.split())
        data = os.pread(fd, n, off) if mode == "spool" else bytes(shm.buf[off:off + n])
    total += len(data)
    out.write(b"k\n")
    out.flush()
'''


def transport(mode: str, bodies: list[bytes], work: str) -> dict:
    """Send every body to a child the ``mode`` way; the sender's CPU and the wall per page."""
    args = [sys.executable, "-c", CHILD, mode]
    shm = None
    if mode == "shm":
        from multiprocessing import shared_memory

        shm = shared_memory.SharedMemory(create=True, size=sum(len(b) for b in bodies))
        args.append(shm.name)
    spool = os.path.join(work, "spool.bin")
    fd = os.open(spool, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if mode == "spool":
        args.append(spool)
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    off = 0
    c0, t0 = time.process_time(), time.perf_counter()
    for body in bodies:
        n = len(body)
        if mode == "pipe":
            proc.stdin.write(b"%d\n" % n + body)
        elif mode == "shm":
            shm.buf[off:off + n] = body
            proc.stdin.write(b"%d %d\n" % (off, n))
        else:
            os.write(fd, body)
            proc.stdin.write(b"%d %d\n" % (off, n))
        proc.stdin.flush()
        off += n
        proc.stdout.readline()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    proc.stdin.close()
    proc.wait()
    os.close(fd)
    if shm is not None:
        shm.close()
        shm.unlink()
    return {"loop_cpu_us": cpu / len(bodies) * 1e6, "wall_us": wall / len(bodies) * 1e6}


def crawl(web: SimWeb, dns_port: int, work: str, workers: int) -> dict:
    config = parse_config_text("", require_start_urls=False).replace(
        start_urls=tuple(web.seeds), dns_servers=(("127.0.0.1", dns_port),), save_dir=os.path.join(work, "save"),
        private_networks="allow", state_dir=os.path.join(work, "state"), http_port=0, output_mode="mirror",
        wait_duration=0.0, depth_in_site=web.max_depth(True) + 1, depth_by_site=True, get_cgi=True,
        pages_connexions=100, timeout_page=30.0, forbidden_extensions=(), analysis_workers=workers)
    conf = os.path.join(work, "larbin.conf")
    with open(conf, "w") as f:
        f.write(format_config(config))
    res = run_child([sys.executable, "-m", "larbin_py", "-c", conf], work)
    m = re.search(r"pages fetched\s+(\d+)", res["stderr"])
    if res["code"] != 0 or m is None:
        raise RuntimeError(f"larbin_py failed ({res['code']}): {res['stderr'][-2000:]}")
    res["pages"] = int(m.group(1))
    a = re.search(r"analysis: .*, ([0-9.]+) CPU s", res["stderr"])
    res["analysis_cpu_s"] = float(a.group(1)) if a else 0.0
    res["loop_cpu_s"] = res["cpu_s"] - res["analysis_cpu_s"]  # wait4 counts the reaped analysis processes
    return res


async def crawls(args) -> dict:
    ip_base = "127.0.6.1"
    port = free_port(ip_base)
    cfg = SimConfig(seed=12, hosts=args.hosts, pages_per_host=(args.pages, args.pages), body_size=(10_000, 60_000),
                    links_per_page=(30, 150), hosts_per_ip=4, ip_base=ip_base, extras=False, trap=False,
                    p_loop=0.0, robots_mix={"absent": 3.0, "rules": 1.0, "allow": 1.0}, robots_agent="larbin_py")
    web = SimWeb.generate(cfg, port)
    runs: dict[int, list[dict]] = {w: [] for w in args.workers}
    with tempfile.TemporaryDirectory(prefix="larbin-bench-web-") as site_dir:
        os.chmod(site_dir, 0o755)
        export(web, site_dir)
        nginx = subprocess.Popen([NGINX, "-p", site_dir, "-e", os.path.join(site_dir, "logs", "error.log"),
                                  "-c", os.path.join(site_dir, "nginx.conf"), "-g", "daemon off;"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dns = SimDNSServer(web.dns_records(), host="127.0.0.1", port=0)
        await dns.start()
        try:
            import socket

            for _ in range(500):
                try:
                    socket.create_connection((web.hosts["h0.sim.test"].ip, port), timeout=1).close()
                    break
                except OSError:
                    await asyncio.sleep(0.02)
            loop = asyncio.get_running_loop()
            for _round in range(args.rounds):
                for w in args.workers:  # turn by turn: the machine's drift hits every setting alike
                    with tempfile.TemporaryDirectory(prefix="larbin-bench-") as work:
                        runs[w].append(await loop.run_in_executor(None, crawl, web, dns.port, work, w))
        finally:
            await dns.close()
            nginx.terminate()
            nginx.wait()
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small web, one round (CI: the script works)")
    ap.add_argument("--hosts", type=int, default=40)
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    if args.quick:
        args.hosts, args.pages, args.rounds, args.workers = 4, 20, 1, [0, 1]
    web = SimWeb.generate(SimConfig(seed=5, hosts=4, pages_per_host=(50, 50), body_size=(10_000, 60_000),
                                    extras=False, trap=False), 8080)
    bodies = [r.body for h in web.hosts.values() for r in h.resources.values() if r.is_html]
    bodies = (bodies * (2000 // max(1, len(bodies)) + 1))[:300 if args.quick else 2000]
    trans = {}
    with tempfile.TemporaryDirectory(prefix="larbin-bench-transport-") as work:
        for _ in range(1 if args.quick else 3):
            for mode in ("pipe", "shm", "spool"):
                trans.setdefault(mode, []).append(transport(mode, bodies, work))
    trans = {m: {k: median([r[k] for r in rs]) for k in rs[0]} for m, rs in trans.items()}
    avg = sum(map(len, bodies)) / len(bodies)
    print(table(f"a body to an analysis process ({len(bodies)} bodies, {avg / 1000:.0f} kB on average; medians)",
                ["transport", "loop CPU µs/page", "wall µs/page"],
                [[m, t["loop_cpu_us"], t["wall_us"]] for m, t in trans.items()]))
    figures = {"transport": trans}
    if NGINX is None:
        print("bench: nginx not found: the crawl comparison is skipped")
    else:
        runs = asyncio.run(crawls(args))
        rows, crawlsf = [], {}
        for w, rs in runs.items():
            f = {k: median([r[k] for r in rs]) for k in ("pages", "wall_s", "cpu_s", "loop_cpu_s", "analysis_cpu_s",
                                                          "peak_rss_mb")}
            f["pages_s"] = f["pages"] / f["wall_s"]
            f["pages_per_cpu_s"] = f["pages"] / f["cpu_s"]
            f["loop_cpu_us_per_page"] = f["loop_cpu_s"] / f["pages"] * 1e6
            crawlsf[w] = f
        base = crawlsf[args.workers[0]]
        for w, f in crawlsf.items():
            f["pages_s_ratio"] = f["pages_s"] / base["pages_s"]
            f["cpu_per_page_ratio"] = base["pages_per_cpu_s"] / f["pages_per_cpu_s"]
            f["loop_cpu_moved"] = 1 - f["loop_cpu_us_per_page"] / base["loop_cpu_us_per_page"]
            rows.append([f"analysisWorkers {w}", int(f["pages"]), f["wall_s"], f["pages_s"], f["pages_per_cpu_s"],
                         f["loop_cpu_us_per_page"], f"{100 * f['loop_cpu_moved']:.0f}%", f["pages_s_ratio"],
                         f["cpu_per_page_ratio"]])
        print(table(f"one crawl, {args.hosts} hosts x {args.pages} pages on nginx, mirror output "
                    f"({args.rounds} rounds turn by turn, medians)",
                    ["setting", "pages", "wall s", "pages/s", "pages/CPU-s", "loop CPU µs/page",
                     "loop CPU moved", "pages/s vs 0", "CPU/page vs 0"], rows))
        figures["crawls"] = {str(w): f for w, f in crawlsf.items()}
    report("analysis", {**figures, "hosts": args.hosts, "pages": args.pages, "rounds": args.rounds,
                        "quick": args.quick})


if __name__ == "__main__":
    main()
