"""robots.txt cut at the size cap, through the real engine against the sim.

A robots.txt longer than ``robots.MAX_BODY`` whose cut falls inside
``Disallow: /images/`` made it ``Disallow: /``: the whole site was forbidden
(issue 18).  The engine must parse (and log for ``--reload``) the body
without its partial last line, so the site is crawled whole.
"""

from __future__ import annotations

import pytest

from larbin_py.config import parse_config_text
from larbin_py.engine import Engine
from larbin_py.robots import MAX_BODY
from larbin_py.sim import Sim, SimConfig
from larbin_py.sim.model import RobotsProfile


def _robots_cut_inside(rule: bytes, keep: int, cap: int) -> bytes:
    """A robots.txt of more than ``cap`` octets whose ``rule`` is cut after ``keep`` octets there."""
    head = b"User-agent: *\nDisallow: /nowhere/\n"
    line = b"# " + b"padding " * 15 + b"\n"
    pad = line * ((cap - keep - len(head)) // len(line))
    pad += b"#" * (cap - keep - len(head) - len(pad) - 1) + b"\n"
    body = head + pad + rule + b"\n" + line * 4
    assert body[cap - keep : cap] == rule[:keep] and len(body) > cap
    return body


@pytest.mark.async_timeout(120)
@pytest.mark.parametrize("max_page_size", [5_000_000, 100_000])  # the robots cap; the fetcher's (tooBig)
async def test_a_disallow_cut_at_the_cap_does_not_forbid_the_site(tmp_path, max_page_size):
    sim_cfg = SimConfig(seed=5, hosts=1, pages_per_host=(6, 6), dns=True, extras=False, trap=False,
                        robots_mix={"absent": 1.0}, p_redirect=0, p_loop=0, p_missing=0)
    async with Sim(sim_cfg) as sim:
        (host,) = sim.web.hosts.values()
        host.robots = RobotsProfile("rules", 200, _robots_cut_inside(b"Disallow: /images/", len(b"Disallow: /"),
                                                                    min(MAX_BODY, max_page_size)))
        base = parse_config_text("", require_start_urls=False)
        config = base.replace(
            start_urls=tuple(sim.seeds), dns_servers=(("127.0.0.1", sim.dns_port),),
            save_dir=str(tmp_path / "save"), state_dir=str(tmp_path / "state"), http_port=0,
            output_mode="stats", wait_duration=0.01, timeout_page=3.0, forbidden_extensions=(),
            get_cgi=True, max_page_size=max_page_size)
        engine = Engine(config)
        summary = await engine.run()
        pages = [r for r in sim.log.requests if r.path != "/robots.txt"]
        robots = [r for r in sim.log.requests if r.path == "/robots.txt"]
    assert len(robots) == 1
    assert len(pages) >= 2 and summary.pages >= 2, (summary.forgotten, len(pages))
    assert "forbiddenRobots" not in summary.forgotten, summary.forgotten
