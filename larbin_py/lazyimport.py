"""A module imported on its first use, so that a process starts without it.

``np = LazyModule("numpy", globals(), "np")`` binds a stand-in: the first
attribute read on it (``np.array``) imports the module, rebinds the name in
``namespace`` to the real module (later reads cost nothing) and, when given,
calls ``then(module)`` first (to set constants derived from it, as
``_U64 = np.uint64``).  The crawl's modules use it for what a crawl may
never need: numpy for the seen stores' sorted arrays (a crawl of fewer than
16 Ki URLs never seals one) is about a third of a crawler's import time.

Limits: only attribute reads trigger the import (``isinstance(x, np.ndarray)``
does; passing ``np`` itself around does not).  An import error surfaces at
the first use, as the ``ImportError`` it is.  Importing takes the import
lock: a second thread using the module meanwhile waits for it.
"""

from __future__ import annotations

import importlib
import threading

__all__ = ["LazyModule"]

_lock = threading.Lock()


class LazyModule:
    """``module``, imported when an attribute is first read (see the module docstring)."""

    def __init__(self, module: str, namespace: dict, name: str, then=None) -> None:
        self._module = module
        self._namespace = namespace
        self._name = name
        self._then = then

    def __getattr__(self, attr: str):
        if attr.startswith("__"):  # copy, pickle and friends probing the stand-in
            raise AttributeError(attr)
        with _lock:
            mod = importlib.import_module(self._module)
            if self._namespace.get(self._name) is self:
                if self._then is not None:
                    self._then(mod)
                self._namespace[self._name] = mod
        return getattr(mod, attr)

    def __repr__(self) -> str:
        return f"<{self._module}, imported on first use>"
