"""CPU-bound crawl: larbin_py against Scrapy on a static web served by nginx.

    python bench/throughput.py [--quick] [--rounds N] [--hosts H] [--pages P] [--no-peer]
                               [--no-h11] [--no-tls] [--profile FILE] [--baseline DIR]

A generated web (by default 200 hosts x 100 pages of 10-60 KB with 30-150
links each) is exported as static files and served by nginx (Debian's
package) on 50 loopback IPs.  larbin_py (``python -m larbin_py``, waitDuration
0, mirror output, robots.txt obeyed, checkpoints on) and Scrapy (a
CrawlSpider with a LinkExtractor, robots.txt obeyed, every body saved, in
its own venv) crawl it turn by turn (A, B, A, B).  A third row, larbin_py
reading responses with h11 alone (``httpParser h11``), measures in the same
run what the llhttp reader saves (``--no-h11`` skips it).  Each crawler is a child
process: its CPU time and peak RSS come from ``wait4``.  Host names resolve
through the sim's DNS server for larbin_py and through a fixed map for
Scrapy (it has no way to use another DNS server).

Two more rows measure what TLS and HTTP/2 cost per page, in the same run
(``--no-tls`` skips them): the same web served by a second nginx over
https (a certificate for ``*.sim.test`` from a CA the bench makes with
trustme, the pages' absolute links rewritten to https and its port),
crawled by larbin_py with ``httpVersion 1.1`` and with ``httpVersion 2``
(``tlsCaFile`` the bench's CA), against the plain-HTTP row.

``--baseline DIR`` adds a row: larbin_py imported from the source tree DIR
(e.g. ``git worktree add /tmp/base HEAD~3``), run turn by turn with this
tree's, so a change's cost is measured A/B in one sitting on one machine.

``--profile FILE`` runs larbin_py under py-spy (``pip install py-spy``) and
writes its samples to FILE as collapsed stacks (one ``frame;frame;... count``
line per stack, for flamegraph tools); the profiled run's figures include
py-spy's own cost and are not comparable.

Figures: pages, wall s, CPU s (and its user and system parts), pages/s,
pages per CPU-second, peak RSS, and the ratios.  Each round also measures
the floor (:func:`floor_costs`): the CPU per page of only fetching, parsing
and writing the same pages, and larbin_py's cost per page against it.  The
exported web and each crawl's files go to the temporary directory: set
``TMPDIR`` to choose the disk (on some virtual machines creating a file
costs from 60 µs on tmpfs to almost 1 ms on an ext4 disk; the README says
what was measured).  Aims (issue 8): >= 1,000 pages/s, >= 10x Scrapy's
pages per CPU-second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from common import compiled, median, peer_python, report, table

from lxml import etree

from larbin_py.config import KEYS, format_config, parse_config_text
from larbin_py.sim.dns import SimDNSServer
from larbin_py.sim.export import export
from larbin_py.sim.web import SimConfig, SimWeb

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def run_child(args: list[str], cwd: str, source: str | None = None) -> dict:
    """Run a child to its end: wall, CPU (user+sys) and peak RSS from wait4.

    ``source``: a source tree whose larbin_py the child imports (PYTHONPATH).
    """
    err = open(os.path.join(cwd, "child.err"), "w+")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(source)) if source else None
    t0 = time.monotonic()
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err.seek(0)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "user_s": usage.ru_utime,
            "sys_s": usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024,
            "code": proc.returncode, "stderr": err.read()}


def changed_keys(config) -> str:
    """larbin.conf text with only the keys ``config`` sets away from the defaults:
    what a baseline tree reads even when this one has keys it does not know."""
    default = parse_config_text("", require_start_urls=False)
    lines = []
    for key in KEYS:
        value = getattr(config, key.attr)
        if value != getattr(default, key.attr):
            lines.extend(key.format(value) or [])
    return "\n".join(lines) + "\n"


def profiler(out: str) -> list[str]:
    """The py-spy command prefix that samples a child into ``out``."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        sys.exit("bench: --profile needs py-spy (pip install py-spy)")
    return [spy, "record", "--format", "raw", "--rate", "250", "--nonblocking", "-o", os.path.abspath(out), "--"]


