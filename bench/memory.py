"""Memory per URL (seen stores, URL store) and a crawl's RSS while its disk queue grows.

    python bench/memory.py [--quick] [--seen-only] [--sizes 100000,1000000,10000000]
                           [--synthetic 100000000] [--crawl-urls 2000000] [--crawl-stores auto,array]

1. The URL-seen stores at each size, each filled in a fresh process through
   ``add_many`` (batches of 200 random fingerprints) and measured by RSS
   growth once its merges are done (and the peak while filling): the sieve
   (``seenStore disk``/``auto``, larbin_py.frontier.sieve), today's array
   store (``seenStore array``, larbin_py.frontier.seen) with and without the
   allocator's threshold pinned (larbin_py.malloc_tuning: the RSS investigation), and
   a plain Python set.  Then, in the same process, the cost of a batch of 200
   links (a page's) that are all new, all already seen, and half and half.
   The sieve is built as ``seenStore auto`` builds it (the first 262,144
   URLs in RAM, then a run on disk): the 100 k row is that store before its
   first run, against the array store (why ``auto`` is not ``array`` for
   small crawls).  ``--seen-only`` runs this part alone.
2. The sieve at ``--synthetic`` URLs (100 M): a run of that many synthetic
   sorted fingerprints written directly, opened with ``Sieve.load``, then
   brought to its largest RAM (chunks just below the merge threshold) through
   ``add_many``; RSS growth and batch costs.
3. The URL store: RSS growth while N records are pushed with ramUrls 10,000.
4. A real crawl (the engine, ramUrls 10,000, output none) of a fan-out web
   served from another process (50 loopback IPs; every page links 200 new
   pages), sampling its RSS (and glibc's heap: ``mallinfo2``) against the URLs
   queued on disk until they pass ``--crawl-urls``, for each of
   ``--crawl-stores``.  Aim: RSS at 2 M URLs within 20 MB of RSS at 200 k.

The JSON line carries ``seen_ram_bytes_per_url_10m``, ``..._100m``,
``seen_peak_bytes_per_url_10m`` (the peak RSS growth while filling, sampled
every 100 k URLs: a merge builds the new filter beside the old one),
``crawl_rss_mb_at_200k`` and ``crawl_rss_mb_at_2m`` (the sieve, seenStore
auto); None in ``--quick`` mode, whose sizes are too small for them, or for
the parts ``--seen-only`` skips.
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
import zlib

from common import report, table

HERE = os.path.dirname(os.path.abspath(__file__))


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- one measurement per process ------------------------------------------------------

def _batch(i: int) -> list[int]:
    """Batch ``i`` of the fill: 200 fingerprints, drawn again at will (no copy kept in RAM)."""
    draw = random.Random(i).getrandbits
    return [draw(64) for _ in range(200)]


class _Known:
    """Fingerprints added by the fill, drawn at random: batch ``i`` of ``batches``, entry ``j``."""

    def __init__(self, batches: int) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return self.batches * 200

    def __getitem__(self, k: int) -> int:
        return _batch(k // 200)[k % 200]


def _batches_cost(seen, rng, known) -> dict:
    """Microseconds per batch of 200 links: all new, all seen before, half and half."""
    def timed(make) -> float:
        batches = [make() for _ in range(200)]
        t0 = time.perf_counter()
        for batch in batches:
            seen.add_many(batch)
        return (time.perf_counter() - t0) / len(batches) * 1e6

    hot = getattr(seen, "_hot", None)

    def old(n):
        if hot is not None:
            hot.clear()  # a cold cache: the store itself answers
        return [known[rng.randrange(len(known))] for _ in range(n)]

    out = {"new_us": timed(lambda: [rng.getrandbits(64) for _ in range(200)]),
           "seen_us": timed(lambda: old(200)),
           "mixed_us": timed(lambda: old(100) + [rng.getrandbits(64) for _ in range(100)])}
    out["per_test_us"] = {k[:-3]: v / 200 for k, v in out.items()}
    return out


def measure_seen(n: int, kind: str) -> dict:
    from larbin_py import malloc_tuning
    from larbin_py.frontier.seen import SeenSet
    from larbin_py.frontier.sieve import Sieve

    if kind != "array-unpinned":
        malloc_tuning.limit_retention()  # as the engine does
    rng = random.Random(1)
    tmp = tempfile.TemporaryDirectory(prefix="larbin-bench-")
    before = rss()
    peak = 0
    t0 = time.perf_counter()
    known = _Known(n // 200)
    if kind == "python-set":
        seen = set()
        for i in range(n // 200):
            seen.update(_batch(i))
    else:
        seen = Sieve(tmp.name) if kind == "sieve" else SeenSet()
        for i in range(n // 200):
            seen.add_many(_batch(i))
            if i % 500 == 0:
                peak = max(peak, rss() - before)
        if kind == "sieve":
            seen.wait_merges()
        else:
            seen.merge()
    took = time.perf_counter() - t0
    malloc_tuning.trim()
    grown = rss() - before
    size = len(seen)
    out = {"urls": size, "rss_bytes": grown, "bytes_per_url": grown / size, "seconds": took,
           "peak_rss_bytes": max(peak, grown), "heap": malloc_tuning.heap_stats()}
    if kind != "python-set":
        out["store_bytes"] = seen.memory_bytes()
        out["merges"] = seen.merges
        out["cost"] = _batches_cost(seen, rng, known)
        if kind == "sieve":
            out["run_tests"], out["run_misses"] = seen.run_tests, seen.run_misses
            seen.close()
    tmp.cleanup()
    return out


def measure_merge_lag(n: int) -> dict:
    """Batch latency on the loop while a merge of an ``n``-fingerprint run runs on its thread."""
    from larbin_py import malloc_tuning
    from larbin_py.frontier import sieve as sv

    malloc_tuning.limit_retention()
    tmp = tempfile.TemporaryDirectory(prefix="larbin-bench-")
    count, _ = _synthetic_run(tmp.name, n)
    log = os.path.join(tmp.name, "seen.log")
    open(log, "wb").close()
    seen = sv.Sieve.load(tmp.name, log, first_merge=1 << 14)
    seen._durable = None  # no log written here: every chunk may be merged
    rng = random.Random(3)

    def batch_us() -> float:
        fps = [rng.getrandbits(64) for _ in range(200)]
        t0 = time.perf_counter()
        seen.add_many(fps)
        return (time.perf_counter() - t0) * 1e6

    quiet = [batch_us() for _ in range(count // seen.ratio // 200 - seen.seal_at // 200 - 2)]
    while seen._merging is None:  # the batch that seals the chunk starting the merge
        quiet.append(batch_us())
    during, t0 = [], time.perf_counter()
    while not seen.merges:  # to the batch that installs its result
        during.append(batch_us())
    took = time.perf_counter() - t0
    seen.close()
    tmp.cleanup()

    def pct(v, q):
        return sorted(v)[min(len(v) - 1, int(q * len(v)))]

    return {"run_urls": count, "merge_seconds": took, "batches_during": len(during),
            "quiet_p50_us": pct(quiet, 0.5), "quiet_p99_us": pct(quiet, 0.99), "quiet_max_us": max(quiet),
            "merge_p50_us": pct(during, 0.5), "merge_p99_us": pct(during, 0.99), "merge_max_us": max(during)}


def _synthetic_run(directory: str, n: int) -> tuple[int, list[int]]:
    """Write a run of ``n`` uniform synthetic fingerprints in ``directory``; (count, some of them)."""
    import numpy as np

    from larbin_py.frontier import sieve as sv

    path = os.path.join(directory, sv.RUN_NAME)
    gen = np.random.default_rng(5)
    parts = max(1, n // sv.SLICE)
    crc, count, known = 0, 0, []
    with open(path, "wb") as out:
        out.write(b"\0" * sv._HEAD_BYTES)
        for i in range(parts):
            lo, hi = i * (1 << 64) // parts, (i + 1) * (1 << 64) // parts
            m = n // parts + (1 if i < n % parts else 0)
            keys = np.unique(gen.integers(lo, hi, size=m, dtype=np.uint64, endpoint=False))
            crc = zlib.crc32(keys, crc)
            out.write(keys.tobytes())
            count += keys.size
            known.extend(keys[:: max(1, keys.size // 50)].tolist())
        out.seek(0)
        out.write(sv._HEADER.pack(sv._MAGIC, count, 0, sv.BLOCK, crc))
    return count, known


def measure_synthetic(n: int) -> dict:
    """The sieve at ``n`` synthetic fingerprints: the run written directly, then opened."""
    import numpy as np

    from larbin_py import malloc_tuning
    from larbin_py.frontier import sieve as sv

    malloc_tuning.limit_retention()
    tmp = tempfile.TemporaryDirectory(prefix="larbin-bench-")
    t0 = time.perf_counter()
    count, known = _synthetic_run(tmp.name, n)
    log = os.path.join(tmp.name, "seen.log")
    open(log, "wb").close()
    built = time.perf_counter() - t0
    malloc_tuning.trim()
    before = rss()
    t0 = time.perf_counter()
    seen = sv.Sieve.load(tmp.name, log)
    opened = time.perf_counter() - t0
    malloc_tuning.trim()
    after_open = rss() - before
    # the chunks at their largest: just below the next merge (run / ratio)
    rng = random.Random(2)
    fill = count // seen.ratio - seen.seal_at
    t0 = time.perf_counter()
    for _ in range(fill // 200):
        seen.add_many([rng.getrandbits(64) for _ in range(200)])
    filled = time.perf_counter() - t0
    assert seen.merges == 0, "the fill must stay below the merge threshold"
    malloc_tuning.trim()
    grown = rss() - before
    out = {"urls": len(seen) + count, "run_urls": count, "rss_bytes_after_open": after_open,
           "bytes_per_url_after_open": after_open / count, "rss_bytes": grown,
           "bytes_per_url": grown / (count + fill), "store_bytes": seen.memory_bytes(),
           "seconds_build": built, "seconds_open": opened, "seconds_fill": filled,
           "cost": _batches_cost(seen, rng, known)}
    seen.close()
    tmp.cleanup()
    return out


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


async def crawl_rss(target_urls: int, port: int, seen_store: str = "auto") -> list[tuple]:
    """Samples (URLs on disk, RSS, pages, heap) of a crawl; ``array-unpinned``: the array
    store with glibc's mmap threshold left dynamic (what the engine did before larbin_py.malloc_tuning)."""
    from larbin_py import malloc_tuning
    from larbin_py.config import parse_config_text
    from larbin_py.engine import Engine

    if seen_store.endswith("-unpinned"):
        seen_store = seen_store[: -len("-unpinned")]
        malloc_tuning.limit_retention = lambda *args: False

    proc = await asyncio.create_subprocess_exec(sys.executable, os.path.abspath(__file__), "--serve",
                                                str(port), stdout=asyncio.subprocess.PIPE)
    await proc.stdout.readline()
    from larbin_py import malloc_tuning

    samples: list[tuple] = []
    try:
        with tempfile.TemporaryDirectory(prefix="larbin-bench-") as d:
            config = parse_config_text("", require_start_urls=False).replace(
                start_urls=tuple(f"http://{ip}:{port}/p/start" for ip in IPS[:10]),
                save_dir=os.path.join(d, "save"), state_dir=os.path.join(d, "state"), http_port=0,
                output_mode="none", wait_duration=0.0, ram_urls=10_000, max_urls_by_site=200,
                depth_in_site=1000, get_cgi=True, pages_connexions=50, dns_servers=(("127.0.0.1", 9),),
                private_networks="allow",
                checkpoint_interval=30.0, seen_store=seen_store)
            engine = Engine(config, out=open(os.devnull, "w"))
            task = asyncio.get_running_loop().create_task(engine.run())
            while not task.done():
                snap = engine.snapshot()
                disk = snap["urls"]["queued_disk"]
                samples.append((disk, snap["process"]["rss_bytes"], snap["pages"]["fetched"],
                                malloc_tuning.heap_stats()))
                if disk >= target_urls:
                    engine.request_stop("bench over")
                    break
                await asyncio.sleep(0.5)
            await task
    finally:
        proc.kill()
        await proc.wait()
    return samples


