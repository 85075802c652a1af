"""A recrawl's cost against the first crawl's, on unchanged sites served by nginx.

    python bench/recrawl.py [--quick] [--web throughput docs] [--hosts H] [--pages P] [--rounds R]

Two webs, each exported as static files and served by nginx, which answers
conditional requests as servers do (ETag, Last-Modified, 304):

* ``throughput``: the throughput benchmark's web (bench/throughput.py: pages
  of 10-60 kB with 30-150 links, 40 hosts x 100 pages), where a fifth of
  the requests give no page (redirects, 404s, unwanted types), which a
  recrawl asks again as the first crawl did;
* ``docs``: the speed benchmark's documentation-like pages
  (bench/speed.py: 40-100 kB, 100-300 links, deep trees, 24 hosts x 100).

larbin_py (a child process, mirror output, canReload) crawls each once,
then ``--recrawl`` crawls it again in the same folders, nothing changed:
every page is asked with If-None-Match and If-Modified-Since, answered
304, its stored links offered again from ``stateDir/records`` and its file
left as it is.

Figures, each crawl's: pages, requests (robots.txt, redirects and
errors too: a recrawl asks again the URLs that gave no page), wall s, CPU s (user+sys from ``wait4``),
bytes read from the network (the crawl's summary), and the records'
bytes in stateDir (``records/``: the record line and the links entry of
each page) per page.  The ratios, each web's: the recrawl's CPU and bytes
over the first crawl's (aim, issue 33: CPU at most a quarter).  Judge them
on tmpfs (``TMPDIR=/dev/shm/...``): on disk the first crawl's file
creations swing its system time (docs/benchmarks.md).

One pair's ratio spreads by 10-20 % from one minute to the next on these
machines, so ``--rounds R`` (default 3) crawls each web R times, each round
a first crawl and its recrawl in fresh folders, one after the other; the
table shows the round of the median CPU ratio, and the verdict is that
median (every round's ratio is printed and in the JSON line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile

from common import compiled, report, table

from larbin_py.config import format_config, parse_config_text

from throughput import bench_web, run_child, served


#: cpuAffinity of every crawl (``--cpu-affinity``).
CPU_AFFINITY = "off"


def crawl(web, dns_port: int, work: str, *extra: str) -> dict:
    """One crawl (``extra``: ``--recrawl``) of ``web`` in ``work``: its figures from wait4 and its summary."""
    config = parse_config_text("", require_start_urls=False).replace(
        start_urls=tuple(web.seeds), dns_servers=(("127.0.0.1", dns_port),), save_dir=os.path.join(work, "save"),
        private_networks="allow", state_dir=os.path.join(work, "state"), http_port=0, output_mode="mirror",
        wait_duration=0.0, depth_in_site=web.max_depth(True) + 1, depth_by_site=True, get_cgi=True,
        pages_connexions=100, timeout_page=30.0, forbidden_extensions=(), cpu_affinity=CPU_AFFINITY)
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


#: The webs a run crawls: the throughput benchmark's (small pages, a fifth of the
#: requests giving no page) and the speed benchmark's documentation-like pages.
WEBS = ("throughput", "docs")


def make_web(name: str, hosts: int, pages: int):
    """The web ``name`` (:data:`WEBS`) and nginx's port."""
    if name == "docs":
        from speed import doc_web
        return doc_web(hosts, pages)
    return bench_web(hosts, pages)


