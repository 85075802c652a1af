"""URLs: WHATWG resolution for http(s), the crawler's canonical form, fingerprints.

:func:`normalize` turns a link as found in a page (``href``, resolved against
the page's base URL) into the one string the crawler uses for that resource,
or None when the link is not a crawlable http(s) URL.

Resolution follows the WHATWG URL Standard (https://url.spec.whatwg.org/)
for the special schemes http and https, as browsers do:

* leading and trailing C0 controls and spaces are stripped, ASCII tab and
  newline removed anywhere; backslashes count as slashes;
* ``http:foo`` and ``http:/foo`` are relative to a base of the same scheme,
  and any number of slashes may follow ``http:`` before the host;
* dot segments (``.``, ``..``, ``%2e``, ``.%2E``...) are removed;
* the path, query and userinfo are percent-encoded with the standard's sets
  (UTF-8; existing ``%XX`` escapes kept);
* hosts are percent-decoded, mapped with UTS #46 (non-transitional) to
  punycode, checked for forbidden code points; IPv4 in all its forms
  (``0x7f.1``, ``2130706433``, octal ``0177.0.0.1``) is serialized dotted, IPv6
  literals compressed;
* ports must be decimal and at most 65535.

On top of that, the crawler's canonical form: scheme and host in lower case,
the default port dropped, an empty path written ``/``, the fragment dropped,
``%XX`` escapes of unreserved characters (``A-Z a-z 0-9 - . _ ~``) decoded
in the path and other escapes upper-cased there; the query is kept as the
standard serializes it.

:func:`fingerprint` is a 64-bit hash of a normalized URL, identical on every
run and machine (BLAKE2b, not Python's ``hash()``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

__all__ = ["normalize", "normalize_links", "fingerprint", "fingerprints", "authority_of", "host_of",
           "DEFAULT_MAX_LENGTH"]

DEFAULT_MAX_LENGTH = 2048
_DEFAULT_PORT = {"http": 80, "https": 443}
# Schemes that are special in WHATWG (their URLs parse as hierarchical) but
# that the crawler does not fetch: such links are None, not relative paths.
_OTHER_SCHEMES = frozenset({"ftp", "ws", "wss", "file"})

_STRIP = "".join(chr(c) for c in range(0x21))
_TABNL = str.maketrans("", "", "\t\n\r")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_HEX = frozenset("0123456789abcdefABCDEF")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

# Percent-encode sets (WHATWG 1.3): the bytes (0x00-0x7F) that are encoded;
# every non-ASCII code point is encoded (as its UTF-8 bytes) in all of them.
_C0 = frozenset(chr(c) for c in range(0x20)) | {"\x7f"}
_FRAGMENT = _C0 | set(' "<>`')
_QUERY = _C0 | set(' "#<>')
_SPECIAL_QUERY = _QUERY | {"'"}
_PATH = _QUERY | set("?^`{}")
_USERINFO = _PATH | set("/:;=@[\\]|")

# Forbidden host code points (3.2), and forbidden *domain* code points.
_FORBIDDEN_HOST = frozenset("\x00\t\n\r #/:<>?@[\\]^|")
_FORBIDDEN_DOMAIN = _FORBIDDEN_HOST | _C0 | {"%", "\x7f"}


def _encoder(encode_set: frozenset) -> dict[str, str]:
    table = {}
    for c in range(0x80):
        ch = chr(c)
        if ch in encode_set:
            table[ch] = "%%%02X" % c
    return table


_PATH_TABLE = _encoder(_PATH)
_QUERY_TABLE = _encoder(_SPECIAL_QUERY)
_USERINFO_TABLE = _encoder(_USERINFO)
# Characters that never need encoding in a path: the fast path's test.
_PATH_SAFE = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*\Z")


def _pct_encode(text: str, table: dict[str, str]) -> str:
    """Percent-encode ``text`` with the set of ``table`` (non-ASCII as UTF-8)."""
    out = []
    for ch in text:
        if ch < "\x80":
            out.append(table.get(ch, ch))
        else:
            try:
                data = ch.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: U+FFFD, as an encoder would
                data = b"\xef\xbf\xbd"
            out.append("".join("%%%02X" % b for b in data))
    return "".join(out)


def _canon_escapes(text: str) -> str:
    """Decode escapes of unreserved characters, upper-case the others."""
    if "%" not in text:
        return text
    return _PCT.sub(_canon_one, text)


def _canon_one(m: re.Match) -> str:
    hexa = m.group(1)
    ch = chr(int(hexa, 16))
    return ch if ch in _UNRESERVED else "%" + hexa.upper()


# ---------------------------------------------------------------------------
# hosts


class _Failure(Exception):
    """The input is not a valid URL (WHATWG "validation error, return failure")."""


def _parse_ipv4_number(part: str) -> int | None:
    """One IPv4 part: decimal, 0x hex or 0-prefixed octal; None when invalid."""
    if not part:
        return None
    radix = 10
    if len(part) >= 2 and part[0] == "0" and part[1] in "xX":
        part, radix = part[2:], 16
    elif len(part) >= 2 and part[0] == "0":
        part, radix = part[1:], 8
    if not part:
        return 0
    try:
        if radix == 10 and not part.isdigit():
            return None
        if radix == 16 and not all(c in _HEX for c in part):
            return None
        if radix == 8 and not all(c in "01234567" for c in part):
            return None
        return int(part, radix)
    except ValueError:
        return None


def _ends_in_number(domain: str) -> bool:
    parts = domain.split(".")
    if parts[-1] == "":
        if len(parts) == 1:
            return False
        parts.pop()
    last = parts[-1]
    if last and last.isascii() and last.isdigit():
        return True
    return _parse_ipv4_number(last) is not None


def _parse_ipv4(domain: str) -> str:
    parts = domain.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        raise _Failure("too many IPv4 parts")
    numbers = []
    for part in parts:
        n = _parse_ipv4_number(part)
        if n is None:
            raise _Failure("bad IPv4 part")
        numbers.append(n)
    if any(n > 255 for n in numbers[:-1]):
        raise _Failure("IPv4 part over 255")
    if numbers[-1] >= 256 ** (5 - len(numbers)):
        raise _Failure("IPv4 address too large")
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n * 256 ** (3 - i)
    return ".".join(str((value >> s) & 0xFF) for s in (24, 16, 8, 0))


def _parse_ipv6(text: str) -> str:
    if not text or "%" in text or not all(c in _HEX or c in ":." for c in text):
        raise _Failure("bad IPv6")
    if "." in text:
        # The embedded IPv4 part: four decimal numbers without leading zeros.
        head, _, v4 = text.rpartition(":")
        pieces = v4.split(".")
        if len(pieces) != 4 or any(not p.isdigit() or (len(p) > 1 and p[0] == "0") or int(p) > 255
                                   for p in pieces):
            raise _Failure("bad IPv4 in IPv6")
    try:
        return "[" + ipaddress.IPv6Address(text).compressed + "]"
    except ValueError:
        raise _Failure("bad IPv6") from None


def _to_ascii(domain: str) -> str:
    """UTS #46 ToASCII as WHATWG asks (non-transitional, no hyphen/length checks)."""
    import idna

    try:
        mapped = idna.uts46_remap(domain, std3_rules=False, transitional=False)
    except (idna.IDNAError, UnicodeError, ValueError) as exc:
        raise _Failure(f"UTS 46: {exc}") from None
    labels = []
    for label in mapped.split("."):
        if label.isascii():
            low = label.lower()
            if low.startswith("xn--"):
                try:  # only undecodable punycode fails (as in browsers today)
                    low[4:].encode("ascii").decode("punycode")
                except (UnicodeError, ValueError):
                    raise _Failure("bad punycode label") from None
            labels.append(low)
        else:
            try:
                labels.append("xn--" + label.encode("punycode").decode("ascii"))
            except (UnicodeError, ValueError) as exc:
                raise _Failure(f"bad label: {exc}") from None
    return ".".join(labels)


