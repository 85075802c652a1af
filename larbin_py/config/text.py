"""larbin.conf text in and out: :func:`parse_config_text`, :func:`load_config`,
:func:`format_config`, and the demo's built-in configuration.

The reader walks the text line by line (the format is in the package's
docstring, larbin_py.config): each line's first word is looked up among the
schema's keys (its name, any case of it, or the Config attribute), the key
reads the rest (a block's words up to ``end``, over as many lines as
needed), and every problem becomes a :class:`ConfigError` naming the file,
the line and the key.  ``--set`` and ``--seed`` values go through the same
keys, located as ``--set:N`` / ``--seed:N``.  Once every value is read the
:class:`Config` is built, which checks the rules between keys; such an
error is located on the line that set the key it names.

The only I/O here is :func:`load_config`'s read of the file and, for the
default ``dnsServers``, a resolv.conf.
"""

from __future__ import annotations

import difflib
import os
from typing import Any, Iterable, cast

from .. import __version__
from .errors import Bad, ConfigError
from .keys import Key, Words
from .schema import BY_ATTR, BY_LOWER, BY_NAME, KEYS, Config, read_resolv_conf

__all__ = ["DEMO_CONFIG_TEXT", "demo_config", "format_config", "load_config", "parse_config_text"]

Location = tuple[str, int | None]


def _lookup(word: str) -> Key | None:
    return BY_NAME.get(word) or BY_ATTR.get(word) or BY_LOWER.get(word.lower())


def _unknown(word: str) -> str:
    if word == "end":
        return "'end' without a block to close"
    lowered = {name.lower(): name for name in BY_NAME}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f"unknown key (did you mean {lowered[close[0]]}?)" if close else "unknown key"


def _words(line: str) -> list[str]:
    """A line's words, up to a comment (a word beginning with '#')."""
    words = line.split()
    for i, word in enumerate(words):
        if word.startswith("#"):
            return words[:i]
    return words


