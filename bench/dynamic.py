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

from common import median, report, table

from larbin_py.config import parse_config_text
from larbin_py.engine import Engine
from larbin_py.net.browser import find_chromium
from larbin_py.sim import Sim, SimConfig


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


async def one_crawl(args, mode: str, tabs: int) -> dict:
    async with Sim(sim_config(args)) as sim:
        dynamic = (("re:https?://", "none"),) if mode == "dynamic" else ()
        with tempfile.TemporaryDirectory(prefix="bench-dynamic-") as work:
            config = crawl_config(sim, work, dynamic, tabs)
            engine = Engine(config)
            renders: list[float] = []
            if dynamic:
                real_fetch = None

                async def timed(url, ip, port, **kw):  # the render time of each page
                    res = await real_fetch(url, ip, port, **kw)
                    if getattr(res, "rendered", False):
                        renders.append(res.render_time)
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
    own = (c1.user + c1.system) - (c0.user + c0.system)
    browser = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
    return {"mode": mode, "tabs": tabs if dynamic else None, "pages": pages, "wall_s": round(wall, 3),
            "pages_per_s": round(pages / wall, 2) if wall else None,
            "crawler_cpu_ms_per_page": round(own / pages * 1e3, 2) if pages else None,
            "browser_cpu_ms_per_page": round(browser / pages * 1e3, 2) if pages else None,
            "render_p50_ms": round(median(renders) * 1e3, 1) if renders else None,
            "sub_requests": summary.dynamic["sub_requests"] if summary.dynamic else 0,
            "failed": summary.failed}


async def transport_rtt(n: int) -> list[dict]:
    """Start time and command round trip: the pipe (larbin_py.net.cdp) against a websocket."""
    import re
    import shutil

    import websockets

    from larbin_py.net.browser import FLAGS, Browser

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-cdp-") as work:
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

        profile = os.path.join(work, "ws-profile")
        flags = [f for f in FLAGS if f != "--remote-debugging-pipe"]
        args = [*flags, "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={profile}", *(["--no-sandbox"] if os.geteuid() == 0 else []), "about:blank"]
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(find_chromium(), *args, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.PIPE, start_new_session=True)
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
            shutil.rmtree(profile, ignore_errors=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small web, one tab count (CI)")
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--pages", type=int, default=6)
    ap.add_argument("--tabs", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--commands", type=int, default=500, help="DevTools round trips per transport")
    args = ap.parse_args()
    if args.quick:
        args.hosts, args.pages, args.tabs, args.commands = 3, 4, [2], 50
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
    transports = run(transport_rtt(args.commands))
    print()
    print(table(f"DevTools transport ({args.commands} Browser.getVersion round trips)",
                ["transport", "browser start s", "round trip ms"],
                [[t["transport"], t["start_s"], t["rtt_ms"]] for t in transports]))
    report("dynamic", {"quick": args.quick, "hosts": args.hosts, "pages_per_host": args.pages, "runs": rows,
                       "transports": transports})
    return 0 if all(r["failed"] is None and r["pages"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