async def one_web(name: str, hosts: int, pages: int, rounds: int = 1) -> dict:
    """``rounds`` first crawls and recrawls of web ``name``: the round of the median CPU
    ratio's figures, and every round's ratios."""
    web, port = make_web(name, hosts, pages)
    loop = asyncio.get_running_loop()
    done = []
    async with served(web, port, prefix="larbin-bench-recrawl-") as dns_port:
        for _round in range(rounds):
            with tempfile.TemporaryDirectory(prefix="larbin-bench-") as work:
                first = await loop.run_in_executor(None, crawl, web, dns_port, work)
                first_log = os.path.join(work, "first-crawl.log")  # the recrawl appends to the crawl log
                shutil.copyfile(os.path.join(work, "state", "crawl.log"), first_log)
                again = await loop.run_in_executor(None, crawl, web, dns_port, work, "--recrawl")
                bare = await loop.run_in_executor(None, floor, web, first_log, work)
            ratios = {"cpu": again["cpu_s"] / first["cpu_s"], "bytes": again["bytes"] / first["bytes"],
                      "wall": again["wall_s"] / first["wall_s"], "floor_cpu": bare["cpu_s"] / first["cpu_s"]}
            done.append({"first": first, "recrawl": again, "floor": bare, "ratios": ratios})
    middle = sorted(done, key=lambda r: r["ratios"]["cpu"])[(len(done) - 1) // 2]  # the lower median
    return {"web": name, "hosts": hosts, "pages": pages, **middle,
            "round_ratios": [r["ratios"] for r in done]}


def floor(web, log: str, work: str) -> dict:
    """bench/floor.py in a child: the first crawl's requests asked again by a bare client (see there)."""
    hosts, out = os.path.join(work, "hosts.json"), os.path.join(work, "floor.json")
    with open(hosts, "w") as f:
        json.dump({name: host.ip for name, host in web.hosts.items()}, f)
    res = run_child([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor.py"),
                     log, hosts, out], work)
    if res["code"] != 0:
        raise RuntimeError(f"bench/floor.py failed ({res['code']}): {res['stderr'][-2000:]}")
    with open(out) as f:
        res.update(json.load(f))
    del res["stderr"]
    return res


async def main_async(args) -> None:
    results = []
    for name in args.web:
        hosts, pages = (args.hosts or DEFAULT_SIZE[name][0]), (args.pages or DEFAULT_SIZE[name][1])
        rounds = args.rounds
        if args.quick:
            hosts, pages, rounds = 10, 20, 1
        results.append(await one_web(name, hosts, pages, rounds))
    rows = []
    for res in results:
        for label, r in (("first crawl", res["first"]), ("recrawl, unchanged", res["recrawl"])):
            rows.append([res["web"], label, r["pages"], r["not_modified"], r["requests"], r["wall_s"], r["cpu_s"],
                         r["bytes"], r["cpu_s"] / r["pages"] * 1e6, r["records_bytes"] / r["pages"]])
        bare = res["floor"]
        rows.append([res["web"], "floor: bare client", None, bare["statuses"].get("304"), bare["requests"],
                     bare["wall_s"], bare["cpu_s"], None, bare["cpu_s"] / res["first"]["pages"] * 1e6, None])
    rounds = len(results[0]["round_ratios"]) if results else 0
    print(table("recrawl: each web on nginx, crawled, then crawled again with nothing changed"
                + (f" (the round of the median ratio of {rounds})" if rounds > 1 else ""),
                ["web", "crawl", "pages", "304s", "requests", "wall s", "CPU s", "bytes read", "CPU µs/page",
                 "records B/page"], rows))
    for res in results:
        ratios = res["ratios"]
        verdict = "too small a site to judge" if args.quick else "met" if ratios["cpu"] <= 0.25 else "not met"
        each = ", ".join(f"{r['cpu']:.3f}" for r in sorted(res["round_ratios"], key=lambda r: r["cpu"]))
        print(f"{res['web']} ({res['hosts']} hosts x {res['pages']} pages): recrawl / first crawl: CPU "
              f"{ratios['cpu']:.3f}x{' (median)' if rounds > 1 else ''} (aim <= 0.25: {verdict}), "
              f"bytes read {ratios['bytes']:.4f}x, wall {ratios['wall']:.3f}x; the bare client's CPU "
              f"{ratios['floor_cpu']:.3f}x" + (f"; every round's CPU ratio: {each}" if rounds > 1 else ""))
    report("recrawl", {"webs": results, "quick": args.quick, "rounds": rounds, "cpu_affinity": CPU_AFFINITY})


#: Each web's hosts and pages a host by default.
DEFAULT_SIZE = {"throughput": (40, 100), "docs": (24, 100)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="10 hosts x 20 pages, one round")
    p.add_argument("--web", nargs="+", choices=WEBS, default=list(WEBS),
                   help="the webs to crawl (default: both)")
    p.add_argument("--hosts", type=int, help="hosts of each web (default: throughput 40, docs 24)")
    p.add_argument("--pages", type=int, help="pages a host (default: 100)")
    p.add_argument("--rounds", type=int, default=3,
                   help="first crawl and recrawl pairs of each web; the verdict is their median ratio "
                        "(default 3; --quick: 1)")
    p.add_argument("--cpu-affinity", choices=("off", "auto"), default="off",
                   help="cpuAffinity of every crawl, first and recrawl (default off)")
    args = p.parse_args()
    global CPU_AFFINITY
    CPU_AFFINITY = args.cpu_affinity
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    compiled(None)  # bytecode first: no crawl's figures carry the compile
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main_async(args))


if __name__ == "__main__":
    main()
