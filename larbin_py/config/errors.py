"""The configuration's two errors: :class:`ConfigError` (public, located) and
:class:`Bad` (a value problem before it is located).

A key's checks (larbin_py.config.keys) raise :class:`Bad` with a sentence
about the value alone ("expected an integer in 1..100, got 'abc'"); the
reader (larbin_py.config.text) or the :class:`~larbin_py.config.Config`
itself turns it into a :class:`ConfigError` naming the file, the line and
the key.  Every message passes through :func:`larbin_py.redact.redact_text`
on its way out, the net under the keys' own hiding of their secrets.
"""

from __future__ import annotations

from ..redact import redact_text

__all__ = ["Bad", "ConfigError"]


class ConfigError(Exception):
    """A configuration problem, located: ``str()`` is ``FILE:LINE: key: message``.

    ``filename`` is the file (``--set``/``--seed`` for command-line values,
    None for a Config built in code), ``line`` the 1-based line or None when
    the problem is not on one line (a missing file, a missing key), ``key``
    the larbin.conf key or None.
    """

    def __init__(self, filename: str | None, line: int | None, key: str | None, message: str):
        self.filename = filename
        self.line = line
        self.key = key
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = []
        if self.filename is not None:
            parts.append(f"{self.filename}:{self.line}" if self.line else self.filename)
        if self.key:
            parts.append(self.key)
        parts.append(self.message)
        # the net under every message: a URL's password never shown (the keys hide their own values)
        return redact_text(": ".join(parts).replace("\n", " "))


class Bad(Exception):
    """A value problem, before it is located (internal to larbin_py.config)."""