def _parse_host(text: str) -> str:
    """A special URL's host, serialized; raises _Failure."""
    if text.startswith("["):
        if not text.endswith("]"):
            raise _Failure("unclosed IPv6")
        return _parse_ipv6(text[1:-1])
    if not text:
        raise _Failure("empty host")
    # Percent-decoding gives bytes, read back as UTF-8 (WHATWG host parser).
    domain = _pct_decode_bytes(text).decode("utf-8", "replace") if "%" in text else text
    if domain.isascii():
        ascii_domain = domain.lower()
        if any(label.startswith("xn--") for label in ascii_domain.split(".")):
            ascii_domain = _to_ascii(ascii_domain)
    else:
        ascii_domain = _to_ascii(domain)
    if not ascii_domain:
        raise _Failure("empty host")
    for ch in ascii_domain:
        if ch in _FORBIDDEN_DOMAIN:
            raise _Failure("forbidden domain code point")
    if _ends_in_number(ascii_domain):
        return _parse_ipv4(ascii_domain)
    return ascii_domain


def _pct_decode_bytes(text: str) -> bytes:
    out = bytearray()
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "%" and i + 2 < n and text[i + 1] in _HEX and text[i + 2] in _HEX:
            out.append(int(text[i + 1:i + 3], 16))
            i += 3
        else:
            out += ch.encode("utf-8", "surrogatepass")
            i += 1
    return bytes(out)


