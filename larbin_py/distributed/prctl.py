"""Linux ``prctl`` for the processes the distributed mode starts (ctypes; a
no-op where there is none).

* :func:`set_pdeathsig`: in a child, get ``sig`` when the thread that
  started it dies, so a killed launcher leaves no redis-server, zygote or
  worker behind;
* :func:`set_name`: the name ``ps -o comm`` and ``/proc/<pid>/comm`` show
  (15 bytes at most).
"""

from __future__ import annotations

import signal

__all__ = ["set_pdeathsig", "set_name"]

PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15


def _prctl(option: int, arg) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0
    except Exception:  # not Linux, no libc: nothing to do
        return False


def set_pdeathsig(sig: int = signal.SIGTERM) -> bool:
    """In a child: receive ``sig`` when the parent dies."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


def set_name(name: str) -> bool:
    """This process's name, cut to 15 bytes."""
    return _prctl(PR_SET_NAME, name.encode()[:15])