def at(samples: list[tuple], urls: int) -> float | None:
    """RSS (MB) at the first sample with ``urls`` queued on disk."""
    for disk, rss_bytes, *_ in samples:
        if disk >= urls:
            return rss_bytes / 2**20
    return None


def print_seen(rows: list, cost_rows: list) -> None:
    print(table("URL-seen stores: RSS growth once merged, and the peak while filling (fresh process each)",
                ["what", "B/URL", "peak B/URL", "MB", "peak MB", "glibc heap MB", "seconds"], rows))
    print(table("URL-seen stores: cost of a batch of 200 links (µs), same processes",
                ["what", "200 new", "200 seen", "100+100", "µs/new test", "µs/seen test"], cost_rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="100k URLs only, a short crawl")
    p.add_argument("--seen-only", action="store_true", help="the seen stores alone (part 1)")
    p.add_argument("--sizes", default="100000,1000000,10000000")
    p.add_argument("--synthetic", type=int, default=100_000_000)
    p.add_argument("--crawl-urls", type=int, default=2_000_000)
    p.add_argument("--crawl-stores", default="auto,array,array-unpinned")
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
        elif what == "crawl":
            import uvloop

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                print(json.dumps(runner.run(crawl_rss(int(args.one[2]), int(args.one[3]), args.one[1]))))
        elif what == "lag":
            print(json.dumps(measure_merge_lag(int(args.one[1]))))
        elif what == "synthetic":
            print(json.dumps(measure_synthetic(int(args.one[1]))))
        else:
            print(json.dumps(measure_store(int(args.one[1]))))
        return
    sizes = [100_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    synthetic = 1_000_000 if args.quick else args.synthetic
    lag_n = 1_000_000 if args.quick else 10_000_000
    crawl_target = 50_000 if args.quick else args.crawl_urls
    stores = ["auto"] if args.quick else args.crawl_stores.split(",")
    kinds = ["sieve", "array", "array-unpinned", "python-set"]
    rows, cost_rows, figures = [], [], {"seen": {}, "store": {}}
    for n in sizes:
        got = {kind: in_child(["seen", str(n), kind]) for kind in kinds}
        figures["seen"][n] = got
        for kind in kinds:
            g = got[kind]
            rows.append([f"{kind}, {n:,} URLs", g["bytes_per_url"], g["peak_rss_bytes"] / g["urls"],
                         g["rss_bytes"] / 2**20, g["peak_rss_bytes"] / 2**20,
                         (g["heap"] or {}).get("heap", 0) / 2**20, g["seconds"]])
            if "cost" in g:
                c = g["cost"]
                cost_rows.append([f"{kind}, {n:,} URLs", c["new_us"], c["seen_us"], c["mixed_us"],
                                  c["per_test_us"]["new"], c["per_test_us"]["seen"]])
    big = figures["seen"].get(10_000_000, {}).get("sieve")
    figures["seen_ram_bytes_per_url_10m"] = big["bytes_per_url"] if big else None
    figures["seen_peak_bytes_per_url_10m"] = big["peak_rss_bytes"] / big["urls"] if big else None
    if args.seen_only:
        print_seen(rows, cost_rows)
        report("memory", {**figures, "quick": args.quick, "seen_only": True})
        return
    syn = in_child(["synthetic", str(synthetic)])
    figures["synthetic"] = syn
    rows.append([f"sieve, {syn['urls']:,} URLs (synthetic run)", syn["bytes_per_url"], None,
                 syn["rss_bytes"] / 2**20, None, None, syn["seconds_open"]])
    c = syn["cost"]
    cost_rows.append([f"sieve, {syn['urls']:,} URLs (synthetic)", c["new_us"], c["seen_us"], c["mixed_us"],
                      c["per_test_us"]["new"], c["per_test_us"]["seen"]])
    lag = in_child(["lag", str(lag_n)])
    figures["merge_lag"] = lag
    print(table(f"the loop's batches of 200 new links while a merge of a {lag['run_urls']:,}-URL run runs "
                f"({lag['merge_seconds']:.1f} s, {lag['batches_during']:,} batches)",
                ["µs per batch", "p50", "p99", "max"],
                [["no merge", lag["quiet_p50_us"], lag["quiet_p99_us"], lag["quiet_max_us"]],
                 ["during the merge", lag["merge_p50_us"], lag["merge_p99_us"], lag["merge_max_us"]]]))
    print_seen(rows, cost_rows)
    rows = []
    for n in sizes:
        st = in_child(["store", str(n)])
        figures["store"][n] = st
        rows.append([f"store, {n:,} URLs", st["rss_growth_bytes"] / 2**20, st["disk_bytes"] / 2**20,
                     st["disk_bytes_per_url"]])
    print(table("URL store with ramUrls 10,000", ["what", "RSS growth MB", "disk MB", "disk B/URL"], rows))
    figures["crawl"] = {}
    for store in stores:  # each crawl in a process of its own: the allocator's state is its own
        samples = in_child(["crawl", store, str(crawl_target), str(args.port)])
        shown = samples[:: max(1, len(samples) // 12)] + samples[-1:]
        print(table(f"a crawl with ramUrls 10,000, seenStore {store}: RSS while the disk queue grows",
                    ["URLs on disk", "RSS MB", "pages", "glibc heap MB", "heap free MB"],
                    [[d, r / 2**20, pg, (h or {}).get("heap", 0) / 2**20, (h or {}).get("free", 0) / 2**20]
                     for d, r, pg, h in shown]))
        early, late = crawl_target // 10, crawl_target
        figures["crawl"][store] = {
            "final_disk_urls": samples[-1][0], "final_rss_mb": samples[-1][1] / 2**20, "pages": samples[-1][2],
            "rss_mb_at_10pct": at(samples, early), "rss_mb_at_end": at(samples, late),
            "rss_mb_at_200k": at(samples, 200_000), "rss_mb_at_2m": at(samples, 2_000_000),
            "samples": [[d, round(r / 2**20, 1)] for d, r, *_ in samples[:: max(1, len(samples) // 40)]]}
        a, b = at(samples, early), at(samples, late)
        if a is not None and b is not None:
            print(f"seenStore {store}: RSS {a:.1f} MB at {early:,} URLs on disk, {b:.1f} MB at {late:,}: "
                  f"{b - a:+.1f} MB")
    auto = figures["crawl"].get("auto", {})
    full = not args.quick and crawl_target >= 2_000_000
    figures.update({
        "seen_ram_bytes_per_url_100m": syn["bytes_per_url"] if syn["urls"] >= 100_000_000 else None,
        "crawl_rss_mb_at_200k": auto.get("rss_mb_at_200k") if full else None,
        "crawl_rss_mb_at_2m": auto.get("rss_mb_at_2m") if full else None,
    })
    report("memory", {**figures, "quick": args.quick})


if __name__ == "__main__":
    main()
