"""Coroutines against threads: memory and CPU as open connections grow.

    python bench/concurrency.py [--quick] [--sizes 100,1000,5000] [--delay 5]

A slow server (in this process) answers every page after ``--delay``
seconds; N host names (one page each) all resolve to it through the sim's
DNS server.  Two clients open N connections at once and wait:

* larbin_py's engine (``python -m larbin_py``, pagesConnexions N,
  connexionsPerIP N, waitDuration 0, flow control off, output none);
* a thread-per-request baseline (``threading`` + ``http.client``, one
  thread per URL, started together).

Each is a child process; its RSS is sampled from /proc every 50 ms (the
peak is kept), the server records the most requests it had in flight at
once, and the CPU time comes from ``wait4`` at the end.  Figures: peak in
flight, peak RSS (MB), RSS per connection in flight (KB), CPU s, for each N.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile

from common import report, table

from larbin_py.config import format_config, parse_config_text
from larbin_py.sim.dns import SimDNSServer

IP = "127.0.3.1"

THREADS = r"""
import http.client, sys, threading
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def one(i):
    c = http.client.HTTPConnection(ip, port, timeout=60)
    c.request("GET", "/page", headers={"Host": "s%d.slow.test" % i})
    c.getresponse().read()
    c.close()
threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
"""


class SlowServer:
    """robots.txt: 404 at once; anything else: 200 after ``delay`` seconds."""

    def __init__(self, delay: float):
        self.delay = delay
        self.in_flight = 0
        self.peak = 0

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if b" /robots.txt " in head:
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
                await asyncio.sleep(self.delay)
                self.in_flight -= 1
                body = b"<html>slow</html>"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def measure(args_list: list[str], server: SlowServer, n: int, cwd: str) -> dict:
    """Run a client to its end, sampling its RSS every 50 ms; peak RSS and peak in flight."""
    server.peak = 0
    proc = subprocess.Popen(args_list, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loop = asyncio.get_running_loop()
    waiter = loop.run_in_executor(None, os.wait4, proc.pid, 0)
    peak_rss = 0
    while not waiter.done():
        try:
            peak_rss = max(peak_rss, rss_of(proc.pid))
        except (OSError, ValueError):
            pass
        await asyncio.wait([waiter], timeout=0.05)
    _pid, status, usage = await waiter
    return {"rss_mb": peak_rss / 2**20, "rss_kb_per_conn": peak_rss / 1024 / max(1, server.peak),
            "cpu_s": usage.ru_utime + usage.ru_stime, "peak_in_flight": server.peak,
            "exit": os.waitstatus_to_exitcode(status)}


async def main_async(args) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # children inherit it
    server = SlowServer(args.delay)
    srv = await asyncio.start_server(server.handle, IP, 0, backlog=8192)
    port = srv.sockets[0].getsockname()[1]
    figures, rows = {}, []
    for n in args.sizes:
        names = {f"s{i}.slow.test": [IP] for i in range(n)}
        dns = SimDNSServer(names, host="127.0.0.1", port=0)
        await dns.start()
        try:
            with tempfile.TemporaryDirectory(prefix="larbin-bench-") as work:
                config = parse_config_text("", require_start_urls=False).replace(
                    start_urls=tuple(f"http://s{i}.slow.test:{port}/page" for i in range(n)),
                    dns_servers=(("127.0.0.1", dns.port),), save_dir=os.path.join(work, "save"),
                    private_networks="allow",
                    state_dir=os.path.join(work, "state"), http_port=0, output_mode="none", wait_duration=0.0,
                    pages_connexions=n, connexions_per_ip=n, dns_connexions=200, flow_control=False,
                    timeout_page=60.0, ram_urls=max(1000, 2 * n),
                    # the server's pace off: every answer takes the delay by design, and on a loaded
                    # machine the pace took the server for a slowed one (one request every 3 s)
                    server_rtt_factor=0.0)
                conf = os.path.join(work, "larbin.conf")
                with open(conf, "w") as f:
                    f.write(format_config(config))
                ours = await measure([sys.executable, "-m", "larbin_py", "-c", conf], server, n, work)
                threads = await measure([sys.executable, "-c", THREADS, IP, str(port), str(n)], server, n, work)
        finally:
            await dns.close()
        figures[n] = {"larbin_py": ours, "threads": threads}
        for name, f in (("larbin_py", ours), ("threads", threads)):
            rows.append([f"{name}, {n:,} open", f["peak_in_flight"], f["rss_mb"], f["rss_kb_per_conn"], f["cpu_s"]])
    srv.close()
    print(table(f"open connections to a server answering after {args.delay:g} s",
                ["client", "in flight", "RSS MB", "KB/conn", "CPU s"], rows))
    report("concurrency", {"sizes": figures, "delay": args.delay, "quick": args.quick})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="100 connections, 1 s")
    p.add_argument("--sizes", default="100,1000,5000")
    p.add_argument("--delay", type=float, default=5.0)
    args = p.parse_args()
    args.sizes = [100] if args.quick else [int(s) for s in args.sizes.split(",")]
    if args.quick:
        args.delay = 1.0
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
