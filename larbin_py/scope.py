"""URL include and exclude patterns (``urlInclude``, ``urlExclude``) in linear time.

A crawl may name regular expressions a URL must match (``urlInclude``: at
least one of them, when any is given) and must not match (``urlExclude``:
none of them).  :class:`UrlPatterns` answers, for one normalized URL, the
reason it is refused or None; :class:`larbin_py.rules.UrlRules` asks it
after its own rules, so a refusal is counted under ``notIncluded`` or
``excluded`` like any rule's.

Mechanism.  The patterns are compiled with RE2 (the ``google-re2``
package): an automaton engine whose search time is linear in the length of
the URL, whatever the pattern.  Python's ``re`` backtracks: ``(a+)+$``
against 30 ``a`` and a ``!`` takes seconds, and a hostile site chooses its
URLs; RE2 answers it in microseconds (tests/test_scope.py times it on a
100 KB URL).  The patterns of each block are joined into one alternation,
``(?:p1)|(?:p2)|...``, so a URL costs one search per block, not one per
pattern.  A pattern is *searched* anywhere in the URL (``^`` anchors it at
the start), in the URL's normalized form (scheme and host in lower case,
default port dropped, ``%XX`` escapes upper case: see :mod:`larbin_py.url`).

Limits.  RE2 refuses what it cannot run in linear time: backreferences
(``\\1``) and lookaround (``(?=``, ``(?!``, ``(?<=``); each compiled pattern
may take at most :data:`MAX_PROGRAM_MEMORY` bytes (a pattern such as
``a{1000}{1000}`` is refused, not built).  A pattern holds no white space
(larbin.conf splits a line at it): write ``\\s`` or ``%20``.

Errors.  :func:`check_pattern` raises ``ValueError`` with one line saying
what RE2 found wrong; the configuration reader turns it into
``FILE:LINE: urlInclude: ...`` naming the pattern's line.  Matching itself
never raises.
"""

from __future__ import annotations

from typing import Iterable

from .lazyimport import LazyModule

# RE2 is imported by the first pattern compiled: a crawl without
# urlAccept/urlReject patterns starts without it (about 5 ms).
re2 = LazyModule("re2", globals(), "re2")

__all__ = ["UrlPatterns", "check_pattern", "MAX_PROGRAM_MEMORY", "MAX_PATTERN_LENGTH"]

#: RE2's memory budget for one compiled pattern (its default, stated here).
MAX_PROGRAM_MEMORY = 8 << 20
#: Longest pattern accepted, characters.
MAX_PATTERN_LENGTH = 4096


def _options() -> "re2.Options":
    options = re2.Options()
    options.log_errors = False  # the error is raised to the caller, not printed on stderr
    options.max_mem = MAX_PROGRAM_MEMORY
    return options


def _compile(pattern: str):
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        detail = exc.args[0] if exc.args else ""
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise ValueError(f"bad regular expression {pattern!r}: {detail or 'refused by RE2'}") from None


def check_pattern(pattern: str) -> str:
    """``pattern`` if RE2 compiles it; ValueError (one line) otherwise."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("expected a regular expression, got nothing")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(f"a pattern is at most {MAX_PATTERN_LENGTH} characters, got {len(pattern)}")
    if any(ch.isspace() for ch in pattern):
        raise ValueError(f"a pattern holds no white space (write \\s or %20): {pattern!r}")
    _compile(pattern)
    return pattern


class UrlPatterns:
    """The ``urlInclude`` and ``urlExclude`` patterns of a crawl, compiled once.

    ``check(url)`` is ``"notIncluded"`` when includes are given and none
    matches, ``"excluded"`` when an exclude matches, else None.
    """

    __slots__ = ("include", "exclude", "_include", "_exclude")

    def __init__(self, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> None:
        self.include = tuple(check_pattern(p) for p in include)
        self.exclude = tuple(check_pattern(p) for p in exclude)
        self._include = self._join(self.include)
        self._exclude = self._join(self.exclude)

    @staticmethod
    def _join(patterns: tuple[str, ...]):
        if not patterns:
            return None
        return _compile("|".join(f"(?:{p})" for p in patterns))

    def __bool__(self) -> bool:
        return self._include is not None or self._exclude is not None

    def check(self, url: str) -> str | None:
        """The reason ``url`` is refused by the patterns, or None."""
        if self._include is not None and self._include.search(url) is None:
            return "notIncluded"
        if self._exclude is not None and self._exclude.search(url) is not None:
            return "excluded"
        return None