# ---------------------------------------------------------------------------
# the parser


class _Url:
    """A parsed http(s) URL: the parts normalize serializes."""

    __slots__ = ("scheme", "userinfo", "host", "port", "path", "query")

    def __init__(self, scheme, userinfo, host, port, path, query):
        self.scheme = scheme
        self.userinfo = userinfo  # "" or "user[:password]" (encoded)
        self.host = host
        self.port = port  # None = default
        self.path = path  # list of encoded segments
        self.query = query  # None or encoded query

    def serialize(self) -> str:
        out = [self.scheme, "://"]
        if self.userinfo:
            out.append(self.userinfo)
            out.append("@")
        out.append(self.host)
        if self.port is not None:
            out.append(":%d" % self.port)
        out.append("/" + "/".join(self.path))
        if self.query is not None:
            out.append("?" + self.query)
        return "".join(out)


_SINGLE_DOT = frozenset({".", "%2e", "%2E"})
_DOUBLE_DOT = frozenset({"..", ".%2e", ".%2E", "%2e.", "%2E.", "%2e%2e", "%2E%2E", "%2e%2E", "%2E%2e"})


def _parse_path(text: str, path: list[str]) -> list[str]:
    """Append the segments of ``text`` (a path, backslashes already slashes) to ``path``."""
    segments = text.split("/")
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if seg in _DOUBLE_DOT:
            if path:
                path.pop()
            if i == last:
                path.append("")
        elif seg in _SINGLE_DOT:
            if i == last:
                path.append("")
        else:
            path.append(_pct_encode(seg, _PATH_TABLE) if not _PATH_SAFE.match(seg) else seg)
    return path


def _parse_authority(rest: str, scheme: str) -> tuple[_Url, str]:
    """Parse ``userinfo@host:port`` at the start of ``rest``; the URL and what follows."""
    end = len(rest)
    for sep in "/\\?#":
        i = rest.find(sep)
        if i != -1 and i < end:
            end = i
    authority, rest = rest[:end], rest[end:]
    userinfo = ""
    at = authority.rfind("@")
    if at != -1:
        raw_user = authority[:at]
        authority = authority[at + 1:]
        user, colon, password = raw_user.partition(":")
        user = _pct_encode(user, _USERINFO_TABLE)
        password = _pct_encode(password, _USERINFO_TABLE)
        userinfo = user + (":" + password if password else "")
        if not authority:
            raise _Failure("userinfo without host")
    # host and port: a ':' inside [] belongs to the host
    if authority.startswith("["):
        close = authority.find("]")
        if close == -1:
            raise _Failure("unclosed IPv6")
        host_text, port_text = authority[:close + 1], authority[close + 1:]
        if port_text and not port_text.startswith(":"):
            raise _Failure("junk after IPv6")
        port_text = port_text[1:]
        has_port = bool(authority[close + 1:])
    else:
        host_text, colon, port_text = authority.partition(":")
        has_port = bool(colon)
    if not host_text:
        raise _Failure("empty host")
    host = _parse_host(host_text)
    port = None
    if has_port and port_text:
        if not port_text.isascii() or not port_text.isdigit():
            raise _Failure("bad port")
        port = int(port_text)
        if port > 65535:
            raise _Failure("port out of range")
        if port == _DEFAULT_PORT[scheme]:
            port = None
    return _Url(scheme, userinfo, host, port, [], None), rest


