"""Static export (+ nginx serving it) and the standalone command line."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import sys
import tempfile

import pytest

from larbin_py.sim import SimConfig, SimWeb
from larbin_py.sim.client import Client
from larbin_py.sim.export import export, file_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port(ip: str) -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def _export_dir() -> str:
    d = tempfile.mkdtemp(prefix="larbin-sim-export-")
    os.chmod(d, 0o755)  # nginx workers may run as another user
    return d


def test_file_paths():
    assert file_path("/") == "index.html"
    assert file_path("/news/3/") == "news/3/index.html"
    assert file_path("/My%20Doc1.html") == "My Doc1.html"
    assert file_path("/caf%C3%A9.html") == "café.html"
    assert file_path("/shop/item.php?id=3&cat=2") == "__q/shop/item.php@id=3&cat=2"


def test_export_files_equal_served_bodies():
    web = SimWeb.generate(SimConfig(hosts=30, seed=4), 8080)
    d = _export_dir()
    try:
        counts = export(web, d)
        assert counts["hosts"] == len(web.hosts) and counts["redirects"] > 0
        n = 0
        for h in web.hosts.values():
            for pq, res in h.resources.items():
                if res.status == 200:
                    with open(os.path.join(d, "www", h.name, file_path(pq)), "rb") as f:
                        assert f.read() == res.body, (h.name, pq)
                    n += 1
            if h.robots.kind in ("rules", "patterns", "allow", "delay", "agent", "oversized"):
                with open(os.path.join(d, "www", h.name, "robots.txt"), "rb") as f:
                    assert f.read() == h.robots.body
        assert n > 100
        conf = open(os.path.join(d, "nginx.conf")).read()
        for h in web.hosts.values():
            assert f"listen {h.ip}:8080;" in conf and f"server_name {h.name};" in conf
        assert "/var/" not in conf and "/etc/" not in conf
    finally:
        shutil.rmtree(d)


NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


@pytest.mark.async_timeout(60)
async def test_nginx_accepts_and_serves_the_export():
    if NGINX is None:
        pytest.fail("nginx is needed to check the export: apt-get install nginx-light (.ci/run installs it)")
    cfg = SimConfig(hosts=12, seed=4, ip_base="127.0.9.1")
    port = _free_port("127.0.9.1")
    web = SimWeb.generate(cfg, port)
    d = _export_dir()
    args = ["-p", d, "-e", os.path.join(d, "logs", "error.log"), "-c", os.path.join(d, "nginx.conf")]
    try:
        export(web, d)
        check = await asyncio.create_subprocess_exec(NGINX, "-t", *args, stdout=asyncio.subprocess.PIPE,
                                                     stderr=asyncio.subprocess.STDOUT)
        out = (await check.communicate())[0].decode()
        assert check.returncode == 0 and "test is successful" in out, out
        proc = await asyncio.create_subprocess_exec(NGINX, *args, "-g", "daemon off;",
                                                    stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.DEVNULL)
        try:
            h0 = web.hosts["h0.sim.test"]
            client = None
            for _ in range(200):  # until nginx listens (bounded)
                try:
                    client = await Client.connect(h0.ip, port)
                    break
                except OSError:
                    await asyncio.sleep(0.02)  # poll: nginx gives no readiness signal
            assert client is not None
            await client.close()
            checked = 0
            for h in list(web.hosts.values())[:8]:
                c = await Client.connect(h.ip, port)
                for pq, res in list(h.resources.items())[:6]:
                    r = await c.get(h.name, pq)
                    if res.status == 200:
                        assert r.status == 200 and r.body == res.body, (h.name, pq)
                        checked += 1
                    elif res.location is not None and "?" not in pq:
                        assert r.status == res.status and r.headers["location"] == res.location
                await c.close()
            assert checked >= 20
        finally:
            proc.terminate()
            await proc.wait()
    finally:
        shutil.rmtree(d)


@pytest.mark.async_timeout(60)
async def test_standalone_cli_serves_until_sigint():
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbin_py.sim", "--hosts", "10", "--seed", "2",
        "--ip-base", "127.0.8.1", "--hosts-per-ip", "2", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        lines = []
        while True:
            line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
            assert line, (lines, (await proc.stderr.read()).decode())
            lines.append(line)
            if line.strip() == "ready":
                break
        text = "".join(lines)
        port = int(re.search(r"http: port (\d+) on (\d+) IPs 127\.0\.8\.1\.\.", text).group(1))
        dns_port = int(re.search(r"dns: 127\.0\.0\.1:(\d+)", text).group(1))
        assert dns_port > 0
        seed = re.search(r"seed: (\S+)", text).group(1)
        assert seed == f"http://h0.sim.test:{port}/"
        c = await Client.connect("127.0.8.1", port)
        r = await c.get("h0.sim.test", "/")
        assert r.status == 200 and b"<html>" in r.body
        await c.close()
        proc.send_signal(signal.SIGINT)
        rest = (await asyncio.wait_for(proc.stdout.read(), 20)).decode()
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert "stopped after 1 requests" in rest
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
