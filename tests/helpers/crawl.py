"""One crawl of the synthetic web in this process and its checks: the config
(:func:`make_config`), the sim's page requests, politeness, robots.txt first,
conservation, the outputs' index and files.

(Moved from tests/test_e2e.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from larbin_py.config import parse_config_text
from larbin_py.engine import Engine
from larbin_py.sim import Sim


#: Paths of robots.txt requests: the file, and where the sim's "redirect"
#: robots profile sends it.
ROBOTS_PATHS = frozenset({"/robots.txt", "/robots-rules.txt"})


def page_requests(sim) -> list:
    """The sim's logged requests that are not for robots.txt."""
    return [r for r in sim.log.requests if r.path not in ROBOTS_PATHS]


#: Server-side measurement slack: the sim logs a request when it arrives,
#: after a connect or a write the crawler does not control.
SLACK = 0.015

#: The Crawl-delay of the sim's "delay" robots.txt in the tests' webs (the sim's own
#: 0.3-0.5 s made such a host of 30 pages the last one crawled, 15 s; still above the
#: tests' waitDuration, so the delay is what spaces those hosts).  test_e2e checks
#: the delay's spacing with the sim's own range.
TEST_CRAWL_DELAY = (0.12, 0.2)


def make_config(tmp_path, sim: Sim, **changes):
    base = parse_config_text("", require_start_urls=False)
    values = dict(
        start_urls=tuple(sim.seeds),
        dns_servers=(("127.0.0.1", sim.dns_port),),
        private_networks="allow",  # the synthetic web lives on loopback
        save_dir=str(tmp_path / "save"),
        state_dir=str(tmp_path / "state"),
        http_port=0,
        output_mode="stats",
        wait_duration=0.2,
        timeout_page=1.5,
        connect_timeout=1.5,
        forbidden_extensions=(),
        get_cgi=True,
        depth_by_site=True,
        depth_in_site=max(5, sim.web.max_depth(True)),
        pages_connexions=100,
        dns_connexions=20,
        dns_retry_delay=0.1,  # the sim's dead names given up in 0.7 s, not 14
        robots_retry_delay=0.1,  # a robots.txt answering 5xx given up in 0.3 s, not 3
    )
    values.update(changes)
    return base.replace(**values)


async def crawl(config, **kw):
    engine = Engine(config, **kw)
    summary = await engine.run()
    return engine, summary


def check_conservation(engine, summary):
    fr = engine.frontier
    taken, accounted = fr.conservation()
    assert taken == accounted
    assert summary.taken == summary.pages + sum(summary.forgotten.values()) + summary.queued + summary.in_flight
    assert summary.queued == 0 and summary.in_flight == 0


def _around(log, gap, span: float = 2.0, most: int = 16) -> str:
    """The requests to the IP of a politeness ``gap`` (``(label, key, a, b)``) ``span`` seconds
    either side, and the connections they came on: what a rare failure leaves to read."""
    _label, _key, a, b = gap
    reqs = sorted((r for r in log.requests if r.server_ip == a.server_ip and a.t - span <= r.t <= b.t + span),
                  key=lambda r: r.t)
    at = next((i for i, r in enumerate(reqs) if r is a), 0)
    reqs = reqs[max(0, at - most // 2):at + most // 2]
    conns = {r.conn for r in reqs}
    lines = [f"  t {r.t:.3f} {r.t - a.t:+.3f} conn {r.conn} port {r.client_port} {r.host}{r.target} -> {r.status}"
             f"{' fault ' + r.fault if r.fault else ''} late {r.late:.3f}" for r in reqs]
    opened = [f"  conn {c.id} port {c.client_port} opened {c.opened:.3f} closed "
              f"{'-' if c.closed is None else f'{c.closed:.3f}'}" for c in log.connections.values() if c.id in conns]
    return f"\nrequests to {a.server_ip} around the first gap:\n" + "\n".join(lines + opened)


def check_politeness(sim: Sim, wait: float, floor: float | None = None, *, connections: bool = True):
    """Requests to one host or one IP at least ``floor`` (default ``wait - SLACK``)
    apart; one connection per IP at a time (unless ``connections`` is False).  A
    failure names the two requests (arrival time, connection, client port,
    target, how late the sim read them)."""
    log = sim.log
    floor = wait - SLACK if floor is None else floor
    close = log.too_close(floor)
    assert not close, "asked too often: " + "; ".join(
        f"{label} {key}: {b.t - a.t:.3f} s between " + " and ".join(
            f"[t {r.t:.3f} conn {r.conn} port {r.client_port} {r.target} late {r.late:.3f}]" for r in (a, b))
        for label, key, a, b in close[:3]) + _around(log, close[0])
    if not connections:
        return
    for ip, spans in log.spans_by_ip().items():
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            assert b0 >= a1 - SLACK, f"two connections open to {ip} at once"


def check_robots_first(sim: Sim):
    first: dict[str, str] = {}
    for r in sim.log.requests:
        first.setdefault(r.host, r.path)
    for host, path in first.items():
        assert path == "/robots.txt", f"{host}: first request was {path}"


def covered_urls(sim: Sim) -> set[str]:
    """URLs the sim answered normally at least once (no fault applied)."""
    return {r.url for r in page_requests(sim) if not r.fault}


def read_index(save_dir) -> dict[str, dict]:
    """URL -> its parsed index.tsv line; each URL listed once."""
    from larbin_py.output.base import INDEX_NAME, parse_index_line

    out = {}
    with open(os.path.join(save_dir, INDEX_NAME), encoding="utf-8") as f:
        for line in f:
            entry = parse_index_line(line.rstrip("\n"))
            assert entry["url"] not in out, f"{entry['url']} listed twice in the index"
            out[entry["url"]] = entry
    return out


def files_under(root) -> set[str]:
    found = set()
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            found.add(os.path.relpath(os.path.join(dirpath, name), root))
    return found


@contextlib.asynccontextmanager
async def loop_gaps(probe=None, every: float = 0.005):
    """``(gaps, samples)`` while the block runs: the seconds between the turns of a ticker
    on the running loop (work that holds the loop shows as one long gap), and
    ``probe()``'s value at each turn when it gives one (None: nothing sampled)."""
    gaps: list[float] = []
    samples: list = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            if probe is not None:
                value = probe()
                if value is not None:
                    samples.append(value)

    task = asyncio.ensure_future(tick())
    try:
        yield gaps, samples
    finally:
        task.cancel()
