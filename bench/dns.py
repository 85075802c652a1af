"""DNS benchmark: the c-ares resolver vs getaddrinfo on the thread pool.

Both resolve the same N distinct names (default 5,000) against the sim's DNS
server, answering after a fixed latency (default 20 ms), with 5, 50 and 500
queries in flight:

* ``c-ares``: ``larbin_py.net.dns.Resolver(max_in_flight=K)``, one fresh
  resolver (empty cache) per run, K = the in-flight level;
* ``getaddrinfo``: ``loop.getaddrinfo(name, 80, family=AF_INET)`` with K
  calls outstanding (a semaphore).  On uvloop that runs glibc's
  getaddrinfo on libuv's thread pool, 4 threads unless ``UV_THREADPOOL_SIZE``
  says otherwise -- the default is what a crawler gets; a second row gives the
  pool K threads (a generous, thread-heavy peer).  Each getaddrinfo run is a
  fresh process, since the pool size is fixed per process.

glibc's stub resolver reads ``/etc/resolv.conf`` and always uses port 53, so
the whole measurement runs in private mount and network namespaces
(``unshare -mn``, needs root): loopback is brought up, a temporary
resolv.conf (``nameserver 127.0.0.1``) is bind-mounted over /etc/resolv.conf
-- the real file is never touched -- and the sim server listens on
127.0.0.1:53 there.  Both resolvers use that same server, which runs in its
own process so it doesn't share the measured event loop.  Without root or
``unshare`` only the c-ares rows are measured (and the report says so).

Prints a table, then one JSON line.  ``--quick``: 150 names, a few seconds.
Usage: ``python bench/dns.py [--quick] [--names N] [--latency S]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

LEVELS = (5, 50, 500)


def name_of(i: int) -> str:
    return f"b{i}.bench.test"


def ip_of(i: int) -> str:
    return f"127.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255 or 1}"


# ---------------------------------------------------------------- server


def serve(port: int, names: int, latency: float) -> None:
    """Run the sim DNS server until killed; print ``READY <port>`` once bound."""
    import uvloop

    from larbin_py.sim.dns import SimDNSServer

    async def main() -> None:
        zone = {name_of(i): [ip_of(i)] for i in range(names)}
        server = SimDNSServer(zone, port=port, latency=latency, keep_log=False)
        await server.start()
        print(f"READY {server.port}", flush=True)
        await asyncio.Event().wait()

    uvloop.run(main())


def start_server(port: int, names: int, latency: float) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--port", str(port), "--names", str(names),
         "--latency", str(latency)],
        stdout=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline().split()
    if not line or line[0] != "READY":
        proc.kill()
        raise RuntimeError("sim DNS server did not start")
    return proc, int(line[1])


# ---------------------------------------------------------------- runs


async def run_cares(port: int, names: int, in_flight: int) -> dict:
    from larbin_py.net.dns import Resolver

    resolver = Resolver([("127.0.0.1", port)], max_in_flight=in_flight, timeout=2.0, tries=2)
    todo = [name_of(i) for i in range(names)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    answers = await asyncio.gather(*(resolver.resolve(n) for n in todo))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    resolver.close()
    ok = sum(1 for i, a in enumerate(answers) if a.ips == (ip_of(i),))
    return {"wall_s": wall, "qps": names / wall, "ok": ok, "cpu_us_per_name": cpu / names * 1e6,
            "peak_in_flight": resolver.stats.peak_in_flight}


async def run_gai(names: int, in_flight: int) -> dict:
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(in_flight)

    async def one(i: int) -> bool:
        async with gate:
            try:
                infos = await loop.getaddrinfo(name_of(i), 80, family=socket.AF_INET,
                                               type=socket.SOCK_STREAM)
            except OSError:
                return False
            return infos[0][4][0] == ip_of(i)

    cpu0, t0 = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(names)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"wall_s": wall, "qps": names / wall, "ok": sum(results),
            "cpu_us_per_name": cpu / names * 1e6}


def gai_child(names: int, in_flight: int, pool: int | None) -> dict:
    env = dict(os.environ)
    env.pop("UV_THREADPOOL_SIZE", None)
    if pool:
        env["UV_THREADPOOL_SIZE"] = str(pool)
    out = subprocess.run(
        [sys.executable, __file__, "--gai-run", str(in_flight), "--names", str(names)],
        env=env, capture_output=True, text=True, check=True, timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(names: int, latency: float, levels: tuple[int, ...], port: int, with_gai: bool) -> dict:
    import uvloop

    server, port = start_server(port, names, latency)
    try:
        results: dict = {"cares": {}, "gai_default_pool": {}, "gai_pool_k": {}}
        for k in levels:
            results["cares"][k] = uvloop.run(run_cares(port, names, k))
        if with_gai:
            for k in levels:
                results["gai_default_pool"][k] = gai_child(names, k, None)
                results["gai_pool_k"][k] = gai_child(names, k, k)
        return results
    finally:
        server.terminate()
        server.wait(10)


def inner(args) -> None:
    """Inside ``unshare -mn``: loopback up, private resolv.conf, server on :53."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, "resolv.conf")
        with open(conf, "w") as f:
            f.write("nameserver 127.0.0.1\noptions timeout:2 attempts:2\n")
        subprocess.run(["mount", "--bind", conf, "/etc/resolv.conf"], check=True)
        results = measure(args.names, args.latency, LEVELS, 53, with_gai=True)
    print(json.dumps(results))


