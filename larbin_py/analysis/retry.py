"""When a failed analysis task is tried again: exponential backoff, bounded.

Sans-I/O: the policy says how long to wait after the n-th failed try, or
that the task is done trying; the stage does the waiting.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """``retries`` more tries after the first; the k-th retry waits ``base * 2**(k-1)``, at most ``cap``."""

    retries: int = 3
    base: float = 1.0
    cap: float = 60.0

    def delay(self, failures: int) -> float | None:
        """Seconds to wait before the next try after ``failures`` failed tries; None: no more tries."""
        if failures < 1:
            return 0.0
        if failures > self.retries:
            return None
        return min(self.cap, self.base * (2 ** (failures - 1)))