def _finish(url: _Url, rest: str, path: list[str] | None) -> _Url:
    """Parse path, query (and drop the fragment) from ``rest`` into ``url``."""
    rest = rest.split("#", 1)[0]
    path_text, q, query = rest.partition("?")
    path_text = path_text.replace("\\", "/")
    if path is None:
        path = []
    if path_text.startswith("/"):
        path_text = path_text[1:]
    elif path_text == "" and not path:
        path_text = ""
    url.path = _parse_path(path_text, path) if (path_text or not path) else path
    url.query = _pct_encode(query, _QUERY_TABLE) if q else None
    return url


def _parse_absolute(text: str, scheme: str) -> _Url:
    rest = text.lstrip("/\\")
    url, rest = _parse_authority(rest, scheme)
    return _finish(url, rest, None)


def _parse_relative(text: str, base: _Url) -> _Url:
    url = _Url(base.scheme, base.userinfo, base.host, base.port, list(base.path), base.query)
    if not text:
        return url
    c = text[0]
    if c in "/\\":
        if len(text) > 1 and text[1] in "/\\":
            return _parse_absolute(text, base.scheme)
        url.query = None
        url.path = []
        return _finish(url, text, None)
    if c == "?":
        url.query = None
        return _finish(url, text, list(base.path))
    if c == "#":
        return url
    url.query = None
    path = list(base.path)
    if path:
        path.pop()
    rest = text.split("#", 1)[0]
    path_text, q, query = rest.partition("?")
    url.path = _parse_path(path_text.replace("\\", "/"), path)
    url.query = _pct_encode(query, _QUERY_TABLE) if q else None
    return url


def _parse(text: str, base: _Url | None) -> _Url | None:
    m = _SCHEME.match(text)
    if m is not None:
        scheme = text[: m.end() - 1].lower()
        rest = text[m.end():]
        if scheme not in _DEFAULT_PORT:
            return None
        if base is not None and base.scheme == scheme and not (rest[:1] in ("/", "\\") and rest[1:2] in ("/", "\\")):
            # "http:foo", "http:/foo" against an http base: relative (WHATWG
            # "special relative or authority state").
            return _parse_relative(rest, base)
        return _parse_absolute(rest, scheme)
    if base is None:
        return None
    return _parse_relative(text, base)


# Parsed bases, by string: a page's links all share one base.
_BASES: dict[str, _Url | None] = {}

# -- the fast path --------------------------------------------------------------
# Most links are already clean: an absolute or scheme-relative http(s) URL,
# or a relative path or query, maybe wrapped in white space, made of
# characters that need no encoding, or only the UTF-8 encoding of non-ASCII
# text or a space's %20 in a path, well-formed escapes, without
# backslashes, inner tabs or newlines, or encoded dots.  One match of _LINK
# classifies such a link and _fast_resolve finishes it by string
# operations; a host is judged once by the parser's own host code and
# remembered.  Anything else takes the full parser above (the tests check
# both give the same answer).
_PCHARS = r"A-Za-z0-9\-._~!$&()*+,;=:@"
_PCHARS_ASCII = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&()*+,;=:@"


def _plain(extra: str) -> str:
    """A character class: the ASCII characters of _PCHARS and ``extra``, and every
    non-ASCII code point but the surrogates (the parser encodes those as UTF-8).

    Written as the negation of its complement (the other ASCII characters and
    the surrogates): the same set, but ``re`` takes tens of milliseconds to
    compile a class listing a million code points and microseconds for this
    one -- and it is compiled at every process's start (the tests check that
    both sets are equal).
    """
    allowed = set(_PCHARS_ASCII + extra)
    others = "".join(re.escape(chr(c)) for c in range(0x80) if chr(c) not in allowed)
    return "[^" + others + "\ud800-\udfff]"


