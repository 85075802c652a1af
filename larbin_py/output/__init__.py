"""Page outputs: ``mirror``, ``save``, ``warc``, ``stats`` and ``none``.

The engine builds one with :func:`make_output` (from the Config) or
:func:`open_output`, calls ``write(doc)`` once per fetched page,
``flush()`` then ``position()`` at each group commit, ``flush(sync=True)``
then ``position()`` at each checkpoint (and each commit with
``syncCommits``), and ``close()`` at the end -- for disk outputs all on the
writer thread (:mod:`larbin_py.output.writer`).  Every failure to store is an
:class:`OutputError`.  Nothing is ever written outside saveDir.

Imports nothing of the crawler but its version: never the engine, the
frontier, the network, the web server, the analysis stage, the distributed
mode or the synthetic web (tests/test_imports.py).
"""

from __future__ import annotations

from .base import Document, Output, OutputError, OutputStats, parse_index_line, INDEX_NAME
from .mirror import MirrorOutput
from .paths import relpath_to_url, url_to_relpath
from .save import SaveOutput
from .stats import NoOutput, StatsOutput

__all__ = [
    "Document",
    "Output",
    "OutputError",
    "OutputStats",
    "MirrorOutput",
    "SaveOutput",
    "WarcOutput",
    "StatsOutput",
    "NoOutput",
    "MODES",
    "INDEX_NAME",
    "make_output",
    "open_output",
    "parse_index_line",
    "url_to_relpath",
    "relpath_to_url",
]

MODES = ("mirror", "save", "warc", "stats", "none")


def open_output(mode: str, save_dir: str, *, files_per_dir: int = 2000,
                warc_max_size: int = 1 << 30, position: dict | None = None) -> Output:
    """Open the output for ``mode`` in ``save_dir`` (created if needed).

    ``position`` (from an earlier ``position()``) resumes after a crash:
    the index is cut back to its checkpointed length and numbering / the
    WARC file continue from there.  Without it a new crawl starts: the index
    is emptied.  A position taken in another mode is refused.
    """
    if position is not None and position.get("mode", mode) != mode:
        raise OutputError(f"cannot resume a {position.get('mode')!r} output as {mode!r}")
    if mode == "mirror":
        return MirrorOutput(save_dir, position=position)
    if mode == "save":
        return SaveOutput(save_dir, files_per_dir=files_per_dir, position=position)
    if mode == "warc":
        from .warc import WarcOutput  # warcio (and email, six...) only for a WARC crawl

        return WarcOutput(save_dir, max_size=warc_max_size, position=position)
    if mode == "stats":
        return StatsOutput()
    if mode == "none":
        return NoOutput()
    raise OutputError(f"unknown output mode {mode!r} (expected one of {', '.join(MODES)})")


def __getattr__(name: str):
    """``WarcOutput``, imported on first use (PEP 562): warcio costs every other crawl's start."""
    if name == "WarcOutput":
        from .warc import WarcOutput

        return WarcOutput
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_output(config, position: dict | None = None) -> Output:
    """The output a Config asks for (``output_mode``, ``save_dir``, ``files_per_dir``;
    optional ``warc_max_size``)."""
    return open_output(
        getattr(config, "output_mode", "none"),
        getattr(config, "save_dir", "save"),
        files_per_dir=getattr(config, "files_per_dir", 2000),
        warc_max_size=getattr(config, "warc_max_size", 1 << 30),
        position=position,
    )