async def crawl_larbin(web: SimWeb, dns_port: int, work: str, profile: str | None = None,
                       http_parser: str = "httptools", source: str | None = None, tls=None,
                       http_version: str = "1.1") -> dict:
    """One crawl of ``web``; ``tls``: the :class:`TlsWeb` to crawl over https instead."""
    save = os.path.join(work, "save")
    seeds = tuple(web.seeds) if tls is None else tuple(tls.url(u) for u in web.seeds)
    extra = {} if tls is None else {"tls_ca_file": tls.ca, "http_version": http_version}
    config = parse_config_text("", require_start_urls=False).replace(
        start_urls=seeds, dns_servers=(("127.0.0.1", dns_port),), save_dir=save,
        private_networks="allow",
        state_dir=os.path.join(work, "state"), http_port=0, output_mode="mirror", wait_duration=0.0,
        depth_in_site=web.max_depth(True) + 1, depth_by_site=True, get_cgi=True, pages_connexions=100,
        timeout_page=30.0, forbidden_extensions=(), http_parser=http_parser, **extra)
    conf = os.path.join(work, "larbin.conf")
    with open(conf, "w") as f:
        f.write(changed_keys(config) if source else format_config(config))
    env_python = sys.executable
    command = [env_python, "-m", "larbin_py", "-c", conf]
    if profile:
        command = profiler(profile) + command
    res = await asyncio.get_running_loop().run_in_executor(None, run_child, command, work, source)
    m = re.search(r"pages fetched\s+(\d+)", res["stderr"])
    if res["code"] != 0 or m is None:
        raise RuntimeError(f"larbin_py failed ({res['code']}): {res['stderr'][-2000:]}")
    res["pages"] = int(m.group(1))
    # its own VmHWM: wait4's ru_maxrss would count this process, forked before exec
    res["peak_rss_mb"] = float(re.search(r"peak RSS\s+([0-9.]+) MB", res["stderr"]).group(1))
    return res


async def crawl_scrapy(python: str, web: SimWeb, work: str) -> dict:
    job = {
        "start_urls": web.seeds,
        "hosts": {h.name: h.ip for h in web.hosts.values()},
        "save_dir": os.path.join(work, "save"),
        "out": os.path.join(work, "scrapy.json"),
        "settings": {"CONCURRENT_REQUESTS": 64, "CONCURRENT_REQUESTS_PER_DOMAIN": 4,
                     "DOWNLOAD_DELAY": 0, "AUTOTHROTTLE_ENABLED": False, "DOWNLOAD_TIMEOUT": 30},
    }
    path = os.path.join(work, "job.json")
    with open(path, "w") as f:
        json.dump(job, f)
    res = await asyncio.get_running_loop().run_in_executor(
        None, run_child, [python, os.path.join(HERE, "peers", "scrapy_crawl.py"), path], work)
    if res["code"] != 0:
        raise RuntimeError(f"scrapy failed ({res['code']}): {res['stderr'][-2000:]}")
    with open(job["out"]) as f:
        out = json.load(f)
    res["pages"] = out["pages"]
    res["peak_rss_mb"] = out["peak_rss_mb"]  # its VmHWM (see crawl_larbin)
    return res


