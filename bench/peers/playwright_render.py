"""The Playwright peer of bench/dynamic.py (runs in bench's own venv, never ours).

    python playwright_render.py JOB.json

Renders the job's pages with Playwright's Python API driving the system's
Chromium (``executable_path``: Playwright's own browser builds are never
downloaded) as larbin_py renders a dynamic page: ``tabs`` pages at once,
each tab in a browser context of its own recycled after ``tab_pages`` pages,
images, media and fonts refused (``page.route``: every request goes through
the client, as larbin_py intercepts every request), the load awaited, then
``networkidle`` (no request for 500 ms, larbin_py's IDLE), then the DOM read
(``page.content()``).  Unlike larbin_py, the browser fetches the page and
its sub-requests itself (``route.continue_()``): nothing is policed or paced
in Python, so this does less work than the crawler's client.

JOB.json: ``urls``, ``hosts`` (host name -> IP: ``--host-resolver-rules``),
``tabs``, ``tab_pages``, ``timeout`` (s), ``chromium`` (its path), ``out``
(where the figures go, as JSON): pages, failed, wall s, this process's CPU
s, the Node.js driver's CPU s (its process, ``node-MainThread``) and the
browser's (its process tree, read from /proc before it exits), the sum of
the browser's RSS at its first page and at the end, and the median render
time.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time

from playwright.async_api import async_playwright

JOB = json.load(open(sys.argv[1]))
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(root: int) -> list[tuple[int, str, float, int]]:
    """(pid, comm, CPU s including reaped children, RSS bytes) of ``root``'s live descendants."""
    procs = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{name}/statm") as f:
                rss = int(f.read().split()[1]) * PAGE
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = sum(int(x) for x in fields[11:15]) / TICK  # utime stime cutime cstime
        procs[int(name)] = (int(fields[1]), comm, cpu, rss)
    out, todo = [], [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, comm, cpu, rss) in procs.items():
            if ppid == parent:
                out.append((pid, comm, cpu, rss))
                todo.append(pid)
    return out


def split(tree) -> tuple[float, float, int]:
    """(the driver's CPU s, the browser's CPU s, the browser's RSS bytes) from descendants()."""
    driver = sum(cpu for _, comm, cpu, _ in tree if comm.startswith("node"))
    browser = sum(cpu for _, comm, cpu, _ in tree if not comm.startswith("node"))
    rss = sum(r for _, comm, _, r in tree if not comm.startswith("node"))
    return driver, browser, rss


async def main() -> None:
    urls = list(JOB["urls"])
    rules = ", ".join(f"MAP {host} {ip}" for host, ip in JOB["hosts"].items())
    args = [f"--host-resolver-rules={rules}", "--disable-gpu", "--disable-dev-shm-usage",
            "--blink-settings=imagesEnabled=false"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")
    renders: list[float] = []
    failed = 0
    rss_first = None
    t0, c0 = time.monotonic(), os.times()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=JOB["chromium"], headless=True, args=args)
        version = browser.version
        queue: asyncio.Queue[str] = asyncio.Queue()
        for url in urls:
            queue.put_nowait(url)

        async def refuse_media(route):
            if route.request.resource_type in ("image", "media", "font"):
                await route.abort()
            else:
                await route.continue_()

        async def tab() -> None:
            nonlocal failed, rss_first
            while not queue.empty():
                context = await browser.new_context()
                page = await context.new_page()
                await page.route("**/*", refuse_media)
                for _ in range(JOB["tab_pages"]):
                    if queue.empty():
                        break
                    url = queue.get_nowait()
                    started = time.monotonic()
                    try:
                        await page.goto(url, wait_until="networkidle", timeout=JOB["timeout"] * 1e3)
                        html = await page.content()
                        renders.append(time.monotonic() - started)
                        if "<html" not in html:
                            failed += 1
                    except Exception as exc:  # a page that failed: counted, the tab goes on
                        print(f"playwright: {url}: {exc}", file=sys.stderr)
                        failed += 1
                    if rss_first is None:
                        rss_first = split(descendants(os.getpid()))[2]
                await context.close()

        await asyncio.gather(*(tab() for _ in range(JOB["tabs"])))
        driver_cpu, browser_cpu, rss_end = split(descendants(os.getpid()))
        wall = time.monotonic() - t0
        await browser.close()
    c1 = os.times()
    from importlib.metadata import version as package_version

    json.dump({"pages": len(renders), "failed": failed, "wall_s": wall, "version": version,
               "playwright": package_version("playwright"),
               "own_cpu_s": (c1.user + c1.system) - (c0.user + c0.system), "driver_cpu_s": driver_cpu,
               "browser_cpu_s": browser_cpu, "browser_rss_first": rss_first, "browser_rss_end": rss_end,
               "render_p50_s": statistics.median(renders) if renders else None},
              open(JOB["out"], "w"))


if __name__ == "__main__":
    asyncio.run(main())