# After a path's first run of plain characters: escapes, and spaces that are
# not the link's trailing white space (the parser encodes them as %20).
_PATH_CHARS = _plain("'/")
_QUERY_CHARS = _plain("/?")
_ESC_TAIL = r"(?:(?:%[0-9A-Fa-f]{2}| +(?![\x00-\x20]*\Z))" + _PATH_CHARS + "*)*"
_LINK = re.compile(
    # Written without re.I, which costs a case fold per character.  Leading
    # and trailing C0 controls and spaces are what normalize strips.
    r"[\x00-\x20]*"
    # groups: 1 origin "scheme://host:port" or "//host:port", with 2 scheme,
    # 3 host (anything the parser may accept or refuse), 4 port; 5 its path
    r"(?:((?:([hH][tT][tT][pP][sS]?):)?//([^\x00-\x20/?#:@\[\]\\%]+)(?::([1-9][0-9]{0,4}))?)"
    rf"(/{_PATH_CHARS}*{_ESC_TAIL})?"
    # or 6: a relative path (maybe empty)
    rf"|({_PATH_CHARS}*{_ESC_TAIL}))"
    # 7: the query ("'" is encoded in a special URL's query: not here); a
    # fragment is dropped
    rf"(\?{_QUERY_CHARS}*(?:%[0-9A-Fa-f]{{2}}{_QUERY_CHARS}*)*)?(?:#.*)?"
    r"[\x00-\x20]*\Z", re.S)
# An origin as written, "scheme://host:port" (a "//host" link is looked up
# with its base's scheme put in front; an ASCII one in lower case) ->
# canonical origin, or None when the host or port is refused (the parser
# then gives its own answer).
_ORIGINS: dict[str, str | None] = {}
# base string -> (origin "scheme://[user@]host[:port]", directory "/dir/",
#                 scheme, path "/dir/leaf", query "?q" or ""), or None
_FAST_BASES: dict[str, tuple[str, str, str, str, str] | None] = {}


def _remember(cache: dict, key, value, size: int):
    """Store ``value`` under ``key`` in ``cache`` (emptied first once it holds ``size``); return it."""
    if len(cache) >= size:
        cache.clear()
    cache[key] = value
    return value


def _fast_base(base: str):
    """What relative links need of ``base`` (cached), or None when it is unusable."""
    info = _FAST_BASES.get(base, False)
    if info is False:
        info = _remember(_FAST_BASES, base, _canonical_base_info(base) or _parsed_base_info(base), 256)
    return info


def _canonical_base_info(base: str):
    """:func:`_fast_base` of a base that is already canonical (a page's own URL), by slicing."""
    m = _LINK.match(base)
    if m is None or m.group(2) is None or _fast_resolve(m, None) != base:
        return None
    host_end = m.end(1)
    query_at = base.find("?", host_end)
    path = base[host_end:] if query_at == -1 else base[host_end:query_at]
    return (base[:host_end], path[: path.rfind("/") + 1], m.group(2), path,
            "" if query_at == -1 else base[query_at:])


def _parsed_base_info(base: str):
    """:func:`_fast_base` of any base, by the full parser."""
    url = _base(base)
    if url is None:
        return None
    origin = url.scheme + "://" + (url.userinfo + "@" if url.userinfo else "") + url.host + (
        ":%d" % url.port if url.port is not None else "")
    segments = [_canon_escapes(seg) for seg in url.path]
    return (origin, "/" + "".join(seg + "/" for seg in segments[:-1]), url.scheme,
            "/" + "/".join(segments), "?" + url.query if url.query is not None else "")


def _remove_dots(path: str) -> str:
    """RFC 3986 dot-segment removal on a plain path (no escapes, no backslashes)."""
    if "/.." not in path:  # only "." segments, or names that start with a dot
        while "/./" in path:
            path = path.replace("/./", "/")
        return path[:-1] if path.endswith("/.") else path
    out: list[str] = []
    segments = path[1:].split("/")
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if seg == "..":
            if out:
                out.pop()
            if i == last:
                out.append("")
        elif seg == ".":
            if i == last:
                out.append("")
        else:
            out.append(seg)
    return "/" + "/".join(out)


