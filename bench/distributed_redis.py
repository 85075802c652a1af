"""Redis memory and CPU per URL of the distributed mode: ``python bench/distributed_redis.py [--quick]``.

A private redis-server (Debian's, the settings of ``redisUrl auto``) gets N
URL fingerprints through the real function library (``lb_enqueue``, 1,000
per call, one tick per call), spread over P = 256 partitions as hosts would
spread them, with a 64-byte record each.  Then every URL is read by its
partition's owner (``lb_read``) and acked (``lb_ack``).  Measured:

* bytes per seen URL: ``MEMORY USAGE`` of every ``seen:{p}:<b>`` bucket,
  summed, over N (the aim of docs/distributed-design.md, "The aims and what was measured": <= 12 B at >= 1 M);
* bytes per queued URL (the streams) and per pending URL (the PEL), and
  what acked URLs leave behind (XDEL tombstones);
* Redis CPU (``used_cpu_user + used_cpu_sys``) per URL for the seen test and
  enqueue, and for the read and ack;
* round trips: one per tick client-side, and ``total_reads_processed``.

The seen buckets are measured at two ``seenBuckets`` settings, since the
per-key overhead of a bucket is shared by fewer URLs when buckets are many.
``--quick``: 100,000 URLs (CI keeps the script working).  Ends with one
JSON line.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import report, table  # noqa: E402

from larbin_py.distributed.keys import Keys  # noqa: E402
from larbin_py.distributed.redis_server import RedisServer, RedisServerError  # noqa: E402
from larbin_py.distributed.redisio import CrawlMeta, RedisIO  # noqa: E402

P = 256
RECORD = b"x" * 64  # about a URL record (url, depth, priority) as the sink writes it


def fingerprints(n: int, seed: int = 1) -> list[int]:
    """n distinct 64-bit fingerprints spread over the whole range."""
    import hashlib

    out = []
    for i in range(n):
        out.append(int.from_bytes(hashlib.blake2b(b"%d:%d" % (seed, i), digest_size=8).digest(), "little"))
    return out


async def cpu(io: RedisIO) -> float:
    info = await io.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def memory_of(io: RedisIO, keys: list[str]) -> int:
    """Redis's MEMORY USAGE of ``keys``, summed (a pipeline per 5,000 keys, counted
    in ``io.round_trips`` so that a caller can take its own calls out)."""
    total = 0
    for i in range(0, len(keys), 5000):
        pipe = io.client.pipeline(transaction=False)
        for k in keys[i:i + 5000]:
            pipe.execute_command("MEMORY", "USAGE", k, "SAMPLES", "0")
        total += sum(int(x or 0) for x in await pipe.execute())
        io.round_trips += 1
    return total


async def run(n: int, buckets: int, streams: bool, spread: int, directory: str) -> dict:
    server = RedisServer(directory, appendonly=False).start()
    try:
        io = await RedisIO(server.url, "bench").connect()
        await io.create_crawl(CrawlMeta(P, buckets, {}))
        keys = Keys("bench")
        fps = fingerprints(n)
        used0 = int((await io.info("memory"))["used_memory"])
        reads0 = int((await io.info("stats"))["total_reads_processed"])
        trips0 = io.round_trips
        cpu0 = await cpu(io)
        t0 = time.perf_counter()
        batch = 1000
        for i in range(0, n, batch):
            # one tick: 1,000 links spread over the partitions of their hosts
            per_partition: dict[int, list] = {}
            base = (i // batch) * spread
            for fp in fps[i:i + batch]:
                per_partition.setdefault((base + (fp >> 7) % spread) % P, []).append((fp, RECORD))
            t = io.tick()
            for p, items in per_partition.items():
                t.enqueue(p, items)
            await t.execute()
        enqueue_wall = time.perf_counter() - t0
        cpu1 = await cpu(io)
        trips = io.round_trips - trips0 - 1  # the cpu() INFO
        reads = int((await io.info("stats"))["total_reads_processed"]) - reads0 - 2
        used1 = int((await io.info("memory"))["used_memory"])
        seen_keys = [keys.seen(p, b) for p in range(P) for b in range(buckets)]
        seen_bytes = await memory_of(io, seen_keys)
        sample = [await io.client.object("encoding", k) for k in seen_keys[:: max(1, len(seen_keys) // 16)]]
        out = {
            "urls": n, "partitions": P, "seen_buckets": buckets, "partitions_per_tick": spread,
            "seen_bytes_per_url": seen_bytes / n,
            "used_bytes_per_url": (used1 - used0) / n,
            "intset_share": sum(1 for e in sample if e in (b"intset", "intset")) / len(sample),
            "enqueue_cpu_us_per_url": (cpu1 - cpu0) * 1e6 / n,
            "enqueue_urls_per_s": n / enqueue_wall,
            "ticks": trips, "server_reads": reads,
        }
        if streams:
            q_keys = [keys.queue(p) for p in range(P)]
            out["queued_bytes_per_url"] = await memory_of(io, q_keys) / n
            tokens = {p: await io.acquire(p, "w1", 600) for p in range(P)}
            cpu2 = await cpu(io)
            read_entries: dict[int, list] = {}
            for p in range(P):
                got = []
                while True:
                    part = await io.read(p, "w1", tokens[p], 5000)
                    if not part:
                        break
                    got.extend(part)
                read_entries[p] = got
            cpu3 = await cpu(io)
            used2 = int((await io.info("memory"))["used_memory"])
            out["pending_extra_bytes_per_url"] = (used2 - used1) / n
            for p, entries in read_entries.items():
                for i in range(0, len(entries), 1000):
                    await io.ack(p, "w1", tokens[p], [(e.id, "fetched") for e in entries[i:i + 1000]])
            cpu4 = await cpu(io)
            out["acked_leftover_bytes_per_url"] = await memory_of(io, q_keys) / n
            used3 = int((await io.info("memory"))["used_memory"])
            out["acked_used_bytes_per_url"] = (used3 - used0) / n
            out["read_cpu_us_per_url"] = (cpu3 - cpu2) * 1e6 / n
            out["ack_cpu_us_per_url"] = (cpu4 - cpu3) * 1e6 / n
            view = await io.view()
            out["balanced"] = view.totals.balanced and view.totals.fetched == n
        await io.close()
        return out
    finally:
        server.stop()


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    n = 100_000 if quick else 1_000_000
    # (seenBuckets, streams measured too, partitions a tick's 1,000 links go to)
    settings = ([(128, True, P), (256, False, P), (128, False, 20)] if quick
                else [(128, True, P), (256, False, P), (64, False, P), (128, False, 20)])
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="larbin-bench-redis-") as tmp:
            for k, (buckets, streams, spread) in enumerate(settings):
                results.append(asyncio.run(run(n, buckets, streams, spread, os.path.join(tmp, f"run{k}"))))
    except RedisServerError as exc:
        print(f"distributed_redis: {exc}", file=sys.stderr)
        report("distributed_redis", {"skipped": str(exc)})
        return 0
    rows = [[r["seen_buckets"], r["partitions_per_tick"], r["urls"], r["urls"] / (P * r["seen_buckets"]),
             r["seen_bytes_per_url"],
             r["used_bytes_per_url"], r["intset_share"], r["enqueue_cpu_us_per_url"], r["enqueue_urls_per_s"]]
            for r in results]
    print(table(f"Redis per seen URL ({n:,} URLs, P = {P}, ticks of 1,000 links, 64-byte records)",
                ["seenBuckets", "partitions/tick", "URLs", "per bucket", "seen B/URL", "all B/URL (+stream)", "intset share",
                 "CPU us/URL", "URLs/s"], rows))
    s = results[0]
    print()
    print(table("Streams (seenBuckets 128)", ["figure", "value"], [
        ["queued B/URL (stream entry)", s["queued_bytes_per_url"]],
        ["pending B/URL (PEL, extra; used_memory)", s["pending_extra_bytes_per_url"]],
        ["acked B/URL left (tombstones)", s["acked_leftover_bytes_per_url"]],
        ["all B/URL once every URL is acked (seen + tombstones)", s["acked_used_bytes_per_url"]],
        ["read CPU us/URL", s["read_cpu_us_per_url"]],
        ["ack CPU us/URL", s["ack_cpu_us_per_url"]],
        ["ticks (client round trips)", s["ticks"]],
        ["server reads (total_reads_processed)", s["server_reads"]],
        ["conservation after acks", s["balanced"]],
    ]))
    report("distributed_redis", {"quick": quick, "urls": n, "runs": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
