"""docs/configuration.md, made from the schema: every key with its default, its values and its use.

:func:`markdown` renders the page from :data:`~larbin_py.config.KEYS` and
the defaults of :class:`~larbin_py.config.Config`'s fields, nothing else:
a key added to the schema is in the page once it is generated again
(``python -m larbin_py.config --markdown > docs/configuration.md``), and
tests/test_config.py fails while the page in the tree differs from what
this makes, so the page cannot fall behind the keys.

The output is the same on every machine: a default that depends on the
machine or the release (``dnsServers``, ``analysisWorkers``, ``UserAgent``)
is the words of its key's ``default_text``, never this machine's value.  A
default too long for a cell (``forbiddenExtensions``) is listed under a
heading below the table, linked from its cell.  Text in cells is escaped for Markdown
(``|``, ``*``, ``_``, ``<``, ``>``): the descriptions are plain sentences.
"""

from __future__ import annotations

import dataclasses

from .keys import Key
from .schema import KEYS, Config

__all__ = ["markdown"]

COMMAND = "python -m larbin_py.config --markdown > docs/configuration.md"

#: A default longer than this is listed below the table.
_LONG = 60

_HEAD = f"""\
# Configuration keys

<!-- Generated from larbin_py/config/schema.py by `{COMMAND}`:
do not edit; tests/test_config.py fails while this page differs from the schema. -->

Every key of larbin.conf, in the order `--print-config` writes them, with
its default, the values it takes and what it does.  The file's syntax
(switches, blocks up to `end`, repeated keys, comments) is at the top of
the shipped [larbin.conf](../larbin.conf), which also shows each key with
a longer explanation; a key left out takes its default.
`--set KEY=VALUE` sets a key from the command line, and
`larbin --print-config` prints the configuration in effect.

- Integers take `low..high` (both ends included), seconds and other
  numbers `[low, high]`, or `(low, high]` when the low end is excluded;
  nan and inf are never taken.  A value out of range, or of the wrong
  kind, is an error naming the file, the line, the key and what it takes.
- A switch is on when its key stands alone, off with `false` (or `no`,
  `off`, `0`).
- A repeatable key's lines add up (several `startUrl` lines are all
  start URLs); any other key given twice is an error.
- Secrets (`httpToken`, `zkAuth`'s password, a password in a URL) are
  shown as `***` in every message and in `--print-config`.
- A key is also accepted written in another case (`useragent`) or as its
  Config attribute (`user_agent`).
"""


def _escape(text: str) -> str:
    """``text`` safe in a Markdown table cell."""
    for char, escaped in (("\\", "\\\\"), ("|", "\\|"), ("*", "\\*"), ("_", "\\_"), ("<", "&lt;"),
                          (">", "&gt;")):
        text = text.replace(char, escaped)
    return text


def _code(text: str) -> str:
    """``text`` as a code span in a table cell (a '|' inside escaped, as tables require)."""
    return f"`{text.replace('|', chr(92) + '|')}`"


def _anchor(key: Key) -> str:
    """The anchor of the heading ``Default NAME`` (lower case, spaces as '-', as GitHub makes it)."""
    return f"default-{key.name.lower()}"


def _defaults() -> dict[str, object]:
    """Each key's default value, by attribute (a factory's value is never asked for)."""
    return {f.name: f.default for f in dataclasses.fields(Config) if f.default is not dataclasses.MISSING}


def markdown() -> str:
    """The text of docs/configuration.md."""
    defaults = _defaults()
    rows = ["| Key | Config attribute | Default | Values | What it does |",
            "| --- | --- | --- | --- | --- |"]
    long: list[tuple[Key, str]] = []
    for key in KEYS:
        if key.default_text is not None:
            default = _escape(key.default_text)
        else:
            shown = key.describe(defaults[key.attr])
            if len(shown) > _LONG:
                long.append((key, shown))
                default = f"[{len(shown.split())} words, listed below](#{_anchor(key)})"
            else:
                default = _code(shown)
        values = key.values() + ("; repeatable" if key.repeatable else "")
        rows.append(f"| `{key.name}` | `{key.attr}` | {default} | {_escape(values)} | {_escape(key.doc)} |")
    out = [_HEAD, *rows, ""]
    if long:
        out += ["## Long defaults", ""]
    for key, shown in long:
        out += [f"### Default {key.name}", "", _code(shown), ""]
    return "\n".join(out)
