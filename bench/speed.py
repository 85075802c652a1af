"""Speed on documentation pages (issue 37): ``python bench/speed.py [--baseline DIR] [--quick]``.

A sim web of documentation-like pages (``SimConfig.doc_pages``: 40-100 KB,
100-300 links each, the links in nested lists and sections about 24
elements deep, sites 6 layers deep) is exported and served by nginx, which
logs every request with its time (``$msec``).  larbin_py crawls it (mirror
output, waitDuration 0, robots.txt obeyed, checkpoints on) with
``analysisWorkers`` 0, 1 and 2; with ``--baseline DIR`` the source tree DIR
crawls it too (``git worktree add /tmp/base HEAD~3``), every setting of
both trees turn by turn in each round, so that the machine's drift hits
them alike.  Each crawl is a child process: wall and CPU (user + system,
its analysis processes included: it reaps them) from ``wait4``.

Both trees are byte-compiled first (as an installed package is).  Per
crawl, from nginx's log and the child's start and exit:

* *start to first request*: from just before the child is started to the
  first request nginx logged (a robots.txt) -- the interpreter's start,
  the imports, the first checkpoint and the first DNS answer;
* *start to first page*: the same to the first request that is not a
  robots.txt;
* *last request to exit*: from the last request nginx logged to the
  child's exit (the last page's outcome, the final checkpoint, the
  analysis processes' end, the interpreter's exit).

Before the crawls, the imports of a crawl's start are timed apart: a fresh
interpreter imports the command line, the engine and its wiring from each
tree and times it from its first line, the fastest of 15 runs turn by
turn.

The table gives the medians, with a projection: the pages/s two free
cores would give, the CPU being the only limit (the busiest of the crawler
process, one analysis process, and the cores' share of the whole); then the aims (2 cores): analysisWorkers 1
at least 1.6x analysisWorkers 0 in pages/s at most 1.15x the CPU per page;
against the baseline's default (analysisWorkers 1), at least 1.5x the
pages/s and 1.3x the pages per CPU-second; start to first request and last
request to exit at most 150 ms.  Then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

from common import compiled, median, report, table
from throughput import NGINX, changed_keys, free_port, profiler, run_child

from larbin_py.config import parse_config_text
from larbin_py.sim.dns import SimDNSServer
from larbin_py.sim.export import export
from larbin_py.sim.web import SimConfig, SimWeb

#: nginx's log line: the time the answer was sent (seconds, ms resolution) and the path.
LOG_FORMAT = "log_format lb '$msec $request_uri';"


def doc_web(hosts: int, pages: int) -> tuple[SimWeb, int]:
    """``hosts`` x ``pages`` documentation-like pages on 127.0.8.x, and nginx's port."""
    ip_base = "127.0.8.1"
    port = free_port(ip_base)
    cfg = SimConfig(seed=37, hosts=hosts, pages_per_host=(pages, pages), body_size=(40_000, 100_000),
                    links_per_page=(100, 300), max_layer=6, doc_pages=True, hosts_per_ip=4, ip_base=ip_base,
                    extras=False, trap=False, p_loop=0.0, robots_mix={"absent": 3.0, "rules": 1.0, "allow": 1.0},
                    robots_agent="larbin_py")
    return SimWeb.generate(cfg, port), port


def requests_logged(log: str, start: int) -> list[tuple[float, str]]:
    """nginx's log lines from byte ``start``: (time, path)."""
    with open(log, "rb") as f:
        f.seek(start)
        data = f.read().decode("utf-8", "replace")
    out = []
    for line in data.splitlines():
        t, _, uri = line.partition(" ")
        try:
            out.append((float(t), uri))
        except ValueError:
            continue
    return out


#: cpuAffinity of this tree's crawls (``--cpu-affinity``; a baseline's keep their default).
CPU_AFFINITY = "off"


