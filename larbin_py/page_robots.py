"""Page-level robots rules: ``noindex`` and ``nofollow`` (meta robots, X-Robots-Tag), ``rel=canonical``.

robots.txt says what may be fetched; a page says, once fetched, whether it
may be kept (``noindex``), whether its links may be followed
(``nofollow``), and which URL is its true address (``rel=canonical``).
:func:`read` gathers what one answer says, sans-I/O, in a
:class:`PageDirectives`; :class:`larbin_py.pages.PageHandler` applies it
(``respectNoindex``: not saved, counted ``noindex``, links still followed
unless nofollow; ``followCanonical``: not saved, counted
``canonicalised``, the canonical URL queued instead).

Where the directives come from:

* the ``X-Robots-Tag`` response headers, for any content type: each value
  a comma-separated list of directives, optionally for one crawler
  (``X-Robots-Tag: otherbot: noindex, nofollow`` is otherbot's only: an
  agent name applies to the directives after it in that value).  The names
  that are ours: the product token of the User-Agent sent to the site
  (``larbin_py`` for ``larbin_py/0.1``), ``larbin_py`` and ``larbin``;
* in an HTML page, the ``<head>`` as an HTML parser sees it (libxml2
  through lxml's pull parser: comments and scripts are skipped, and the
  head ends where the parser opens the body, so a ``<meta>`` after the
  page's first text is not read): ``<meta name="robots" content=...>`` and
  ``<meta>`` named like one of ours, and the first ``<link
  rel="canonical" href=...>``, resolved against the head's ``<base href>``
  and normalized (:func:`larbin_py.url.normalize`).

``none`` is ``noindex, nofollow``; directives of every matching tag and
header add up (one ``noindex`` anywhere is enough: the most restrictive
wins, as search engines read them).  Other directives (``noarchive``,
``max-snippet:``, ``unavailable_after:``...) are read past and ignored.

Limits: the head is read in its first :data:`HEAD_SCAN` bytes (256 KiB; a
directive past them is not seen), in pieces of 256 bytes, doubled up to
16 KiB, stopping at the body: a page of a thousand meta tags costs a few
milliseconds, whatever its length, and a head is read in at most twice its
length (the parser builds all it is fed, about 0.1 µs a byte: a first
piece of 16 KiB cost 0.5-2 ms of the loop per page, issue 37).  Header
values were bounded by the fetcher (64 KiB of head).

Errors: none raised.  A head lxml cannot read gives what was read before
the fault; a canonical that does not normalize (another scheme, too long)
is no canonical.

:class:`CanonicalLoops` keeps, for ``followCanonical``, the pages already
canonicalised (bounded: :data:`MAX_CANONICALS`, least recent forgotten; in
memory, not across ``--reload``), so that two pages naming each other as
canonical are not both dropped: the second one met is kept.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass


from .parse import detect_charset
from .url import DEFAULT_MAX_LENGTH, normalize

__all__ = ["PageDirectives", "read", "header_directives", "head_directives", "agent_names", "CanonicalLoops",
           "HEAD_SCAN", "MAX_CANONICALS"]

#: Bytes of an HTML page read for its head's directives.
HEAD_SCAN = 256 * 1024
#: The first piece fed to the parser, doubled up to :data:`_PIECE`.
_FIRST_PIECE = 256
_PIECE = 16 * 1024
#: Canonicalised pages :class:`CanonicalLoops` remembers.
MAX_CANONICALS = 100_000
#: The crawler's own names, besides its product token (as larbin_py.parse reads the meta tags).
OWN_NAMES = frozenset({"larbin_py", "larbin"})
#: X-Robots-Tag directives that take a value after a colon (not an agent name before one).
_VALUED = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_WORDS = re.compile(r"[\s,]+")
_LIBXML_NAMES = {"cp1252": "windows-1252", "utf_8": "utf-8", "iso8859-1": "iso-8859-1"}


@dataclass(slots=True)
class PageDirectives:
    """What one answer says of itself (see the module docstring)."""

    noindex: bool = False
    nofollow: bool = False
    #: The normalized canonical URL the head names, or None.
    canonical: str | None = None


def agent_names(user_agent: str) -> frozenset[str]:
    """The names that address this crawler: its product token (lower case) and :data:`OWN_NAMES`."""
    token = user_agent.split("/", 1)[0].strip().lower()
    return OWN_NAMES | ({token} if token else set())


def _apply(words, out: PageDirectives) -> None:
    for word in words:
        if word == "noindex":
            out.noindex = True
        elif word == "nofollow":
            out.nofollow = True
        elif word == "none":
            out.noindex = out.nofollow = True


def header_directives(headers, agents: frozenset[str], out: PageDirectives | None = None) -> PageDirectives:
    """The X-Robots-Tag headers of ``headers`` (``(name, value)`` bytes, names in lower case)."""
    out = out if out is not None else PageDirectives()
    for name, value in headers:
        if name != b"x-robots-tag":
            continue
        applies = True
        for part in value.decode("latin-1").lower().split(","):
            word, colon, rest = part.partition(":")
            word = word.strip()
            if colon and word not in _VALUED:  # "agent: directive": for that agent, up to the next one
                applies = word in agents or word == "*"
                word = rest.strip().partition(":")[0].strip()
            if applies:
                _apply((word,), out)
    return out


def _tag(el) -> str:
    tag = el.tag
    return tag.lower() if isinstance(tag, str) else ""


def head_directives(body: bytes, url: str, charset: str | None, agents: frozenset[str], *,
                    max_url_size: int = DEFAULT_MAX_LENGTH, out: PageDirectives | None = None) -> PageDirectives:
    """The meta robots and canonical of an HTML ``body`` fetched from ``url`` (``charset``: the header's)."""
    from lxml import etree  # at the first page read (a crawl's start is quicker without)

    out = out if out is not None else PageDirectives()
    names = agents | {"robots"}
    canonical = base = None
    encoding = detect_charset(body, charset)
    encoding = _LIBXML_NAMES.get(encoding, encoding)
    try:
        parser = etree.HTMLPullParser(events=("start",), tag=("meta", "link", "base", "body"), encoding=encoding,
                                      recover=True, no_network=True, remove_comments=True, remove_pis=True)
    except (LookupError, ValueError):
        parser = etree.HTMLPullParser(events=("start",), tag=("meta", "link", "base", "body"), recover=True,
                                      no_network=True, remove_comments=True, remove_pis=True)
    done = False
    try:
        end = min(len(body), HEAD_SCAN)
        at, piece = 0, _FIRST_PIECE
        while at < end:
            parser.feed(body[at:min(at + piece, end)])
            at += piece
            piece = min(piece * 2, _PIECE)
            for _event, el in parser.read_events():
                tag = _tag(el)
                if tag == "body":
                    done = True
                    break
                if tag == "meta":
                    name = (el.get("name") or "").strip().lower()
                    if name in names:
                        _apply(_WORDS.split((el.get("content") or "").lower()), out)
                elif tag == "link" and canonical is None:
                    rel = (el.get("rel") or "").lower().split()
                    href = el.get("href")
                    if "canonical" in rel and href is not None and len(href) <= 4 * max_url_size:
                        canonical = href
                elif tag == "base" and base is None:
                    base = el.get("href")
            if done:
                break
    except (etree.LxmlError, ValueError, LookupError):
        pass  # what was read before the fault stands
    if canonical is not None:
        page_base = url
        if base is not None:
            page_base = normalize(base, url, max_length=max_url_size) or url
        out.canonical = normalize(canonical, page_base, max_length=max_url_size)
    return out


def read(headers, body: bytes | None, url: str, charset: str | None, agents: frozenset[str], *,
         max_url_size: int = DEFAULT_MAX_LENGTH) -> PageDirectives:
    """The directives of one answer: its headers, and its head when ``body`` is given (an HTML page)."""
    out = header_directives(headers, agents)
    if body is not None:
        head_directives(body, url, charset, agents, max_url_size=max_url_size, out=out)
    return out


class CanonicalLoops:
    """``followCanonical``'s memory of the pages canonicalised: page URL -> its canonical (bounded)."""

    def __init__(self, limit: int = MAX_CANONICALS) -> None:
        self.limit = limit
        self._to: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._to)

    def follow(self, url: str, canonical: str, steps: int = 16) -> bool:
        """True when ``url`` may give way to ``canonical`` (remembered); False when ``canonical``
        leads back to ``url`` through pages canonicalised before (a loop: keep ``url``)."""
        at = canonical
        for _ in range(steps):
            if at == url:
                return False
            nxt = self._to.get(at)
            if nxt is None:
                break
            at = nxt
        to = self._to
        to[url] = canonical
        to.move_to_end(url)
        if len(to) > self.limit:
            to.popitem(last=False)
        return True
