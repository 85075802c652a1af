"""End-to-end: what bounds a crawl's scope and keeps it from hanging or running away.

lockSite with several start hosts, a site whose robots.txt refuses more URLs
than its FIFO holds, endless redirect chains, and private addresses; each
against the synthetic web or a small server on loopback.
"""

from __future__ import annotations

import dataclasses
import io

import pytest

from larbin_py.demo import crawl_rules
from larbin_py.sim import Sim, SimConfig
from test_e2e import check_conservation, crawl, make_config, page_requests

pytestmark = pytest.mark.slow


@pytest.mark.async_timeout(120)
async def test_lock_site_crawls_every_start_host_and_nothing_else(tmp_path):
    sim_cfg = SimConfig(seed=4, hosts=10, pages_per_host=(4, 10), hosts_per_ip=2, dns=True, extras=False,
                        trap=False, robots_agent="larbin_py", cross_host_ratio=0.4)
    async with Sim(sim_cfg) as sim:
        seeds = tuple(sim.seeds[:3])
        err = io.StringIO()
        config = make_config(tmp_path, sim, start_urls=seeds, lock_site=True, wait_duration=0.0)
        engine, summary = await crawl(config, err=err)
        assert "refused" not in err.getvalue(), err.getvalue()
        locked = {f"h{i}.sim.test" for i in range(3)}
        # lockSite's truth: links to any other host are dropped, as limitToDomain
        # of exactly the start hosts does (the sim has no subdomains here)
        truth = sim.truth(dataclasses.replace(crawl_rules(config, seeds), limit_to_domain=tuple(locked)))
        requested = [r.url for r in page_requests(sim)]
        assert {r.host for r in page_requests(sim)} == locked
        assert set(requested) == truth.must_request
        assert len(requested) == len(set(requested))
        assert summary.rejected.get("outSite", 0) > 0  # other hosts were really linked
        check_conservation(engine, summary)