def _read_lines(text: str, filename: str, values: dict[str, Any], where: dict[str, Location]) -> None:
    """Fill ``values`` (by key name) and ``where`` from larbin.conf ``text``."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        words = _words(lines[i])
        i += 1
        if not words:
            continue
        key = _lookup(words[0])
        if key is None:
            raise ConfigError(filename, lineno, words[0], _unknown(words[0]))
        if key.name in where and not key.repeatable:
            raise ConfigError(filename, lineno, key.name,
                              f"set twice (first on line {where[key.name][1]}); only startUrl, "
                              "dnsServers and the blocks may repeat")
        if key.block:
            items: list[tuple[str, int]] = []
            rest, at = words[1:], lineno
            while "end" not in rest:
                items.extend((word, at) for word in rest)
                if i >= len(lines):
                    hint = next((f" (is line {n} '{w}' a key? close the block before it)"
                                 for w, n in items if w in BY_NAME), "")
                    raise ConfigError(filename, lineno, key.name,
                                      f"block begun on this line has no 'end'{hint}")
                rest, at = _words(lines[i]), i + 1
                i += 1
            end = rest.index("end")
            items.extend((word, at) for word in rest[:end])
            if rest[end + 1:]:
                raise ConfigError(filename, at, key.name,
                                  f"unexpected text after 'end': {' '.join(rest[end + 1:])!r}")
            read: list[Any] = []
            if key.by_line:  # one item a line (dynamicPages, urlInclude, urlExclude, site)
                by_line: dict[int, list[str]] = {}
                for word, n in items:
                    by_line.setdefault(n, []).append(word)
                for n, line_words in by_line.items():
                    try:
                        read.append(key.item_line(line_words))  # type: ignore[attr-defined]
                    except Bad as exc:
                        raise ConfigError(filename, n, key.name, str(exc)) from None
            else:
                for word, n in items:
                    try:
                        read.append(cast(Words, key).item(word))  # a block is a list of words
                    except Bad as exc:
                        raise ConfigError(filename, n, key.name, str(exc)) from None
            value = tuple(read)
        elif key.repeatable and len(words) == 1:
            raise ConfigError(filename, lineno, key.name, "expected at least one value, got nothing")
        else:
            try:
                value = key.parse(words[1:])
            except Bad as exc:
                raise ConfigError(filename, lineno, key.name, str(exc)) from None
        if key.repeatable and key.name in values:
            value = values[key.name] + value
        values[key.name] = value
        where.setdefault(key.name, (filename, lineno))


def parse_config_text(
    text: str,
    filename: str = "<string>",
    overrides: Iterable[tuple[str, str]] = (),
    *,
    require_start_urls: bool = True,
    extra_start_urls: Iterable[str] = (),
    resolv_conf: str | os.PathLike[str] | None = None,
) -> Config:
    """The Config of larbin.conf ``text`` (``filename`` names it in errors).

    ``overrides``: ``(key, value)`` pairs (``--set``) replacing the file's
    values.  ``extra_start_urls`` (``--seed``) are added after the file's
    ``startUrl``s.  ``require_start_urls``: no start URL at all is an error.
    ``resolv_conf``: where the default ``dnsServers`` come from when the text
    sets none (default: this machine's /etc/resolv.conf, read once).
    Raises :class:`ConfigError`.
    """
    values: dict[str, Any] = {}
    where: dict[str, Location] = {}
    _read_lines(text, filename, values, where)

    for n, (name, raw) in enumerate(overrides, 1):
        key = _lookup(name)
        if key is None:
            raise ConfigError("--set", n, name, _unknown(name))
        try:
            values[key.name] = key.parse(raw.split())
        except Bad as exc:
            raise ConfigError("--set", n, key.name, str(exc)) from None
        where[key.name] = ("--set", n)

    seeds = []
    for n, url in enumerate(extra_start_urls, 1):
        try:
            seeds.append(cast(Words, BY_NAME["startUrl"]).item(url))
        except Bad as exc:
            raise ConfigError("--seed", n, "startUrl", str(exc)) from None
        where.setdefault("startUrl", ("--seed", n))
    if seeds:
        values["startUrl"] = values.get("startUrl", ()) + tuple(seeds)

    if require_start_urls and not values.get("startUrl"):
        raise ConfigError(filename, None, "startUrl",
                          "no start URL (add a 'startUrl URL' line, or pass --seed URL)")
    if "dnsServers" not in values and resolv_conf is not None:
        values["dnsServers"] = read_resolv_conf(resolv_conf)

    kwargs = {BY_NAME[name].attr: value for name, value in values.items()}
    try:
        config = Config(**kwargs, source=filename)
    except ConfigError as exc:
        # Only cross-key problems get here (each value was checked when read):
        # locate them on the line that set the key, or the file if a default.
        file, line = where.get(exc.key or "", (filename, None))
        raise ConfigError(file, line, exc.key, exc.message) from None
    return config


def load_config(
    path: str | os.PathLike[str],
    overrides: Iterable[tuple[str, str]] = (),
    *,
    require_start_urls: bool = True,
    extra_start_urls: Iterable[str] = (),
    resolv_conf: str | os.PathLike[str] | None = None,
) -> Config:
    """The Config of the larbin.conf at ``path``; see :func:`parse_config_text`.

    An unreadable file raises ``ConfigError``: ``PATH: cannot read: REASON``.
    """
    filename = os.fspath(path)
    try:
        with open(filename, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise ConfigError(filename, None, None,
                          f"cannot read: {exc.strerror or exc.__class__.__name__}") from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is tolerated
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(filename, line, None, f"cannot read: not UTF-8 text (byte {exc.start})") from None
    return parse_config_text(text, filename, overrides, require_start_urls=require_start_urls,
                             extra_start_urls=extra_start_urls, resolv_conf=resolv_conf)


def format_config(config: Config, *, redact: bool = False) -> str:
    """larbin.conf text for ``config``: every key, in the schema's order.

    ``parse_config_text(format_config(c), require_start_urls=False) == c``.
    Unset optional values (an empty ``From``, no ``proxy``, no
    ``httpToken``, no ``startUrl``) are written as comments.

    ``redact``: for a person to read (``--print-config``): ``httpToken``,
    ``zkAuth``'s password and every URL's password are ``***`` (the text no
    longer reads back to ``config``).  Without it the text holds the
    secrets: write it only to a file of mode 0600 (larbin_py.owner_only), as
    the launcher does.
    """
    out = [f"# larbin_py {__version__} configuration"]
    if config.source:
        out[0] += f" (read from {config.source})"
    for key in KEYS:
        value = getattr(config, key.attr)
        lines = key.format_hidden(value) if redact else key.format(value)
        out.extend(lines or [f"# {key.name} (not set)"])
    return "\n".join(out) + "\n"


#: The built-in configuration of ``--demo`` when no larbin.conf exists: the
#: engine serves a synthetic web on loopback and supplies the seeds.
DEMO_CONFIG_TEXT = """\
# larbin_py --demo: crawl the built-in synthetic web on loopback.
From         demo@localhost.invalid
outputMode   stats
httpPort     8081
waitDuration 0.5
saveDir      demo-save
stateDir     demo-state
"""


def demo_config(overrides: Iterable[tuple[str, str]] = (), extra_start_urls: Iterable[str] = ()) -> Config:
    """The Config of :data:`DEMO_CONFIG_TEXT` with ``overrides`` applied."""
    return parse_config_text(DEMO_CONFIG_TEXT, "<demo>", overrides, require_start_urls=False,
                             extra_start_urls=extra_start_urls)
