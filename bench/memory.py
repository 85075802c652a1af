"""Memory per URL (seen set, URL store) and a crawl's RSS while its disk queue grows.

    python bench/memory.py [--quick] [--sizes 1000000,10000000] [--crawl-urls 1000000]

1. The URL-seen set at each size: bytes per URL of larbin_py's SeenSet
   (sorted uint64 array + small recent set) against a plain Python set of
   the same fingerprints (the peer), each measured in a fresh process (RSS
   growth).  Aim: 10 M URLs under 200 MB.
2. The URL store: RSS growth while N records are pushed with ramUrls 10,000
   (the RAM window is all it may keep), and the bytes on disk.
3. A real crawl (the engine, ramUrls 10,000, output none) of a fan-out web
   served from another process (50 loopback IPs; every page links 200 new
   pages), sampling its RSS against the URLs queued on disk until they pass
   ``--crawl-urls``.  Aim: RSS flat while the disk queue grows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from common import report, table

HERE = os.path.dirname(os.path.abspath(__file__))


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- one measurement per process ------------------------------------------------------

def measure_seen(n: int, kind: str) -> dict:
    from larbin_py.frontier.seen import SeenSet

    rng = random.Random(1)
    before = rss()
    t0 = time.perf_counter()
    if kind == "larbin_py":
        seen = SeenSet()
        batch = 100
        for _ in range(n // batch):
            seen.add_many([rng.getrandbits(64) for _ in range(batch)])
        seen.merge()
        size = len(seen)
    else:
        seen = set()
        for _ in range(n):
            seen.add(rng.getrandbits(64))
        size = len(seen)
    took = time.perf_counter() - t0
    grown = rss() - before
    return {"urls": size, "rss_bytes": grown, "bytes_per_url": grown / size, "seconds": took}


def measure_store(n: int) -> dict:
    from larbin_py.frontier.store import UrlRecord, UrlStore

    with tempfile.TemporaryDirectory(prefix="larbin-bench-") as d:
        store = UrlStore(d, ram_urls=10_000)
        before = rss()
        peak = 0
        for i in range(n):
            store.push(UrlRecord(f"http://host{i % 5000}.example.test/path/to/page{i}.html", 5, 3))
            if i % 100_000 == 0:
                peak = max(peak, rss() - before)
        store.flush()
        peak = max(peak, rss() - before)
        disk = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        popped = sum(1 for _ in range(min(n, 200_000)) if store.pop() is not None)
        store.close()
    return {"urls": n, "rss_growth_bytes": peak, "disk_bytes": disk, "disk_bytes_per_url": disk / n,
            "ram_window": store.ram_urls, "popped_back": popped}


def in_child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the fan-out web --------------------------------------------------------------------

IPS = [f"127.0.2.{i}" for i in range(1, 51)]


async def serve(port: int) -> None:
    """Every page links 200 new pages spread over the 50 IPs; robots.txt 404."""
    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                if target == b"/robots.txt":
                    body, status = b"none", b"404 Not Found"
                else:
                    seed = int.from_bytes(target[-8:].ljust(8, b"0"), "little") ^ len(target)
                    rng = random.Random(seed)
                    links = "".join(
                        f'<a href="http://{rng.choice(IPS)}:{port}/p/{rng.getrandbits(48):x}">x</a>\n'
                        for _ in range(200))
                    body, status = f"<html><body>{links}</body></html>".encode(), b"200 OK"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/html\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    servers = [await asyncio.start_server(handle, ip, port) for ip in IPS]
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


async def crawl_rss(target_urls: int, port: int) -> list[tuple[int, int, int]]:
    from larbin_py.config import parse_config_text
    from larbin_py.engine import Engine

    proc = await asyncio.create_subprocess_exec(sys.executable, os.path.abspath(__file__), "--serve",
                                                str(port), stdout=asyncio.subprocess.PIPE)
    await proc.stdout.readline()
    samples: list[tuple[int, int, int]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="larbin-bench-") as d:
            config = parse_config_text("", require_start_urls=False).replace(
                start_urls=tuple(f"http://{ip}:{port}/p/start" for ip in IPS[:10]),
                save_dir=os.path.join(d, "save"), state_dir=os.path.join(d, "state"), http_port=0,
                output_mode="none", wait_duration=0.0, ram_urls=10_000, max_urls_by_site=200,
                depth_in_site=1000, get_cgi=True, pages_connexions=50, dns_servers=(("127.0.0.1", 9),),
                private_networks="allow",
                checkpoint_interval=30.0)
            engine = Engine(config, out=open(os.devnull, "w"))
            task = asyncio.get_running_loop().create_task(engine.run())
            while not task.done():
                snap = engine.snapshot()
                disk = snap["urls"]["queued_disk"]
                samples.append((disk, snap["process"]["rss_bytes"], snap["pages"]["fetched"]))
                if disk >= target_urls:
                    engine.request_stop("bench over")
                    break
                await asyncio.sleep(0.5)
            await task
    finally:
        proc.kill()
        await proc.wait()
    return samples


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="100k URLs only, a short crawl")
    p.add_argument("--sizes", default="1000000,10000000")
    p.add_argument("--crawl-urls", type=int, default=1_000_000)
    p.add_argument("--port", type=int, default=18080)
    p.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    if args.one:
        what = args.one[0]
        if what == "seen":
            print(json.dumps(measure_seen(int(args.one[1]), args.one[2])))
        else:
            print(json.dumps(measure_store(int(args.one[1]))))
        return
    sizes = [100_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    crawl_target = 50_000 if args.quick else args.crawl_urls
    rows, figures = [], {"seen": {}, "store": {}}
    for n in sizes:
        ours = in_child(["seen", str(n), "larbin_py"])
        peer = in_child(["seen", str(n), "python-set"])
        figures["seen"][n] = {"larbin_py": ours, "python_set": peer}
        rows.append([f"seen set, {n:,} URLs", ours["bytes_per_url"], peer["bytes_per_url"],
                     ours["rss_bytes"] / 2**20, peer["rss_bytes"] / 2**20,
                     peer["bytes_per_url"] / ours["bytes_per_url"]])
    print(table("URL-seen set: RSS growth (fresh process each)",
                ["what", "B/URL ours", "B/URL set()", "MB ours", "MB set()", "set()/ours"], rows))
    rows = []
    for n in sizes:
        st = in_child(["store", str(n)])
        figures["store"][n] = st
        rows.append([f"store, {n:,} URLs", st["rss_growth_bytes"] / 2**20, st["disk_bytes"] / 2**20,
                     st["disk_bytes_per_url"]])
    print(table("URL store with ramUrls 10,000", ["what", "RSS growth MB", "disk MB", "disk B/URL"], rows))
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        samples = runner.run(crawl_rss(crawl_target, args.port))
    shown = samples[:: max(1, len(samples) // 12)] + samples[-1:]
    print(table("a crawl with ramUrls 10,000: RSS while the disk queue grows",
                ["URLs on disk", "RSS MB", "pages"], [[d, r / 2**20, pg] for d, r, pg in shown]))
    early = [r for d, r, _ in samples if d >= crawl_target // 10]
    growth = (samples[-1][1] - early[0]) / 2**20 if early else None
    figures["crawl"] = {"final_disk_urls": samples[-1][0], "final_rss_mb": samples[-1][1] / 2**20,
                        "rss_growth_mb_from_10pct": growth, "pages": samples[-1][2]}
    if growth is not None:
        print(f"RSS growth from {crawl_target // 10:,} to {samples[-1][0]:,} URLs on disk: {growth:.1f} MB "
              f"(the seen set's 8 B/URL included)")
    report("memory", {**figures, "quick": args.quick})


if __name__ == "__main__":
    main()