def _fast_path(path: str) -> str | None:
    """A clean path made canonical, or None (encoded dots: the parser decides)."""
    if "%" in path:
        low = path.lower()
        if "%2e" in low:
            return None
        path = _canon_escapes(path)
    if "/." in path:
        path = _remove_dots(path)
    return path


def _origin(text: str, scheme: str, host: str, port: str | None) -> str | None:
    """The canonical form of origin ``text`` (its parts as _LINK matched them), cached.

    The host and port are read by the parser's own code, so an IDNA or
    numeric host gets the parser's answer; a refused one gives None.  An
    ASCII origin is remembered in lower case (the parser lower-cases it
    first), so "HTTP://Example.COM" and "http://example.com" share an entry.
    """
    key = text.lower() if text.isascii() else text
    out = _ORIGINS.get(key, False)
    if out is not False:
        return out
    scheme = scheme.lower()
    try:
        url, _ = _parse_authority(host + (":" + port if port is not None else ""), scheme)
        out = scheme + "://" + url.host + (":%d" % url.port if url.port is not None else "")
    except (_Failure, ValueError, UnicodeError):
        out = None
    return _remember(_ORIGINS, key, out, 4096)


def _fast_resolve(m: re.Match, info) -> str | None:
    """The normalized URL of a :data:`_LINK` match, "" for a URL of another
    scheme (mailto:, javascript:...), or None to ask the parser.

    ``info`` is :func:`_fast_base` of the base URL (None: no usable base).
    """
    origin, scheme, host, port, path, rel, query = m.groups()
    if origin is not None:  # "scheme://host..." or "//host..."
        if scheme is None:
            if info is None:
                return None
            origin = info[2] + ":" + origin
            scheme = info[2]
        canon = _ORIGINS.get(origin, False)
        if canon is False:
            canon = _origin(origin, scheme, host, port)
        if canon is None:
            return None
        if not path:
            path = "/"
    elif info is None:
        return None
    elif not rel:  # "", "?query", "#fragment": the base's own path
        canon, path = info[0], info[3]
        if query is None:
            query = info[4]
    elif rel[0] == "/":
        if rel[1:2] == "/":
            return None  # "//" and a host the pattern refused
        canon, path = info[0], rel
    elif ":" in rel and ":" in rel.split("/", 1)[0]:
        named = _SCHEME.match(rel)
        if named is None or named.group().lower() in ("http:", "https:"):
            return None  # "http:path" is relative to an http base: the parser's
        return ""  # another scheme: never crawled
    else:
        canon, path = info[0], info[1] + rel
    if not path.isascii() or " " in path:
        path = _pct_encode(path, _PATH_TABLE)
    if "%" in path or "/." in path:
        path = _fast_path(path)
        if path is None:
            return None
    if not query:
        return canon + path
    if not query.isascii():
        query = _pct_encode(query, _QUERY_TABLE)
    return canon + path + query


def _fast(text: str, base: str | None) -> str | None:
    """The normalized URL of ``text`` by string operations, "" when it is
    not http(s), or None to ask the parser."""
    m = _LINK.match(text)
    if m is None:
        return None
    return _fast_resolve(m, _fast_base(base) if base is not None else None)


def _base(base: str) -> _Url | None:
    url = _BASES.get(base)
    if url is None and base not in _BASES:
        try:
            url = _parse(base.strip(_STRIP).translate(_TABNL), None)
        except (_Failure, ValueError, UnicodeError):
            url = None
        _remember(_BASES, base, url, 256)
    return url


def normalize(href: str, base: str | None = None, *, max_length: int = DEFAULT_MAX_LENGTH) -> str | None:
    """The canonical absolute http(s) URL of ``href`` resolved against ``base``, or None."""
    text = href.strip(_STRIP)
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.translate(_TABNL)
    try:
        out = _fast(text, base)
    except (ValueError, UnicodeError, RecursionError):  # as the parser's: never raised to the caller
        out = None
    if out is not None:
        return out if out and len(out) <= max_length else None
    return _by_parser(text, base, max_length)