def crawl(web: SimWeb, dns_port: int, work: str, workers: int, log: str, source: str | None,
          profile: str | None = None) -> dict:
    config = parse_config_text("", require_start_urls=False).replace(
        start_urls=tuple(web.seeds), dns_servers=(("127.0.0.1", dns_port),), save_dir=os.path.join(work, "save"),
        private_networks="allow", state_dir=os.path.join(work, "state"), http_port=0, output_mode="mirror",
        wait_duration=0.0, depth_in_site=web.max_depth(True) + 1, depth_by_site=True, get_cgi=True,
        no_external_links=True, pages_connexions=100, timeout_page=30.0, forbidden_extensions=(),
        analysis_workers=workers, cpu_affinity=CPU_AFFINITY if source is None else "off")
    conf = os.path.join(work, "larbin.conf")
    with open(conf, "w") as f:
        f.write(changed_keys(config))
    log_start = os.path.getsize(log)
    started = time.time()
    command = [sys.executable, "-m", "larbin_py", "-c", conf]
    if profile:  # py-spy samples the crawler and its analysis processes
        command = profiler(profile)[:-1] + ["--subprocesses", "--"] + command
    res = run_child(command, work, source)
    ended = time.time()
    m = re.search(r"pages fetched\s+(\d+)", res["stderr"])
    if res["code"] != 0 or m is None:
        raise RuntimeError(f"larbin_py failed ({res['code']}): {res['stderr'][-2000:]}")
    res["pages"] = int(m.group(1))
    a = re.search(r"analysis: .*, ([0-9.]+) CPU s, peak RSS ([0-9.]+) MB", res["stderr"])
    res["analysis_cpu_s"] = float(a.group(1)) if a else 0.0
    res["loop_cpu_s"] = res["cpu_s"] - res["analysis_cpu_s"]
    seen = requests_logged(log, log_start)
    if not seen:
        raise RuntimeError("nginx logged no request")
    times = [t for t, _u in seen]
    pages = [t for t, u in seen if not u.startswith("/robots.txt")]
    res["requests"] = len(seen)
    res["first_request_ms"] = (min(times) - started) * 1000
    res["first_page_ms"] = (min(pages) - started) * 1000 if pages else None
    res["exit_after_last_ms"] = (ended - max(times)) * 1000
    res["serving_s"] = max(times) - min(times)
    del res["stderr"]
    return res


#: What a crawl imports before its first request (the command line, the engine and its wiring).
START_IMPORTS = "import larbin_py.cli, larbin_py.engine, larbin_py.runner, larbin_py.wiring"
#: A child that times :data:`START_IMPORTS` itself, from its first line (ms).
_TIMED = ("import time; t = time.perf_counter(); " + START_IMPORTS + "; "
          "print(round((time.perf_counter() - t) * 1000, 1))")


def import_times(trees: dict[str, str | None], runs: int) -> dict[str, float]:
    """The fastest of ``runs`` import times (ms) of :data:`START_IMPORTS` in a
    fresh interpreter of each tree (None: this one), turn by turn, timed by
    the child from its first line: the start's imports without the crawl's
    own noise (DNS, nginx, the first checkpoint) nor the interpreter's start
    and exit, and the process's spawn (timed from here, the same runs once
    gave both trees 340 ms where the children timed 225 and 183)."""
    best = {name: float("inf") for name in trees}
    for _ in range(runs):
        for name, source in trees.items():
            env = dict(os.environ, PYTHONPATH=os.path.abspath(source)) if source else None
            out = subprocess.run([sys.executable, "-c", _TIMED], env=env, check=True, capture_output=True, text=True)
            best[name] = min(best[name], float(out.stdout))
    return best


