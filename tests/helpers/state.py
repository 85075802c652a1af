"""Crawls in a process of their own (``python -m larbin_py``) and their state.

(Moved from tests/test_state.py.)
"""

from __future__ import annotations

import asyncio
import os
import sys
from larbin_py.config import format_config
from larbin_py.sim import SimConfig
from helpers.crawl import ROBOTS_PATHS, TEST_CRAWL_DELAY, read_index


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sim_config(seed: int) -> SimConfig:
    return SimConfig(seed=seed, hosts=60, pages_per_host=(5, 15), hosts_per_ip=4, dns=True,
                     robots_agent="larbin_py", trap=False, extras=False, crawl_delay=TEST_CRAWL_DELAY)


def page_requests(log) -> list[str]:
    return [r.url for r in log.requests if r.path not in ROBOTS_PATHS]


async def start_crawler(conf: str, *args: str, cwd: str) -> asyncio.subprocess.Process:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    err = open(os.path.join(cwd, "crawler.err"), "ab")
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "larbin_py", "-c", conf, *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=err)


def write_conf(tmp_path, config) -> str:
    path = str(tmp_path / "larbin.conf")
    with open(path, "w") as f:
        f.write(format_config(config))
    return path


def check_mirror(save: str, truth) -> dict:
    index = read_index(save)  # fails on a page listed twice
    assert set(index) == set(truth.saved)
    for url, entry in index.items():
        with open(os.path.join(save, entry["path"]), "rb") as f:
            assert f.read() == truth.saved[url], url
    return index
