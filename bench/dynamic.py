"""Dynamic pages against static ones: pages/s and CPU per page, in the same run.

    python bench/dynamic.py [--quick] [--hosts 10] [--pages 6] [--tabs 2 4]

One sim web (``--hosts`` hosts of ``--pages`` HTML pages, no politeness
delay: ``waitDuration 0``, so the figures are the crawler's and the
browser's, not the politeness bound's) is crawled by larbin_py in this
process, first as static pages, then with ``dynamicPages`` naming every URL
(trigger ``none``) so that each page is rendered in headless Chromium, once
per ``--tabs`` value (``dynamicConnexions``).  Figures: pages, wall s,
pages/s, the crawler's CPU ms per page (this process), the browser's CPU ms
per page (Chromium and its renderers: the children's CPU time once the
browser has exited), and the median time of one render.

Then the choice of the DevTools transport, measured: the round trip of
``--commands`` ``Browser.getVersion`` over ``--remote-debugging-pipe`` (what
larbin_py uses, larbin_py.net.cdp) against a websocket on 127.0.0.1
(``--remote-debugging-port``, the ``websockets`` package), and each
browser's start time.

The browser's memory while its tabs are recycled (a tab and its browser
context closed every larbin_py.net.dynamic.TAB_PAGES pages): the sum of the
RSS of Chromium's processes (read from /proc) at the first render and after
the last, and its maximum, in every dynamic crawl and in one longer crawl of
``--rss-pages`` pages at the largest tab count.

Then the DevTools client: the same pages rendered by Playwright's Python API
(bench/peers/playwright_render.py, in the peers' own venv, never a
dependency of larbin_py) pointed at the same system Chromium
(``executable_path``), at each ``--tabs`` value, against larbin_py's own
client in the dynamic crawls above: pages/s, the client's CPU per page (for
larbin_py the crawler's CPU above the static crawl's; for Playwright its
Python process plus its Node.js driver) and the browser's.  ``--no-peer``
(and ``--quick``) skip it.

Every render waits for the page to settle (no request for 0.5 s,
larbin_py.net.dynamic.IDLE): that wait, not the CPU, bounds a tab's rate at
about 1.5 pages/s; tabs render side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time

from common import descendants, median, peer_python, report, table

from larbin_py.config import parse_config_text
from larbin_py.engine import Engine
from larbin_py.net.browser import find_chromium
from larbin_py.sim import Sim, SimConfig


HERE = os.path.dirname(os.path.abspath(__file__))


def tree_memory(root: int | None) -> tuple[int, int]:
    """(RSS, PSS) of ``root`` and all its descendants, bytes, from /proc.

    The RSS sum counts the pages Chromium's processes share (its code, shared
    memory) once per process; the PSS sum (``smaps_rollup``) shares them out,
    so it is what the browser really holds.
    """
    if root is None:
        return 0, 0
    rss = pss = 0
    for pid in [root, *descendants(root)]:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return rss, pss


def sim_config(args) -> SimConfig:
    return SimConfig(seed=23, hosts=args.hosts, hosts_per_ip=1, pages_per_host=(args.pages, args.pages),
                     dns=True, extras=False, trap=False, robots_mix={"absent": 1.0}, p_redirect=0.0,
                     p_loop=0.0, p_missing=0.0, p_nonhtml=0.0, p_dup=0.0, p_query=0.0, p_frameset=0.0)


def crawl_config(sim: Sim, work: str, dynamic: tuple, tabs: int):
    base = parse_config_text("", require_start_urls=False)
    return base.replace(
        start_urls=tuple(sim.seeds), dns_servers=(("127.0.0.1", sim.dns_port),), private_networks="allow",
        save_dir=os.path.join(work, "save"), state_dir=os.path.join(work, "state"), http_port=0,
        output_mode="stats", wait_duration=0.0, forbidden_extensions=(), get_cgi=True, depth_by_site=True,
        depth_in_site=max(5, sim.web.max_depth(True)), pages_connexions=50, can_reload=False,
        dynamic_pages=dynamic, dynamic_connexions=max(1, tabs), dynamic_timeout=10.0)


async def one_crawl(args, mode: str, tabs: int, seed_all: bool = False) -> dict:
    """One crawl of the sim web; ``seed_all``: every page is a start URL (all known at once, as a
    renderer given the list is: the client comparison), else they are found page by page."""
    async with Sim(sim_config(args)) as sim:
        dynamic = (("re:https?://", "none"),) if mode == "dynamic" else ()
        with tempfile.TemporaryDirectory(prefix="bench-dynamic-") as work:
            os.chmod(work, 0o711)  # as root, Chromium runs as nobody, who must reach stateDir/browser
            config = crawl_config(sim, work, dynamic, tabs)
            if seed_all:
                from larbin_py.demo import crawl_rules

                config = config.replace(start_urls=tuple(sorted(sim.truth(crawl_rules(config, sim.seeds))
                                                                .must_request)))
            engine = Engine(config)
            renders: list[float] = []
            rss: list[tuple[int, int]] = []  # the browser's (RSS, PSS) after each render
            sampling = [0.0]  # CPU s spent reading /proc for it
            if dynamic:
                real_fetch = None

                async def timed(url, ip, port, **kw):  # the render time of each page, the browser's RSS
                    res = await real_fetch(url, ip, port, **kw)
                    if getattr(res, "rendered", False):
                        renders.append(res.render_time)
                        c = time.process_time()
                        rss.append(tree_memory(engine.edge.browser.pid))
                        sampling[0] += time.process_time() - c  # not the crawler's: taken off below
                    return res

                def hook(e):
                    nonlocal real_fetch
                    real_fetch = e.edge.dynamic.fetch
                    e.edge.dynamic.fetch = timed
                engine.on_servers_started = hook
            t0, c0 = time.monotonic(), os.times()
            summary = await engine.run()
            wall, c1 = time.monotonic() - t0, os.times()
    pages = summary.pages
    own = (c1.user + c1.system) - (c0.user + c0.system) - sampling[0]
    browser = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
    return {"mode": mode, "tabs": tabs if dynamic else None, "pages": pages, "wall_s": round(wall, 3),
            "pages_per_s": round(pages / wall, 2) if wall else None,
            "crawler_cpu_ms_per_page": round(own / pages * 1e3, 2) if pages else None,
            "browser_cpu_ms_per_page": round(browser / pages * 1e3, 2) if pages else None,
            "render_p50_ms": round(median(renders) * 1e3, 1) if renders else None,
            "sub_requests": summary.dynamic["sub_requests"] if summary.dynamic else 0,
            "tabs_recycled": summary.dynamic["tabs_recycled"] if summary.dynamic else None,
            "browser_rss_mb_first": round(rss[0][0] / 2**20, 1) if rss else None,
            "browser_rss_mb_last": round(rss[-1][0] / 2**20, 1) if rss else None,
            "browser_pss_mb_first": round(rss[0][1] / 2**20, 1) if rss else None,
            "browser_pss_mb_last": round(rss[-1][1] / 2**20, 1) if rss else None,
            "browser_pss_mb_max": round(max(p for _, p in rss) / 2**20, 1) if rss else None,
            "browser_pss_mb_by_render": [round(p / 2**20, 1) for _, p in rss[:: max(1, len(rss) // 20)]],
            "failed": summary.failed}


def playwright_render(args, tabs: int, python: str) -> dict:
    """The same pages rendered by Playwright (bench/peers/playwright_render.py) in the peers' venv."""
    import json
    import subprocess

    from larbin_py.demo import crawl_rules
    from larbin_py.net.dynamic import TAB_PAGES

    async def job(work: str) -> dict:
        async with Sim(sim_config(args)) as sim:
            config = crawl_config(sim, work, (), tabs)
            urls = sorted(sim.truth(crawl_rules(config, sim.seeds)).must_request)
            path = os.path.join(work, "job.json")
            with open(path, "w") as f:
                json.dump({"urls": urls, "hosts": sim.resolve_map(), "tabs": tabs, "tab_pages": TAB_PAGES,
                           "timeout": 10.0, "chromium": find_chromium(), "out": os.path.join(work, "out.json")},
                          f)
            proc = await asyncio.create_subprocess_exec(python, os.path.join(HERE, "peers", "playwright_render.py"),
                                                        path, stderr=subprocess.PIPE)
            _, err = await proc.communicate()
            if proc.returncode:
                raise RuntimeError(f"playwright_render.py exited {proc.returncode}: {err.decode()[-2000:]}")
        with open(os.path.join(work, "out.json")) as f:
            return json.load(f)

    import uvloop

    with tempfile.TemporaryDirectory(prefix="bench-playwright-") as work:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            got = runner.run(job(work))
    pages = got["pages"] or 1
    return {"client": f"Playwright {got['playwright']}", "chromium": got["version"], "tabs": tabs, "pages": got["pages"],
            "failed": f"{got['failed']} pages failed" if got["failed"] else None,
            "wall_s": round(got["wall_s"], 3), "pages_per_s": round(got["pages"] / got["wall_s"], 2),
            "client_cpu_ms_per_page": round((got["own_cpu_s"] + got["driver_cpu_s"]) / pages * 1e3, 2),
            "python_cpu_ms_per_page": round(got["own_cpu_s"] / pages * 1e3, 2),
            "driver_cpu_ms_per_page": round(got["driver_cpu_s"] / pages * 1e3, 2),
            "browser_cpu_ms_per_page": round(got["browser_cpu_s"] / pages * 1e3, 2),
            "render_p50_ms": round(got["render_p50_s"] * 1e3, 1) if got["render_p50_s"] else None,
            "browser_rss_mb_first": round(got["browser_rss_first"] / 2**20, 1) if got["browser_rss_first"] else None,
            "browser_rss_mb_last": round(got["browser_rss_end"] / 2**20, 1)}


