"""The sim in a process of its own, so the servers do not share the crawler's CPU.

    async with SimProcess(sim_config) as sp:
        sp.seeds, sp.dns_port, sp.resolve_map      # where to crawl from
        ...                                         # crawl it
    sp.result                                       # what the servers saw

A crawler measured against an in-process sim pays for the sim's work on its
own event loop: its round-trip times then include the time the loop spent
serving pages, which the flow controller reads as server load.  Here the sim
runs in a child (``python bench/simproc.py CONFIG.pickle``) that prints one
JSON line of where it listens, serves until its stdin closes, then prints one
JSON line of what the servers recorded: requests, peak in flight per IP, the
load model's answer times.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


class SimProcess:
    """A :class:`larbin_py.sim.Sim` of ``config`` served by a child process."""

    def __init__(self, config) -> None:
        self.config = config
        self.proc: asyncio.subprocess.Process | None = None
        self.seeds: list[str] = []
        self.dns_port = 0
        self.resolve_map: dict[str, str] = {}
        self.result: dict = {}

    async def __aenter__(self) -> "SimProcess":
        fd, self._path = tempfile.mkstemp(prefix="larbin-sim-", suffix=".pickle")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(self.config, f)
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, os.path.join(HERE, "simproc.py"), self._path,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            limit=1 << 28)  # the last line lists every answer time
        line = await asyncio.wait_for(self.proc.stdout.readline(), 120)
        if not line:
            await self.proc.wait()
            raise RuntimeError(f"the sim child exited with {self.proc.returncode} before listening")
        where = json.loads(line)
        self.seeds, self.dns_port, self.resolve_map = where["seeds"], where["dns_port"], where["resolve_map"]
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.proc is not None
        try:
            self.proc.stdin.close()
            line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
            self.result = json.loads(line) if line else {}
            await asyncio.wait_for(self.proc.wait(), 30)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            os.unlink(self._path)


async def _serve(path: str) -> None:
    from larbin_py.sim import Sim

    with open(path, "rb") as f:
        config = pickle.load(f)
    loop = asyncio.get_running_loop()
    async with Sim(config) as sim:
        out = sys.stdout
        out.write(json.dumps({"seeds": sim.seeds, "dns_port": sim.dns_port,
                              "resolve_map": sim.resolve_map()}) + "\n")
        out.flush()
        done = loop.create_future()

        class _Stdin(asyncio.Protocol):
            def connection_lost(self, exc) -> None:
                if not done.done():
                    done.set_result(None)

        await loop.connect_read_pipe(_Stdin, sys.stdin)
        await done
        srv = sim.server
        out.write(json.dumps({"requests": len(sim.log.requests),
                              "peak_in_flight_ip": srv.peak_in_flight_ip,
                              "load_delays": srv.load_delays}) + "\n")
        out.flush()


if __name__ == "__main__":
    import uvloop

    sys.path.insert(0, os.path.dirname(HERE))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(sys.argv[1]))