async def crawls(args, web: SimWeb, port: int) -> dict:
    settings = [("this", w) for w in args.workers]
    if args.baseline:
        settings = [("base", w) for w in args.workers] + settings
    runs: dict[tuple, list] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory(prefix="larbin-bench-docweb-") as site_dir:
        os.chmod(site_dir, 0o755)
        export(web, site_dir)
        conf = os.path.join(site_dir, "nginx.conf")
        log = os.path.join(site_dir, "logs", "access.log")
        with open(conf) as f:
            text = f.read()
        with open(conf, "w") as f:  # every request logged with its time
            f.write(text.replace("    access_log off;\n", f"    {LOG_FORMAT}\n    access_log {log} lb;\n", 1))
        open(log, "w").close()
        nginx = subprocess.Popen([NGINX, "-p", site_dir, "-e", os.path.join(site_dir, "logs", "error.log"),
                                  "-c", conf, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dns = SimDNSServer(web.dns_records(), host="127.0.0.1", port=0)
        await dns.start()
        try:
            for _ in range(500):
                try:
                    socket.create_connection((web.hosts["h0.sim.test"].ip, port), timeout=1).close()
                    break
                except OSError:
                    await asyncio.sleep(0.02)
            loop = asyncio.get_running_loop()
            for r in range(args.rounds):
                # alternate the order each round: neither tree always runs first
                order = settings if r % 2 == 0 else settings[::-1]
                for tree, w in order:
                    with tempfile.TemporaryDirectory(prefix="larbin-bench-") as work:
                        source = args.baseline if tree == "base" else None
                        runs[(tree, w)].append(await loop.run_in_executor(
                            None, crawl, web, dns.port, work, w, log, source))
            if args.profile:  # one more crawl, sampled: its figures include py-spy's cost and are not kept
                with tempfile.TemporaryDirectory(prefix="larbin-bench-") as work:
                    await loop.run_in_executor(None, crawl, web, dns.port, work, args.profile_workers, log,
                                               args.baseline if args.profile_base else None, args.profile)
        finally:
            await dns.close()
            nginx.terminate()
            nginx.wait()
    return runs


KEYS = ("pages", "requests", "wall_s", "cpu_s", "loop_cpu_s", "analysis_cpu_s", "first_request_ms", "first_page_ms",
        "exit_after_last_ms", "serving_s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small web, one round (CI: the script works)")
    ap.add_argument("--hosts", type=int, default=24)
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="analysisWorkers settings")
    ap.add_argument("--baseline", metavar="DIR", help="the source tree DIR crawls too, turn by turn (A/B)")
    ap.add_argument("--profile", metavar="FILE", help="one more crawl under py-spy (the crawler and its analysis "
                    "processes), its samples to FILE as collapsed stacks (pip install py-spy)")
    ap.add_argument("--profile-workers", type=int, default=1, help="analysisWorkers of the profiled crawl")
    ap.add_argument("--profile-base", action="store_true", help="profile the baseline tree instead")
    ap.add_argument("--cpu-affinity", choices=("off", "auto"), default="off",
                    help="cpuAffinity of this tree's crawls; a baseline's keep off (--baseline . --cpu-affinity auto: "
                         "an A/B of the key)")
    args = ap.parse_args()
    global CPU_AFFINITY
    CPU_AFFINITY = args.cpu_affinity
    compiled(None, args.baseline)  # bytecode first: no crawl's figures carry the compile
    if NGINX is None:
        sys.exit("bench: nginx is needed (apt-get install nginx-light)")
    if args.quick:
        args.hosts, args.pages, args.rounds = 4, 20, 1
    # Both trees byte-compiled first, as an installed package is: with
    # PYTHONDONTWRITEBYTECODE set, every crawl would compile its sources again.
    for tree in [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] + ([args.baseline] if args.baseline else []):
        compileall.compile_dir(os.path.join(tree, "larbin_py"), quiet=1)
    load0 = os.getloadavg()
    trees = {"this": None} | ({"base": args.baseline} if args.baseline else {})
    imports = import_times(trees, 3 if args.quick else 15)
    print("imports before a crawl's first request, timed in the child (the fastest of the runs): "
          + ", ".join(f"{name} {ms:.0f} ms" for name, ms in imports.items()))
    t0 = time.monotonic()
    web, port = doc_web(args.hosts, args.pages)
    html = [r for h in web.hosts.values() for r in h.resources.values() if r.is_html and r.status == 200]
    gen_s = time.monotonic() - t0
    sizes = sorted(len(r.body) for r in html)
    links = sorted(len(r.links) for r in html)
    print(f"the web: {len(html)} HTML pages, median {sizes[len(sizes) // 2] / 1000:.0f} kB and "
          f"{links[len(links) // 2]} links (generated in {gen_s:.1f} s)")
    runs = asyncio.run(crawls(args, web, port))
    figures, rows = {}, []
    for (tree, w), rs in runs.items():
        f = {k: median([r[k] for r in rs]) for k in KEYS}
        f["pages_s"] = f["pages"] / f["wall_s"]
        f["pages_per_cpu_s"] = f["pages"] / f["cpu_s"]
        f["loop_cpu_us_per_page"] = f["loop_cpu_s"] / f["pages"] * 1e6
        # What 2 free cores would give, the CPU being the only limit: the busiest of the
        # crawler process, one analysis process, and the two cores' share of the whole.
        f["cpu_bound_pages_s"] = f["pages"] / max(f["loop_cpu_s"], f["analysis_cpu_s"] / w if w else 0.0,
                                                  f["cpu_s"] / 2)
        figures[f"{tree}:{w}"] = f
        rows.append([f"{tree}, analysisWorkers {w}", int(f["pages"]), f["wall_s"], f["cpu_s"], f["pages_s"],
                     f["pages_per_cpu_s"], f["loop_cpu_us_per_page"], f["cpu_bound_pages_s"], f["first_request_ms"],
                     f["first_page_ms"], f["exit_after_last_ms"]])
    print(table(f"{args.hosts} hosts x {args.pages} documentation-like pages on nginx, mirror output "
                f"({args.rounds} rounds, turn by turn, medians)",
                ["crawler", "pages", "wall s", "CPU s", "pages/s", "pages/CPU-s", "loop CPU µs/page",
                 "CPU-bound pages/s", "start→1st request ms", "start→1st page ms", "last request→exit ms"], rows))
    aims = {}
    t0, t1 = figures.get("this:0"), figures.get("this:1")
    if t0 and t1:
        aims["w1_over_w0_pages_s"] = t1["pages_s"] / t0["pages_s"]
        aims["w1_over_w0_cpu_per_page"] = t0["pages_per_cpu_s"] / t1["pages_per_cpu_s"]
        aims["w1_over_w0_cpu_bound"] = t1["cpu_bound_pages_s"] / t0["cpu_bound_pages_s"]
    b1 = figures.get("base:1")
    if b1 and t1:
        aims["over_base_pages_s"] = t1["pages_s"] / b1["pages_s"]
        aims["over_base_pages_per_cpu_s"] = t1["pages_per_cpu_s"] / b1["pages_per_cpu_s"]
    if t1:
        aims["first_request_ms"] = t1["first_request_ms"]
        aims["exit_after_last_ms"] = t1["exit_after_last_ms"]

    def say(name, value, ok, fmt):
        print(f"  {name}: {fmt.format(value)}: {'met' if ok else 'not met'}")

    print("aims (analysisWorkers 1 unless said):")
    if "w1_over_w0_pages_s" in aims:
        say("pages/s, 1 over 0 (>= 1.6x)", aims["w1_over_w0_pages_s"], aims["w1_over_w0_pages_s"] >= 1.6, "{:.2f}x")
        print(f"  (on 2 free cores, the CPU the only limit: {aims['w1_over_w0_cpu_bound']:.2f}x; a projection)")
        say("CPU per page, 1 over 0 (<= 1.15x)", aims["w1_over_w0_cpu_per_page"],
            aims["w1_over_w0_cpu_per_page"] <= 1.15, "{:.2f}x")
    if "over_base_pages_s" in aims:
        say("pages/s over the baseline's (>= 1.5x)", aims["over_base_pages_s"], aims["over_base_pages_s"] >= 1.5,
            "{:.2f}x")
        say("pages per CPU-second over the baseline's (>= 1.3x)", aims["over_base_pages_per_cpu_s"],
            aims["over_base_pages_per_cpu_s"] >= 1.3, "{:.2f}x")
    if "first_request_ms" in aims:
        say("start to first request (<= 150 ms)", aims["first_request_ms"], aims["first_request_ms"] <= 150, "{:.0f} ms")
        say("last request to exit (<= 150 ms)", aims["exit_after_last_ms"], aims["exit_after_last_ms"] <= 150,
            "{:.0f} ms")
    load1 = os.getloadavg()
    print(f"load average: {load0[0]:.1f} at the start, {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f} at the end, "
          f"on {os.cpu_count()} cores (other work on the machine takes cores from the crawls: wall ratios suffer)")
    report("speed", {"crawls": figures, "aims": aims, "import_ms": imports, "hosts": args.hosts, "pages": args.pages,
                     "rounds": args.rounds, "html_pages": len(html), "median_kb": sizes[len(sizes) // 2] / 1000,
                     "median_links": links[len(links) // 2], "baseline": args.baseline,
                     "cpu_affinity": args.cpu_affinity, "loadavg_start": load0, "loadavg_end": load1,
                     "quick": args.quick})


if __name__ == "__main__":
    main()
