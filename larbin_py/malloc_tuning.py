"""Keep glibc's allocator from holding on to freed memory (a crawl's RSS flat).

glibc serves a request above the *mmap threshold* (128 KiB at start) with
its own mapping, given back to the kernel when freed.  But the threshold is
dynamic: each time such a block is freed, the threshold rises to its size
(up to 32 MiB).  After the first large numpy array is freed (the seen store's
merges and filters, a parse's buffers), arrays of up to that size come from
the heap instead, where a freed block that the next, larger one cannot
reuse stays in the process: RSS rose in steps of 6-8 MB, each a bigger
array than the last, every merge of the array store (bench/memory.py
measures it with ``mallinfo2``).  :func:`limit_retention` pins the
threshold (setting it turns the dynamic adjustment off), so large blocks
always go back on free; :func:`trim` returns the free pages of the heaps
after a burst of allocations (a merge).

Both are no-ops where the C library is not glibc.
"""

from __future__ import annotations

import ctypes

__all__ = ["limit_retention", "trim", "heap_stats"]

_M_MMAP_THRESHOLD = -3
#: Blocks from this size up are mappings of their own, returned to the kernel when freed.
MMAP_THRESHOLD = 256 * 1024


def _libc():
    # The process's own symbols (dlopen(NULL)): the C library the interpreter
    # runs on.  ctypes.util.find_library ran ``ldconfig -p`` in a child
    # process at every crawl's start (10-20 ms).
    try:
        lib = ctypes.CDLL(None)
    except OSError:
        return None
    return lib if hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim") else None


_LIBC = _libc()


def limit_retention(threshold: int = MMAP_THRESHOLD) -> bool:
    """Pin glibc's mmap threshold at ``threshold`` bytes; True when done."""
    return bool(_LIBC is not None and _LIBC.mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def trim() -> None:
    """Give the heaps' free pages back to the kernel (a few ms at most)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def heap_stats() -> dict[str, int] | None:
    """glibc's ``mallinfo2``: heap bytes (``arena``), in use, free, in mappings; None elsewhere."""
    fn = getattr(_LIBC, "mallinfo2", None) if _LIBC is not None else None
    if fn is None:
        return None
    fn.restype = _MallInfo2
    info = fn()
    return {"heap": info.arena, "in_use": info.uordblks, "free": info.fordblks, "mapped": info.hblkhd}
