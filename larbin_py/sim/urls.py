"""The sim's own URL oracle: canonical forms and an independent resolver.

The sim must not import ``larbin_py.url`` (it is the oracle the crawler is
checked against), so it carries this small resolver, sufficient for every link
form the generator writes:

* :func:`resolve` = WHATWG whitespace handling (strip leading/trailing C0
  controls and spaces, drop tab/newline) + ``urllib.parse.urljoin`` (RFC 3986
  reference resolution, which agrees with WHATWG for the forms generated) +
  :func:`canonical`.
* :func:`canonical` = the crawler-canonical form: scheme and host lower-case,
  host in punycode, default port dropped, fragment dropped, empty path -> ``/``,
  ``%XX`` of unreserved characters decoded, other escapes upper-cased, and
  characters outside the URL code points percent-encoded as UTF-8 (as WHATWG
  does for paths).  The query is kept as written (escapes upper-cased).

Both return ``None`` for anything that is not crawlable ``http``.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

UNRESERVED = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)
# Characters a WHATWG parser leaves as they are in a path or query (besides %).
_PATH_KEEP = UNRESERVED | frozenset("/!$&'()*+,;=:@")
_QUERY_KEEP = _PATH_KEEP | frozenset("?")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_STRIP = "".join(chr(c) for c in range(0x21))  # C0 controls and space


def _fix_escape(m: re.Match) -> str:
    ch = chr(int(m.group(1), 16))
    return ch if ch in UNRESERVED else "%" + m.group(1).upper()


def _encode(text: str, keep: frozenset) -> str:
    out = []
    for ch in text:
        if ch in keep or ch == "%":
            out.append(ch)
        else:
            out.extend("%%%02X" % b for b in ch.encode("utf-8"))
    return "".join(out)


def canonical_path(path_query: str) -> str:
    """Canonical ``path[?query]`` (a leading ``/`` is added when missing)."""
    path, sep, query = path_query.partition("?")
    if not path.startswith("/"):
        path = "/" + path
    path = _ESCAPE.sub(_fix_escape, _encode(path, _PATH_KEEP))
    if sep:
        query = _ESCAPE.sub(lambda m: "%" + m.group(1).upper(), _encode(query, _QUERY_KEEP))
        return path + "?" + query
    return path


def canonical_host(host: str) -> str:
    """Lower-case punycode form of a host name (IDNA per label)."""
    labels = []
    for label in host.rstrip(".").split("."):
        if label.isascii():
            labels.append(label.lower())
        else:
            labels.append("xn--" + label.lower().encode("punycode").decode("ascii"))
    return ".".join(labels)


def canonical(url: str) -> str | None:
    """Crawler-canonical form of an absolute URL, or None if not http."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() != "http" or not parts.hostname:
        return None
    host = canonical_host(parts.hostname)
    netloc = host if port in (None, 80) else f"{host}:{port}"
    pq = parts.path or "/"
    if parts.query or url.split("#", 1)[0].endswith("?"):
        pq += "?" + parts.query
    return "http://" + netloc + canonical_path(pq)


def clean_href(href: str) -> str:
    """WHATWG pre-processing: strip C0/space at both ends, drop tab and newline."""
    return href.strip(_STRIP).replace("\t", "").replace("\n", "").replace("\r", "")


def resolve(base: str, href: str) -> str | None:
    """Resolve ``href`` (attribute value, entities already decoded) against ``base``."""
    href = clean_href(href)
    scheme = href.split(":", 1)[0].lower() if ":" in href.split("/", 1)[0] else ""
    if scheme and scheme != "http":
        return None
    return canonical(urljoin(base, href))


def split_url(url: str) -> tuple[str, int, str]:
    """``(host, port, path_query)`` of a canonical sim URL."""
    rest = url[len("http://"):]
    netloc, slash, pq = rest.partition("/")
    host, _, port = netloc.partition(":")
    return host, int(port) if port else 80, slash + pq