def floor_costs(web: SimWeb, port: int, work: str) -> dict:
    """The unavoidable per-page work on this machine, measured on the same pages.

    Each HTML page is fetched from nginx over a kept-alive blocking socket
    (a plain GET, headers read up to Content-Length), parsed by lxml with
    larbin_py's own parser settings (the tree then freed) and written to a
    new file in a per-host directory under ``work`` (create, write, close).
    Each part is timed in this process's CPU time (user + system), so
    nginx's own work is not counted.  Their sum is the floor: a crawler
    that does these three things and nothing else.
    """
    from larbin_py.parse import _byte_parser

    parser = _byte_parser("utf-8", ids=False)  # as the crawl's links are parsed
    cpu = {"fetch": 0.0, "parse": 0.0, "write": 0.0}
    pages = 0
    for host in web.hosts.values():
        if host.cname:
            continue
        pqs = [pq for pq, res in host.resources.items() if res.is_html and res.status == 200]
        if not pqs:
            continue
        folder = os.path.join(work, host.name)
        os.makedirs(folder)
        sock = socket.create_connection((host.ip, port))
        try:
            for i, pq in enumerate(pqs):
                t0 = time.process_time()
                sock.sendall(f"GET {pq} HTTP/1.1\r\nHost: {host.name}:{port}\r\n\r\n".encode())
                data = b""
                while b"\r\n\r\n" not in data:
                    data += sock.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))
                chunks = [body]
                got = len(body)
                while got < length:
                    chunk = sock.recv(65536)
                    chunks.append(chunk)
                    got += len(chunk)
                body = b"".join(chunks)
                t1 = time.process_time()
                root = etree.fromstring(body, parser)
                del root
                t2 = time.process_time()
                fd = os.open(os.path.join(folder, "%d.html" % i), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.write(fd, body)
                os.close(fd)
                t3 = time.process_time()
                cpu["fetch"] += t1 - t0
                cpu["parse"] += t2 - t1
                cpu["write"] += t3 - t2
                pages += 1
        finally:
            sock.close()
    out = {key + "_us": value / pages * 1e6 for key, value in cpu.items()}
    out["floor_us"] = sum(cpu.values()) / pages * 1e6
    out["pages"] = pages
    return out


def bench_web(hosts: int, pages: int) -> tuple[SimWeb, int]:
    """The benchmarks' web: ``hosts`` x ``pages`` pages like real ones (10-60 kB,
    30-150 links), 4 hosts an IP, on 127.0.5.x, and the port nginx will serve it on."""
    if NGINX is None:
        sys.exit("bench: nginx is needed (apt-get install nginx-light)")
    ip_base = "127.0.5.1"
    port = free_port(ip_base)
    cfg = SimConfig(seed=12, hosts=hosts, pages_per_host=(pages, pages),
                    body_size=(10_000, 60_000), links_per_page=(30, 150), hosts_per_ip=4, ip_base=ip_base,
                    extras=False, trap=False, p_loop=0.0, robots_mix={"absent": 3.0, "rules": 1.0, "allow": 1.0},
                    robots_agent="larbin_py")
    return SimWeb.generate(cfg, port), port


@contextlib.asynccontextmanager
async def served(web: SimWeb, port: int, prefix: str = "larbin-bench-web-"):
    """``web`` exported to a temporary folder and served by nginx, its names by a
    sim DNS server; yields the DNS server's port once nginx listens."""
    with tempfile.TemporaryDirectory(prefix=prefix) as site_dir:
        os.chmod(site_dir, 0o755)
        export(web, site_dir)
        nginx_args = ["-p", site_dir, "-e", os.path.join(site_dir, "logs", "error.log"),
                      "-c", os.path.join(site_dir, "nginx.conf")]
        nginx = subprocess.Popen([NGINX, *nginx_args, "-g", "daemon off;"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dns = SimDNSServer(web.dns_records(), host="127.0.0.1", port=0)
        await dns.start()
        try:
            for _ in range(500):  # until nginx listens (it gives no readiness signal)
                try:
                    socket.create_connection((web.hosts["h0.sim.test"].ip, port), timeout=1).close()
                    break
                except OSError:
                    await asyncio.sleep(0.02)
            yield dns.port
        finally:
            await dns.close()
            nginx.terminate()
            nginx.wait()


class TlsWeb:
    """The https copy of a served web: its port, its CA file, and URLs moved to it."""

    def __init__(self, port: int, tls_port: int, ca: str) -> None:
        self.port, self.tls_port, self.ca = port, tls_port, ca

    def url(self, url: str) -> str:
        return url.replace("http://", "https://", 1).replace(f":{self.port}/", f":{self.tls_port}/", 1)


@contextlib.asynccontextmanager
async def served_tls(web: SimWeb, port: int):
    """``web`` exported again and served by a second nginx over https (TLS, HTTP/2 on) on another
    port; yields a :class:`TlsWeb`, or None without trustme (the test extra) to make the CA."""
    try:
        import trustme
    except ImportError:
        print("bench: no https rows (trustme, in the test extra, makes their CA)")
        yield None
        return
    tls_port = free_port(web.ips()[0])
    with tempfile.TemporaryDirectory(prefix="larbin-bench-tls-web-") as site_dir:
        os.chmod(site_dir, 0o755)
        export(web, site_dir)
        ca = trustme.CA()
        leaf = ca.issue_cert("*.sim.test")
        ca_path, cert, key = (os.path.join(site_dir, n) for n in ("ca.pem", "cert.pem", "key.pem"))
        ca.cert_pem.write_to_path(ca_path)
        leaf.private_key_pem.write_to_path(key)
        with open(cert, "wb") as f:
            for blob in leaf.cert_chain_pems:
                f.write(blob.bytes())
        for root, _dirs, files in os.walk(os.path.join(site_dir, "www")):
            for name in files:  # absolute links to the other hosts: to https and its port
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    data = f.read()
                moved = re.sub(rb"(?i)http://", b"https://", data).replace(b":%d/" % port, b":%d/" % tls_port)
                if moved != data:
                    with open(path, "wb") as f:
                        f.write(moved)
        conf_path = os.path.join(site_dir, "nginx.conf")
        with open(conf_path) as f:
            conf = f.read()
        conf = conf.replace("http://", "https://").replace(f":{port}/", f":{tls_port}/")  # redirects
        conf = re.sub(rf"listen ([0-9.]+):{port}( default_server)?;",
                      rf"listen \1:{tls_port} ssl http2\2;", conf)
        conf = conf.replace("https {\n", "http {\n").replace("http {\n", f"http {{\n    ssl_certificate {cert};\n    ssl_certificate_key {key};\n"
                                          "    ssl_session_cache shared:bench:10m;\n", 1)
        with open(conf_path, "w") as f:
            f.write(conf)
        nginx = subprocess.Popen([NGINX, "-p", site_dir, "-e", os.path.join(site_dir, "logs", "error.log"),
                                  "-c", conf_path, "-g", "daemon off;"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(500):  # until nginx listens (it gives no readiness signal)
                try:
                    socket.create_connection((web.hosts["h0.sim.test"].ip, tls_port), timeout=1).close()
                    break
                except OSError:
                    await asyncio.sleep(0.02)
            yield TlsWeb(port, tls_port, ca_path)
        finally:
            nginx.terminate()
            nginx.wait()


async def main_async(args) -> None:
    web, port = bench_web(args.hosts, args.pages)
    python = None if args.no_peer else peer_python("scrapy")
    async with served(web, port) as dns_port, served_tls(web, port) if args.tls else _none() as tls:
        settings = [("larbin_py", "larbin")] \
            + ([("larbin_py, https HTTP/1.1", "larbin_https"), ("larbin_py, https HTTP/2", "larbin_h2")]
               if tls is not None else []) \
            + ([(f"larbin_py, baseline {args.baseline}", "larbin_base")] if args.baseline else []) \
            + ([("larbin_py, h11 reader", "larbin_h11")] if args.h11 else []) \
            + ([("scrapy", "scrapy")] if python else [])
        runs: dict[str, list[dict]] = {key: [] for _l, key in settings}
        floors: list[dict] = []
        for _round in range(args.rounds):
            for _label, key in settings:
                with tempfile.TemporaryDirectory(prefix="larbin-bench-") as work:
                    if key == "larbin":
                        runs[key].append(await crawl_larbin(web, dns_port, work, args.profile))
                    elif key == "larbin_base":
                        runs[key].append(await crawl_larbin(web, dns_port, work, source=args.baseline))
                    elif key == "larbin_h11":
                        runs[key].append(await crawl_larbin(web, dns_port, work, http_parser="h11"))
                    elif key == "larbin_https":
                        runs[key].append(await crawl_larbin(web, dns_port, work, tls=tls, http_version="1.1"))
                    elif key == "larbin_h2":
                        runs[key].append(await crawl_larbin(web, dns_port, work, tls=tls, http_version="2"))
                    else:
                        runs[key].append(await crawl_scrapy(python, web, work))
            with tempfile.TemporaryDirectory(prefix="larbin-bench-floor-") as work:
                floors.append(floor_costs(web, port, work))
    figures, rows = {}, []
    for label, key in settings:
        f = {name: median([r[name] for r in runs[key]]) for name in ("pages", "wall_s", "cpu_s", "user_s", "sys_s", "peak_rss_mb")}
        f["pages_s"] = f["pages"] / f["wall_s"]
        f["pages_per_cpu_s"] = f["pages"] / f["cpu_s"]
        figures[key] = f
        rows.append([label, int(f["pages"]), f["wall_s"], f["cpu_s"], f["user_s"], f["sys_s"], f["pages_s"],
                     f["pages_per_cpu_s"], f["peak_rss_mb"]])
    print(table(f"throughput: {args.hosts} hosts x {args.pages} pages on nginx ({args.rounds} rounds, medians)",
                ["crawler", "pages", "wall s", "CPU s", "user s", "sys s", "pages/s", "pages/CPU-s",
                 "peak RSS MB"], rows))
    floor = {name: median([f[name] for f in floors]) for name in floors[0]}
    larbin_us = figures["larbin"]["cpu_s"] / figures["larbin"]["pages"] * 1e6
    floor["larbin_us"] = larbin_us
    floor["larbin_over_floor"] = larbin_us / floor["floor_us"]
    floor["floor_pages_s"] = 1e6 / floor["floor_us"]
    print(table("the floor: CPU per page of fetching (plain GET), parsing (lxml) and writing (one file), "
                "nothing else", ["piece", "µs/page"],
                [["fetch", floor["fetch_us"]], ["parse", floor["parse_us"]], ["write", floor["write_us"]],
                 ["floor (sum)", floor["floor_us"]], ["larbin_py, all its work", larbin_us]]))
    print(f"larbin_py costs {floor['larbin_over_floor']:.2f}x the floor per page; a crawler at the floor would "
          f"fetch {floor['floor_pages_s']:,.0f} pages/s on one CPU of this machine")
    pages_s = figures["larbin"]["pages_s"]
    verdict = "too small a web to judge" if args.quick else "met" if pages_s >= 1000 else "not met"
    print(f"larbin_py: {pages_s:,.0f} pages/s on one process (aim >= 1,000: {verdict})")
    ratios = {}
    if "larbin_h11" in figures:
        ratios["httptools_over_h11_pages_per_cpu_s"] = (figures["larbin"]["pages_per_cpu_s"]
                                                        / figures["larbin_h11"]["pages_per_cpu_s"])
        print(f"larbin_py reading responses with httptools / with h11 alone: "
              f"{ratios['httptools_over_h11_pages_per_cpu_s']:.2f}x pages per CPU-second")
    for key, what in (("larbin_https", "https HTTP/1.1"), ("larbin_h2", "https HTTP/2")):
        if key in figures:
            ratios[f"{key}_over_http_pages_per_cpu_s"] = (figures[key]["pages_per_cpu_s"]
                                                          / figures["larbin"]["pages_per_cpu_s"])
            extra_us = (figures[key]["cpu_s"] / figures[key]["pages"] - larbin_us / 1e6) * 1e6
            ratios[f"{key}_extra_us_per_page"] = extra_us
            print(f"larbin_py over {what} / over plain HTTP: {ratios[f'{key}_over_http_pages_per_cpu_s']:.2f}x "
                  f"pages per CPU-second ({extra_us:+.0f} µs of CPU a page)")
    if "larbin_base" in figures:
        ratios["over_baseline_pages_per_cpu_s"] = (figures["larbin"]["pages_per_cpu_s"]
                                                   / figures["larbin_base"]["pages_per_cpu_s"])
        print(f"larbin_py / the baseline tree: {ratios['over_baseline_pages_per_cpu_s']:.3f}x pages per CPU-second")
    if "scrapy" in figures:
        ratios["pages_s"] = figures["larbin"]["pages_s"] / figures["scrapy"]["pages_s"]
        ratios["pages_per_cpu_s"] = figures["larbin"]["pages_per_cpu_s"] / figures["scrapy"]["pages_per_cpu_s"]
        print(f"larbin_py / scrapy: {ratios['pages_s']:.1f}x pages/s, "
              f"{ratios['pages_per_cpu_s']:.1f}x pages per CPU-second (aim >= 10x)")
    report("throughput", {"crawlers": figures, "floor": floor, "ratios": ratios, "hosts": args.hosts, "pages": args.pages,
                          "rounds": args.rounds, "quick": args.quick})


@contextlib.asynccontextmanager
async def _none():
    yield None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="20 hosts x 10 pages, one round, no peer")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--hosts", type=int, default=200)
    p.add_argument("--pages", type=int, default=100)
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--no-h11", dest="h11", action="store_false",
                   help="skip the row of larbin_py reading responses with h11 alone")
    p.add_argument("--no-tls", dest="tls", action="store_false",
                   help="skip the rows of larbin_py over https (HTTP/1.1 and HTTP/2)")
    p.add_argument("--profile", metavar="FILE", help="sample larbin_py with py-spy into FILE (collapsed stacks)")
    p.add_argument("--baseline", metavar="DIR", help="a row for larbin_py imported from the source tree DIR (A/B)")
    args = p.parse_args()
    compiled(None, args.baseline)  # bytecode first: no crawl's figures carry the compile
    if args.quick:
        args.rounds, args.hosts, args.pages, args.no_peer, args.h11 = 1, 20, 10, True, False
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main_async(args))


if __name__ == "__main__":
    main()
