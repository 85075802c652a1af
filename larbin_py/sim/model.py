"""The sim's data model: hosts, pre-rendered resources, links, robots profiles.

Plain data, shared by generation (:mod:`.web`), serving (:mod:`.server`),
ground truth (:mod:`.truth`) and export (:mod:`.export`).  A hand-made web is
built from these directly (see ``tests/test_sim_truth.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ROBOTS_SIZE_LIMIT = 500 * 1024  # bytes of robots.txt a crawler reads


@dataclass(frozen=True, slots=True)
class Link:
    """One link written in a page.

    ``target`` is the canonical URL it resolves to, or None for schemes a
    crawler must not follow (mailto:, javascript:, data:, ftp:, tel:).
    ``kind`` is the tag: ``a area frame iframe link refresh img``.
    ``raw`` is the attribute value as a parser sees it (entities decoded),
    ``base`` the URL it resolves against (page URL or ``<base href>``).
    """

    target: str | None
    kind: str
    raw: str
    base: str
    nofollow: bool = False


@dataclass(slots=True)
class Resource:
    """A pre-rendered answer: status, headers, identity body, links."""

    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    body: bytes = b""
    links: tuple[Link, ...] = ()
    location: str | None = None
    layer: int = 0
    kind: str = "html"  # html image pdf redirect missing robots script data
    extra_headers: tuple[tuple[str, str], ...] = ()
    #: Links that only JavaScript writes (sim.dynamic): found by a crawl that renders the page
    #: with the trigger ``js_needs`` (``none``, ``scroll``, ``call:NAME``).
    js_links: tuple[Link, ...] = ()
    js_needs: str = "none"
    #: Same-host paths the page's scripts request when it is rendered.
    js_fetches: tuple[str, ...] = ()
    #: (sim.scope) The canonical URL the page's head names, its meta robots content.
    canonical: str | None = None
    robots_meta: str = ""
    #: (sim.scope) A sitemap file's pages (paths on its host), the sitemaps it names, its off-site URLs.
    sitemap_urls: tuple[str, ...] = ()
    sitemap_files: tuple[str, ...] = ()
    sitemap_offsite: tuple[str, ...] = ()

    @property
    def header_robots(self) -> str:
        """The X-Robots-Tag header's value, lower case ("" when none)."""
        return next((v.lower() for n, v in self.extra_headers if n.lower() == "x-robots-tag"), "")

    @property
    def is_html(self) -> bool:
        return self.status == 200 and self.content_type.startswith("text/html")


@dataclass(slots=True)
class RobotsProfile:
    """robots.txt behaviour of a host.

    ``kind``: absent (404) forbidden (401/403) rules patterns allow delay
    agent error (5xx) timeout (never answers) redirect oversized (> 500 KiB).  ``status``/``body`` is what ``/robots.txt`` answers (for
    ``redirect`` a 301 to ``target``, which serves ``rules_body``).
    """

    kind: str = "absent"
    status: int = 404
    body: bytes = b""
    target: str | None = None
    rules_body: bytes = b""
    crawl_delay: float | None = None

    @property
    def effective_body(self) -> bytes:
        """The rules a crawler ends up reading (after the redirect)."""
        return self.rules_body if self.kind == "redirect" else self.body


@dataclass(slots=True)
class Host:
    """A virtual host: canonical name (punycode, lower-case), IP, resources."""

    name: str
    ip: str
    resources: dict[str, Resource] = field(default_factory=dict)
    robots: RobotsProfile = field(default_factory=RobotsProfile)
    gzip: bool = False
    chunked: bool = False
    trap: bool = False
    display: str = ""  # Unicode form for IDN hosts
    cname: str | None = None  # DNS: this name is a CNAME to that one
    sitemap_flavour: str = "none"  # sim.scope: index, text, default or none

    def root(self, port: int) -> str:
        return base_url(self.name, port) + "/"


def base_url(host: str, port: int) -> str:
    return f"http://{host}" if port == 80 else f"http://{host}:{port}"
