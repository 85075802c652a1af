"""The edge's vocabularies, without the edge: what the configuration checks values against.

``httpParser``'s :data:`PARSERS`, ``httpVersion``'s :data:`HTTP_VERSIONS`
(and :data:`H2_AVAILABLE`, whether the optional h2 package is installed:
found on the path, not imported) and ``tlsCaMode``'s :data:`CA_MODES`.
larbin_py.net.http and larbin_py.net.tls use them from here, so that
reading a configuration (larbin_py.config: ``--print-config``, a bad key's
error) does not import asyncio, ssl, h11 or h2: that was 60-90 ms before
the first line of a crawl's work.  Plain constants; no I/O beyond the
import system's look-up of ``h2``.
"""

from __future__ import annotations

from importlib.util import find_spec

__all__ = ["PARSERS", "HTTP_VERSIONS", "H2_AVAILABLE", "CA_MODES"]

#: How responses are read: llhttp with h11 as the referee, or h11 alone (``httpParser``).
PARSERS: tuple[str, ...] = ("httptools", "h11")
#: ``httpVersion``: 1.1 only; h2 when the server offers it by ALPN (auto); h2 alone offered (2).
HTTP_VERSIONS: tuple[str, ...] = ("1.1", "2", "auto")
#: HTTP/2 can be spoken (the h2 package is installed; found, not imported).
H2_AVAILABLE: bool = find_spec("h2") is not None
#: ``tlsCaMode``: the file's CAs besides the system's, or instead of them.
CA_MODES: tuple[str, ...] = ("add", "only")