def _by_parser(text: str, base: str | None, max_length: int) -> str | None:
    """:func:`normalize` of stripped ``text`` by the full parser."""
    try:
        base_url = None
        if base is not None:
            base_url = _base(base)
            if base_url is None and not _SCHEME.match(text):
                return None
        url = _parse(text, base_url)
        if url is None:
            return None
        url.path = [_canon_escapes(seg) for seg in url.path]
        out = url.serialize()
    except (_Failure, ValueError, UnicodeError, RecursionError):
        return None
    if len(out) > max_length:
        return None
    return out


def normalize_links(hrefs, base: str, *, max_length: int = DEFAULT_MAX_LENGTH) -> list[str]:
    """The distinct normalized links of ``hrefs`` (in order) resolved against ``base``.

    The same as ``normalize(href, base)`` for each href, dropping None and
    repeats, but one page's links are resolved in one loop: the base is
    looked at once, and each link in a common shape (a clean absolute or
    "//" URL, a clean relative path, a query or a fragment, maybe wrapped in
    white space) costs one regular-expression match and a few string
    operations.  Anything else goes to the full parser (the tests check
    that both agree with :func:`normalize`).
    """
    info = _fast_base(base)
    link_match = _LINK.match
    resolve = _fast_resolve
    found: dict[str, None] = {}  # an ordered set
    for raw in dict.fromkeys(hrefs):
        m = link_match(raw)
        link = resolve(m, info) if m is not None else None
        if link is None:
            link = normalize(raw, base, max_length=max_length)
            if link is None:
                continue
        elif not link or len(link) > max_length:
            continue
        found[link] = None
    return list(found)


#: The scheme and authority of an absolute http(s) URL, as :func:`authority_of`
#: reads it: the user info up to the last "@" is skipped; the host is a
#: bracketed IPv6 literal or a run without ":/?#@[", then an optional
#: ":digits" port; the authority ends at "/", "?", "#" or the end.
_AUTHORITY = re.compile(
    r"(https?)://(?:[^/?#]*@)?((\[[^\]/?#@]*\]|[^:/?#@\[]+)(?::([0-9]*))?)(?=[/?#]|\Z)",
    re.IGNORECASE).match


def authority_of(url: str) -> tuple[str, str, str, int, int] | None:
    """``(scheme, hostport, host, port, end)`` of an absolute http(s) URL, or None.

    The one authority splitter of the crawler (the frontier's site key, the
    rules' host, the fetcher's Host header and target all come from it).
    ``scheme`` is lower case; ``hostport`` is the authority without user info
    as written (``a.test:8080``, ``[::1]``: what a Host header carries);
    ``host`` keeps an IPv6 literal's brackets; ``port`` is the written one or
    the scheme's default (an empty port, ``a.test:``, is the default);
    ``url[end:]`` is the path, query and fragment.  User info is never part
    of the answer (it is neither refused nor kept).  None for another scheme,
    an empty host, an unclosed ``[``, or a port that is not digits.  One
    regular-expression match: it is on the hot path (every URL placed in a
    site, every link tested against its page's host).
    """
    m = _AUTHORITY(url)
    if m is None:
        return None
    scheme, hostport, host, port = m.groups()
    if scheme not in _DEFAULT_PORT:
        scheme = scheme.lower()
    return scheme, hostport, host, int(port) if port else _DEFAULT_PORT[scheme], m.end()


def host_of(url: str) -> str:
    """The host of an absolute http(s) URL as :func:`authority_of` reads it
    (no user info, no port, IPv6 in brackets); "" when it has none."""
    m = _AUTHORITY(url)
    return m[3] if m is not None else ""


def fingerprint(url: str) -> int:
    """A 64-bit fingerprint of ``url``, the same on every run and machine."""
    return fingerprints((url,))[0]


def fingerprints(urls) -> list[int]:
    """:func:`fingerprint` of each of ``urls``: blake2b, 8 bytes, little-endian (one loop, no call per URL)."""
    blake2b, from_bytes = hashlib.blake2b, int.from_bytes
    return [from_bytes(blake2b(url.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
            for url in urls]
