"""Run every benchmark in turn: ``python bench/run_all.py [--quick]``.

Each benchmark prints its table and ends with one JSON line; this script
runs them one after the other (never two at once: the machine is shared and
timing-sensitive) and ends with one JSON line listing each one's exit code.
``--quick`` passes ``--quick`` to each (a few seconds each, no peers): what
CI runs to keep the scripts working.  Speed is never asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = ["dns.py", "hotpath.py", "parse.py", "throughput.py", "politeness.py", "flow_control.py",
           "concurrency.py", "memory.py", "dynamic.py", "distributed_redis.py", "distributed.py", "analysis.py", "speed.py",
           "sim.py"]


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    codes = {}
    for name in BENCHES:
        print(f"\n=== bench/{name}{' --quick' if quick else ''}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, os.path.join(HERE, name)] + (["--quick"] if quick else []),
                              cwd=HERE)
        codes[name] = {"code": proc.returncode, "seconds": round(time.monotonic() - t0, 1)}
    print(json.dumps({"bench": "run_all", "quick": quick, "results": codes}, sort_keys=True))
    return 0 if all(c["code"] == 0 for c in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
