"""Links: what a fetched HTML page points to (lxml, on the per-page hot path).

:func:`extract` parses a page with lxml's HTML parser (libxml2: recovering,
never reaching the network) and returns a :class:`Page`:

* links to follow, absolute and normalized (:func:`larbin_py.url.normalize`),
  deduplicated in document order, from ``a``/``area`` ``href``,
  ``frame``/``iframe`` ``src``, ``link`` ``href`` with ``rel`` next, prev or
  alternate, ``meta http-equiv=refresh``, and ``img src`` when asked;
* the links a page *embeds* (``frame``/``iframe`` ``src``, ``img src``) named
  again in ``embeds`` (a set, usually small), so the crawl log can say how a
  URL was found;
* ``<base href>`` honoured (the first one with an href, resolved against the
  page's URL; an unusable one is ignored);
* ``rel=nofollow`` links counted, not followed; ``<meta name=robots>`` (or
  ``name=larbin_py``/``larbin``) ``nofollow``/``noindex``/``none`` reported;
* ``rel=canonical`` and the refresh target reported apart.

Character set: the HTTP header's charset (as the fetcher parsed it:
``FetchResult.charset``, from :func:`larbin_py.net.decode.media_type`; the
header is not read again here), else a byte-order mark, else a
``<meta charset>`` or ``<meta http-equiv=content-type>`` in the first 2 KB,
else UTF-8; an unknown or wrong declaration falls back to the next source,
and undecodable bytes are replaced, never fatal.

Nothing raises: a page lxml cannot make sense of gives a Page without links
and with ``error`` set (the engine counts it as ``parseError``).  A page nested deeper than libxml2's limit (2048
levels) loses its deep part from the tree; its links are then also looked
for by a plain scan of the text, so none is lost.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

from .lazyimport import LazyModule
from .url import DEFAULT_MAX_LENGTH, normalize, normalize_links

__all__ = ["Page", "extract", "detect_charset", "HTML_TYPES"]

#: Bytes scanned for a <meta> charset declaration.
META_SCAN = 2048
_FOLLOW_REL = frozenset({"next", "prev", "previous", "alternate"})
_ROBOTS_NAMES = frozenset({"robots", "larbin_py", "larbin"})
_TAGS = ("a", "area", "frame", "iframe", "link", "meta", "base", "img", "title")
_META_CHARSET = re.compile(
    rb"""<meta[^>]*?(?:charset\s*=\s*["']?\s*([A-Za-z0-9_\-:.]+))""", re.I | re.S)
_REFRESH = re.compile(r"""^\s*\d*(?:\.\d*)?\s*[;,]?\s*(?:url\s*=\s*)?(.*)$""", re.I | re.S)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
#: The media types (as :func:`larbin_py.net.decode.media_type` gives them:
#: lower case, no parameters) whose pages are parsed for links.
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


@dataclass(slots=True)
class Page:
    """What :func:`extract` found in one page."""

    links: list[str] = field(default_factory=list)
    #: Those of ``links`` the page embeds (frames, images) rather than links to.
    embeds: frozenset = frozenset()
    nofollow_links: int = 0
    meta_nofollow: bool = False
    meta_noindex: bool = False
    canonical: str | None = None
    refresh: str | None = None
    base: str = ""
    charset: str = "utf-8"
    title: str | None = None
    error: str | None = None
    #: The document tree (lxml.etree), kept only when asked (``keep_root``).
    root: object = None


def _known(name: str | bytes | None) -> str | None:
    """The Python codec name of a declared charset, or None when unknown."""
    if not name:
        return None
    if isinstance(name, bytes):
        name = name.decode("ascii", "replace")
    name = name.strip().strip("\"'").lower()
    if name in ("x-user-defined", "unicode", "utf-16", "utf-32"):
        return None  # a meta cannot truly declare those: the bytes were read as ASCII
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    if info.name in ("iso8859-1", "ascii"):  # as browsers do (WHATWG Encoding)
        return "cp1252"
    return info.name


def detect_charset(body: bytes, declared: str | None) -> str:
    """The encoding to read ``body`` with: header, BOM, meta, then UTF-8.

    ``declared`` is the header's charset parameter, already split from the
    Content-Type by the fetcher (``FetchResult.charset``), or None.
    """
    for bom, name in _BOMS:
        if body.startswith(bom):
            bom_name = name
            break
    else:
        bom_name = None
    name = _known(declared)
    if name is not None:
        return name
    if bom_name is not None:
        return bom_name
    m = _META_CHARSET.search(body, 0, META_SCAN)
    if m:
        name = _known(m.group(1))
        if name is not None and not name.startswith("utf-16"):
            return name
    return "utf-8"


def _decode(body: bytes, charset: str) -> str:
    for bom, _name in _BOMS:
        if body.startswith(bom):
            body = body[len(bom):]
            break
    try:
        return body.decode(charset, "replace")
    except (LookupError, ValueError):
        return body.decode("utf-8", "replace")


#: lxml.etree, imported at the first parse: a crawler whose analysis processes parse
#: every page starts without it (larbin_py.lazyimport).
etree = LazyModule("lxml.etree", globals(), "etree")
_STR_PARSERS: dict[bool, object] = {}


def _html_parser(ids: bool, **encoding):
    """lxml's HTML parser as every page is read: recovering, never reaching the network, comments
    and processing instructions dropped, no depth cap but libxml2's own; ``ids``: see :func:`_byte_parser`."""
    return etree.HTMLParser(recover=True, no_network=True, remove_comments=True, remove_pis=True, huge_tree=True,
                            default_doctype=False, collect_ids=ids, **encoding)


def _str_parser(ids: bool = True):
    """The HTML parser of decoded text (made at its first use); ``ids``: see :func:`_byte_parser`."""
    parser = _STR_PARSERS.get(ids)
    if parser is None:
        parser = _STR_PARSERS[ids] = _html_parser(ids)
    return parser


# XML-invalid characters that lxml refuses in a str: NUL and the C0 controls but
# tab, LF and CR, and lone surrogates.
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


# Links in the raw text, for what the tree lost (nesting deeper than libxml2's
# limit of 2048): tag, attribute, value.
_RAW_LINK = re.compile(
    r"""<(a|area|frame|iframe)\b([^>]*?)\b(?:href|src)\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)""", re.I)


# An XML declaration at the start of a document: lxml refuses a str that
# declares an encoding (the text is already decoded, the declaration is moot).
_XML_DECL = re.compile(r"\A\s*<\?xml\b[^>]*\?>")


def _parse_tree(text: str, ids: bool = True):
    """The document tree, and whether libxml2 gave up part of it (too deep)."""
    if _BAD_XML.search(text):
        text = _BAD_XML.sub(" ", text)
    if text.lstrip()[:5].lower() == "<?xml":
        text = _XML_DECL.sub("", text, count=1)
    parser = _str_parser(ids)
    root = etree.fromstring(text, parser)
    truncated = any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log)
    return root, text, truncated