async def transport_rtt(n: int) -> list[dict]:
    """Start time and command round trip: the pipe (larbin_py.net.cdp) against a websocket."""
    import re
    import shutil

    import websockets

    from larbin_py.net.browser import FLAGS, Browser, as_user, browser_env, browser_tmpdir, remove_singleton_dir, run_as

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-cdp-") as work:
        os.chmod(work, 0o711)  # as root, Chromium runs as nobody, who must reach its profile
        browser = Browser(work)
        t0 = time.monotonic()
        conn = await browser.connection()
        started = time.monotonic() - t0
        t0 = time.monotonic()
        for _ in range(n):
            await conn.send("Browser.getVersion")
        rows.append({"transport": "pipe", "start_s": round(started, 3),
                     "rtt_ms": round((time.monotonic() - t0) / n * 1e3, 3)})
        await browser.close()

        profile = os.path.join(work, "ws-profile")  # the same user and sandbox as the pipe's browser
        who = run_as(browser.user, os.geteuid())
        os.mkdir(profile, 0o700)
        if who is not None:
            os.chown(profile, who.uid, who.gid)
        flags = [f for f in FLAGS if f != "--remote-debugging-pipe"]
        args = [*flags, "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={profile}", "about:blank"]
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(*as_user(who), find_chromium(), *args,
                                                    stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                                                    start_new_session=True, env=browser_env(profile, os.environ))
        try:
            url = None
            while url is None:
                line = await asyncio.wait_for(proc.stderr.readline(), 30)
                if not line:
                    raise RuntimeError("chromium exited before listening")
                m = re.search(rb"DevTools listening on (ws://\S+)", line)
                url = m.group(1).decode() if m else None
            async with websockets.connect(url, max_size=2**26) as ws:
                await ws.send('{"id":0,"method":"Browser.getVersion"}')
                await ws.recv()
                started = time.monotonic() - t0
                t0 = time.monotonic()
                for i in range(n):
                    await ws.send(f'{{"id":{i + 1},"method":"Browser.getVersion"}}')
                    await ws.recv()
                rows.append({"transport": "websocket", "start_s": round(started, 3),
                             "rtt_ms": round((time.monotonic() - t0) / n * 1e3, 3)})
        finally:
            proc.kill()
            await proc.wait()
            remove_singleton_dir(profile, who.uid if who is not None else os.geteuid(),  # killed: left in /tmp
                                 browser_tmpdir(browser_env(profile, os.environ)))
            shutil.rmtree(profile, ignore_errors=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small web, one tab count (CI)")
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--pages", type=int, default=6)
    ap.add_argument("--tabs", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--commands", type=int, default=500, help="DevTools round trips per transport")
    ap.add_argument("--rss-pages", type=int, default=400,
                    help="pages of the longer crawl that watches the browser's RSS (0: none)")
    ap.add_argument("--no-peer", action="store_true", help="no Playwright row")
    args = ap.parse_args()
    if args.quick:
        args.hosts, args.pages, args.tabs, args.commands, args.rss_pages = 3, 4, [2], 50, 0
        args.no_peer = True
    if find_chromium() is None:
        print("bench/dynamic.py: chromium is not installed (apt-get install chromium)", file=sys.stderr)
        report("dynamic", {"quick": args.quick, "skipped": "no chromium"})
        return 0
    import uvloop

    def run(coro):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)

    rows = [run(one_crawl(args, "static", 0))]
    for tabs in args.tabs:
        rows.append(run(one_crawl(args, "dynamic", tabs)))
    static = rows[0]
    cols = ["mode", "tabs", "pages", "wall s", "pages/s", "crawler CPU ms/page", "browser CPU ms/page",
            "render p50 ms", "sub-requests"]
    print(table(f"Dynamic against static pages ({args.hosts} hosts x {args.pages} pages, waitDuration 0)", cols,
                [[r["mode"], r["tabs"], r["pages"], r["wall_s"], r["pages_per_s"], r["crawler_cpu_ms_per_page"],
                  r["browser_cpu_ms_per_page"], r["render_p50_ms"], r["sub_requests"]] for r in rows]))
    for r in rows[1:]:
        if static["pages_per_s"] and r["pages_per_s"]:
            r["slowdown_vs_static"] = round(static["pages_per_s"] / r["pages_per_s"], 1)
    memory = []
    if args.rss_pages:
        per_host = max(1, args.rss_pages // args.hosts)
        long = run(one_crawl(argparse.Namespace(**{**vars(args), "pages": per_host}), "dynamic", max(args.tabs)))
        memory.append(long)
    from larbin_py.net.dynamic import TAB_PAGES

    print()
    print(table(f"The browser's memory (Chromium's processes summed, /proc) while tabs are recycled "
                f"every {TAB_PAGES} pages",
                ["crawl", "tabs", "tabs recycled", "PSS MB at 1st render", "PSS MB at the end", "PSS MB max",
                 "RSS sum MB at 1st", "RSS sum MB at the end"],
                [[f"{r['pages']} pages", r["tabs"], r["tabs_recycled"], r["browser_pss_mb_first"],
                  r["browser_pss_mb_last"], r["browser_pss_mb_max"], r["browser_rss_mb_first"],
                  r["browser_rss_mb_last"]] for r in rows[1:] + memory]))
    clients = []
    python = None if args.no_peer else peer_python("playwright")
    if python is not None:  # larbin_py's own client given the same list: its CPU above the static crawl's
        base = run(one_crawl(args, "static", 0, seed_all=True))
        for tabs in args.tabs:
            r = run(one_crawl(args, "dynamic", tabs, seed_all=True))
            extra = (r["crawler_cpu_ms_per_page"] or 0) - (base["crawler_cpu_ms_per_page"] or 0)
            clients.append({"client": "larbin_py (own, pipe)", "tabs": tabs, "pages": r["pages"],
                            "failed": r["failed"], "wall_s": r["wall_s"], "pages_per_s": r["pages_per_s"],
                            "client_cpu_ms_per_page": round(extra, 2),
                            "browser_cpu_ms_per_page": r["browser_cpu_ms_per_page"],
                            "render_p50_ms": r["render_p50_ms"]})
            clients.append(playwright_render(args, tabs, python))  # right after: the same load
    elif not args.no_peer:
        print("bench/dynamic.py: no Playwright row (its venv could not be built)", file=sys.stderr)
    if clients:
        print()
        print(table("DevTools client, the same pages and tabs (client CPU: larbin_py's above its static crawl; "
                    "Playwright's Python process + its Node.js driver)",
                    ["client", "tabs", "pages", "pages/s", "client CPU ms/page", "browser CPU ms/page",
                     "render p50 ms"],
                    [[c["client"], c["tabs"], c["pages"], c["pages_per_s"], c["client_cpu_ms_per_page"],
                      c["browser_cpu_ms_per_page"], c["render_p50_ms"]] for c in clients]))
    transports = run(transport_rtt(args.commands))
    print()
    print(table(f"DevTools transport ({args.commands} Browser.getVersion round trips)",
                ["transport", "browser start s", "round trip ms"],
                [[t["transport"], t["start_s"], t["rtt_ms"]] for t in transports]))
    report("dynamic", {"quick": args.quick, "hosts": args.hosts, "pages_per_host": args.pages, "runs": rows,
                       "memory": memory, "clients": clients, "transports": transports})
    return 0 if all(r["failed"] is None and r["pages"] for r in rows + memory + clients) else 1


if __name__ == "__main__":
    sys.exit(main())
