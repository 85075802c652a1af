"""A recrawl's cost against the first crawl's, on one unchanged site served by nginx.

    python bench/recrawl.py [--quick] [--hosts H] [--pages P]

The throughput benchmark's web (bench/throughput.py: pages of 10-60 kB with
30-150 links, by default 40 hosts x 100 pages) is exported as static files
and served by nginx, which answers conditional requests as servers do
(ETag, Last-Modified, 304).  larbin_py (a child process, mirror output,
canReload) crawls it once, then ``--recrawl`` crawls it again in the same
folders, nothing changed: every page is asked with If-None-Match and
If-Modified-Since, answered 304, its stored links offered again from
``stateDir/records`` and its file left as it is.

Figures, each crawl's: pages, requests (robots.txt, redirects and
errors too: a recrawl asks again the URLs that gave no page), wall s, CPU s (user+sys from ``wait4``),
bytes read from the network (the crawl's summary), and the records'
bytes in stateDir (``records/``: the record line and the links entry of
each page) per page.  The ratios: the recrawl's CPU and bytes over the
first crawl's (aim, issue 33: CPU at most a quarter).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile

from common import compiled, report, table

from larbin_py.config import format_config, parse_config_text

from throughput import bench_web, run_child, served


def crawl(web, dns_port: int, work: str, *extra: str) -> dict:
    """One crawl (``extra``: ``--recrawl``) of ``web`` in ``work``: its figures from wait4 and its summary."""
    config = parse_config_text("", require_start_urls=False).replace(
        start_urls=tuple(web.seeds), dns_servers=(("127.0.0.1", dns_port),), save_dir=os.path.join(work, "save"),
        private_networks="allow", state_dir=os.path.join(work, "state"), http_port=0, output_mode="mirror",
        wait_duration=0.0, depth_in_site=web.max_depth(True) + 1, depth_by_site=True, get_cgi=True,
        pages_connexions=100, timeout_page=30.0, forbidden_extensions=())
    conf = os.path.join(work, "larbin.conf")
    with open(conf, "w") as f:
        f.write(format_config(config))
    res = run_child([sys.executable, "-m", "larbin_py", "-c", conf, *extra], work)
    m = re.search(r"pages fetched\s+(\d+)\s+\((\d+) bytes", res["stderr"])
    if res["code"] != 0 or m is None:
        raise RuntimeError(f"larbin_py {' '.join(extra)} failed ({res['code']}): {res['stderr'][-2000:]}")
    res["pages"], res["bytes"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"^\s*requests\s+(\d+)", res["stderr"], re.M)  # pages, robots.txt, redirects, errors
    res["requests"] = int(m.group(1)) if m else None
    records = os.path.join(work, "state", "records")
    res["records_bytes"] = sum(os.path.getsize(os.path.join(records, n)) for n in os.listdir(records)
                               if n.endswith(".log"))
    res["not_modified"] = None
    if extra:
        m = re.search(r"recrawl\s+unchanged (\d+) \((\d+) not modified\)", res["stderr"])
        res["not_modified"] = int(m.group(2)) if m else None
    del res["stderr"]
    return res


async def main_async(args) -> None:
    web, port = bench_web(args.hosts, args.pages)
    async with served(web, port, prefix="larbin-bench-recrawl-") as dns_port:
        with tempfile.TemporaryDirectory(prefix="larbin-bench-") as work:
            loop = asyncio.get_running_loop()
            first = await loop.run_in_executor(None, crawl, web, dns_port, work)
            again = await loop.run_in_executor(None, crawl, web, dns_port, work, "--recrawl")
    rows = []
    for label, r in (("first crawl", first), ("recrawl, unchanged", again)):
        rows.append([label, r["pages"], r["not_modified"], r["requests"], r["wall_s"], r["cpu_s"], r["bytes"],
                     r["cpu_s"] / r["pages"] * 1e6, r["records_bytes"] / r["pages"]])
    print(table(f"recrawl: {args.hosts} hosts x {args.pages} pages on nginx, nothing changed",
                ["crawl", "pages", "304s", "requests", "wall s", "CPU s", "bytes read", "CPU µs/page",
                 "records B/page"], rows))
    ratios = {"cpu": again["cpu_s"] / first["cpu_s"], "bytes": again["bytes"] / first["bytes"],
              "wall": again["wall_s"] / first["wall_s"]}
    verdict = "too small a site to judge" if args.quick else "met" if ratios["cpu"] <= 0.25 else "not met"
    print(f"recrawl / first crawl: CPU {ratios['cpu']:.3f}x (aim <= 0.25: {verdict}), bytes read "
          f"{ratios['bytes']:.4f}x, wall {ratios['wall']:.3f}x")
    report("recrawl", {"first": first, "recrawl": again, "ratios": ratios, "hosts": args.hosts,
                       "pages": args.pages, "quick": args.quick})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="10 hosts x 20 pages")
    p.add_argument("--hosts", type=int, default=40)
    p.add_argument("--pages", type=int, default=100)
    args = p.parse_args()
    compiled(None)  # bytecode first: no crawl's figures carry the compile
    if args.quick:
        args.hosts, args.pages = 10, 20
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main_async(args))


if __name__ == "__main__":
    main()