# ---------------------------------------------------------------- report


def report(results: dict, names: int, latency: float, note: str) -> None:
    rows = [("c-ares Resolver", "cares"), ("getaddrinfo, uvloop pool (4)", "gai_default_pool"),
            ("getaddrinfo, pool = in-flight", "gai_pool_k")]
    print(f"DNS: {names} names, server latency {latency * 1000:.0f} ms  ({note})")
    print(f"{'resolver':32} {'in flight':>9} {'wall s':>8} {'names/s':>9} {'ok':>6} {'cpu us/name':>12}")
    for label, key in rows:
        for k, r in sorted(results.get(key, {}).items(), key=lambda kv: int(kv[0])):
            print(f"{label:32} {int(k):9d} {r['wall_s']:8.3f} {r['qps']:9.0f} {r['ok']:6d} "
                  f"{r['cpu_us_per_name']:12.1f}")
    speedups = {}
    for k in LEVELS:
        c = results["cares"].get(k) or results["cares"].get(str(k))
        for key in ("gai_default_pool", "gai_pool_k"):
            g = results.get(key, {}).get(k) or results.get(key, {}).get(str(k))
            if c and g:
                speedups[f"{key}_{k}"] = round(g["wall_s"] / c["wall_s"], 1)
    if speedups:
        print("speed-up of c-ares (getaddrinfo wall / c-ares wall):",
              ", ".join(f"{k}: {v}x" for k, v in speedups.items()))
    summary = {
        "bench": "dns", "names": names, "latency_ms": latency * 1000, "note": note,
        "cares_qps": {str(k): round(v["qps"]) for k, v in results["cares"].items()},
        "gai_default_pool_qps": {str(k): round(v["qps"]) for k, v in results.get("gai_default_pool", {}).items()},
        "gai_pool_k_qps": {str(k): round(v["qps"]) for k, v in results.get("gai_pool_k", {}).items()},
        "cares_cpu_us_per_name": {str(k): round(v["cpu_us_per_name"], 1) for k, v in results["cares"].items()},
        "speedup": speedups,
        "all_ok": all(r["ok"] == names for group in results.values() for r in group.values()),
    }
    print(json.dumps(summary))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="150 names: a few seconds")
    parser.add_argument("--names", type=int, default=None)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--gai-run", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.names is None:
        args.names = 150 if args.quick else 5000

    if args.serve:
        serve(args.port, args.names, args.latency)
        return 0
    if args.gai_run:
        import uvloop
        print(json.dumps(uvloop.run(run_gai(args.names, args.gai_run))))
        return 0
    if args.inner:
        inner(args)
        return 0

    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("ip"):
        cmd = ["unshare", "-mn", "--", sys.executable, __file__, "--inner",
               "--names", str(args.names), "--latency", str(args.latency)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if out.returncode == 0:
            results = json.loads(out.stdout.strip().splitlines()[-1])
            results = {g: {int(k): v for k, v in rows.items()} for g, rows in results.items()}
            report(results, args.names, args.latency, "getaddrinfo via private netns + resolv.conf")
            return 0
        print(f"unshare run failed ({out.returncode}): {out.stderr.strip()[-500:]}", file=sys.stderr)
    results = measure(args.names, args.latency, LEVELS, 0, with_gai=False)
    report(results, args.names, args.latency,
           "c-ares only: getaddrinfo cannot be pointed at the sim without root/unshare")
    return 0


if __name__ == "__main__":
    sys.exit(main())