def _raw_links(text: str) -> list[str]:
    """href/src values of link tags found by a plain scan of the text."""
    import html

    out = []
    for m in _RAW_LINK.finditer(text):
        if "nofollow" in m.group(2).lower():
            continue
        value = m.group(3)
        if value[:1] in "\"'":
            value = value[1:-1]
        out.append(html.unescape(value))
    return out


# libxml2's names for the codecs detect_charset returns, where they differ.
_LIBXML_NAMES = {"cp1252": "windows-1252", "utf_8": "utf-8", "iso8859-1": "iso-8859-1"}
_BYTE_PARSERS: dict[tuple[str, bool], object] = {}


def _byte_parser(charset: str, ids: bool = True):
    """An HTML parser reading bytes in ``charset`` (libxml2 decodes: no str copy).

    ``ids``: libxml2 keeps a table of the ``id`` attributes (what XPath's
    ``id()`` reads in a tree a user analyzer is given).  Links alone never
    read it: without, a documentation page (a hundred ids, each entered and
    freed) costs 3-10 % less to parse and walk (``bench/parse.py --docs``),
    and a page that repeats an id fills no error log with it.
    """
    parser = _BYTE_PARSERS.get((charset, ids))
    if parser is None:
        parser = _BYTE_PARSERS[(charset, ids)] = _html_parser(ids, encoding=_LIBXML_NAMES.get(charset, charset))
    return parser


def _parse_bytes(body: bytes, charset: str, ids: bool = True):
    """Parse ``body`` as bytes when libxml2 knows the charset; None to use the str path."""
    if charset not in ("utf-8", "cp1252", "utf_8"):
        return None
    if body[:3] == codecs.BOM_UTF8:
        body = body[3:]
    parser = _byte_parser(charset, ids)
    root = etree.fromstring(body, parser)
    truncated = any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log)
    return root, truncated


