"""A crawl state that keeps everything in RAM: the tests' and benchmarks' stand-in
for :class:`larbin_py.crawl_state.LocalState` (the :class:`~larbin_py.crawl_state.CrawlState` seam)."""

from __future__ import annotations

from ..frontier.protocol import Scheduler
from ..state import StateError
from .fakes import MemorySeen

__all__ = ["MemoryState"]


class MemoryState:
    """A :class:`CrawlState` that keeps everything in RAM (tests, benchmarks).

    Nothing survives the process, so there is no ``--reload``: it records
    what the engine tells it (:attr:`outcomes`, the checkpoints' engine
    sections) for a test to check, and ``hold`` lets a test close the
    durability gate.
    """

    def __init__(self, seen=None) -> None:
        self.seen = seen if seen is not None else MemorySeen()
        self.cookies = None
        self.checkpoints = 0
        self.damaged: dict[str, int] = {}
        self.links_on_loop = False
        self.analysis_queue = "analysis"
        self.first_beside = True
        self.inflight = None
        self.may_send = None  # (no IP leases: the fetcher asks nothing)
        #: ``(url, outcome, from_request)`` in the order told.
        self.outcomes: list[tuple[str, str, bool]] = []
        #: The crawl log's lines (larbin_py.crawllog), in the order told.
        self.lines: list[bytes] = []
        self.sections: list[dict] = []
        self.hold = False
        self.gate_asked = 0
        self.opened = self.commits_closed = self.closed = self.abandoned = False

    def frontier_options(self) -> dict:
        return {}

    def attach(self, frontier: Scheduler) -> None:
        pass

    def output_position(self) -> dict | None:
        return None

    def open(self, loop, writer, output, *, frontier, on_durable, on_error) -> None:
        self.opened = True

    def done(self, url: str, outcome: str, from_request: bool, line: bytes | None = None) -> None:
        self.outcomes.append((url, outcome, from_request))
        if line is not None:
            self.lines.append(line)

    def log(self, line: bytes) -> None:
        self.lines.append(line)

    def holds(self, running: int, cap: int) -> bool:
        self.gate_asked += 1
        return self.hold

    def restore(self, frontier: Scheduler, now: float, wall: float, err) -> dict:
        raise StateError("a MemoryState keeps nothing to continue from")

    def report_damage(self, err) -> None:
        pass

    async def checkpoint(self, frontier: Scheduler, now: float, section: dict) -> bool:
        self.checkpoints += 1
        self.sections.append(section)
        return False  # nothing durable: no periodic checkpoints

    def close_commits(self) -> None:
        self.commits_closed = True

    def close(self, frontier: Scheduler, *, broken: bool) -> list[OSError]:
        frontier.close()
        self.seen.close()
        self.closed = True
        return []

    def abandon(self, frontier: Scheduler) -> None:
        self.abandoned = True
        frontier.close()