def extract(body: bytes, url: str, charset: str | None = None, *, get_images: bool = False,
            max_url_size: int = DEFAULT_MAX_LENGTH, keep_root: bool = False) -> Page:
    """The links and page-level directives of HTML ``body`` fetched from ``url``.

    ``charset`` is the Content-Type header's charset parameter as the fetcher
    parsed it (``FetchResult.charset``), or None.  Never raises: a failure
    leaves the Page without links and with ``error`` set, the only place it is
    reported (the caller counts it).  ``keep_root``: the tree stays in
    ``Page.root`` (the analysis processes share it between analyzers), with
    its table of ids (:func:`_byte_parser`); without, none is built.
    """
    page = Page(base=url)
    try:
        page.charset = detect_charset(body, charset)
        if not body.strip():
            return page
        parsed = _parse_bytes(body, page.charset, keep_root)
        if parsed is not None:
            root, truncated = parsed
            text = _decode(body, page.charset) if truncated else ""
        else:
            root, text, truncated = _parse_tree(_decode(body, page.charset), keep_root)
        if root is None:
            return page
        if keep_root:
            page.root = root
        _walk(root, page, url, get_images, max_url_size, _raw_links(text) if truncated else ())
    except Exception as exc:  # lxml or a codec on hostile input: no links, never a crash
        page.links = []
        page.error = f"{type(exc).__name__}: {exc}"[:200]
    return page


def _walk(root, page: Page, url: str, get_images: bool, max_url_size: int, extra=()) -> None:
    base = url
    base_set = False
    raw_links: list[str] = []
    raw_embeds: list[str] = []
    nofollow = 0
    title = None
    limit = max_url_size * 4  # longer attribute values cannot make a short URL
    for el in root.iter(_TAGS):
        tag = el.tag
        if tag == "a" or tag == "area":
            href = el.get("href")
            if href is None or len(href) > limit:
                continue
            rel = el.get("rel")
            if rel and "nofollow" in rel.lower().split():
                nofollow += 1
                continue
            raw_links.append(href)
        elif tag == "frame" or tag == "iframe":
            src = el.get("src")
            if src is not None and len(src) <= limit:
                raw_links.append(src)
                raw_embeds.append(src)
        elif tag == "img":
            if get_images:
                src = el.get("src")
                if src is not None and len(src) <= limit:
                    raw_links.append(src)
                    raw_embeds.append(src)
        elif tag == "link":
            href = el.get("href")
            rel = el.get("rel")
            if href is None or not rel or len(href) > limit:
                continue
            rels = set(rel.lower().split())
            if "canonical" in rels and page.canonical is None:
                page.canonical = ("pending", href)  # resolved once the base is known
            if rels & _FOLLOW_REL and "nofollow" not in rels:
                raw_links.append(href)
        elif tag == "meta":
            name = (el.get("name") or "").strip().lower()
            if name in _ROBOTS_NAMES:
                words = set(re.split(r"[\s,]+", (el.get("content") or "").lower()))
                if "nofollow" in words or "none" in words:
                    page.meta_nofollow = True
                if "noindex" in words or "none" in words:
                    page.meta_noindex = True
            elif (el.get("http-equiv") or "").strip().lower() == "refresh":
                m = _REFRESH.match(el.get("content") or "")
                target = m.group(1).strip().strip("\"'").strip() if m else ""
                if target and len(target) <= limit:
                    page.refresh = target
                    raw_links.append(target)
        elif tag == "base":
            if not base_set:
                href = el.get("href")
                if href is not None:
                    base_set = True
                    resolved = normalize(href, url, max_length=max_url_size)
                    if resolved is not None:
                        base = resolved
        elif tag == "title":
            if title is None:  # the first one, as a browser shows it
                title = el
    page.base = base
    page.nofollow_links = nofollow
    raw_links.extend(extra)
    if isinstance(page.canonical, tuple):
        page.canonical = normalize(page.canonical[1], base, max_length=max_url_size)
    if page.refresh is not None:
        page.refresh = normalize(page.refresh, base, max_length=max_url_size)
    page.links = normalize_links(raw_links, base, max_length=max_url_size)
    if raw_embeds:
        page.embeds = frozenset(normalize_links(raw_embeds, base, max_length=max_url_size))
    if title is not None and title.text:
        page.title = title.text.strip()[:500]
