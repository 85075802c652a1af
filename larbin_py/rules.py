"""The rules every discovered URL goes through before it may be queued.

Larbin applied them in ``fetch/checker.cc``; here they are one sans-I/O object
built from the configuration.  :meth:`UrlRules.admit` answers, for a
normalized URL found on a page (or given as a seed, or a redirect target),
either the depth it gets in the frontier or the reason it is refused:

* depth: a seed has ``depthInSite``; a link has its page's depth - 1; with
  ``depthBySite`` a link to another host starts again at ``depthInSite``; a
  redirect keeps its page's depth; below 0 the URL is refused as ``tooDeep``.
* ``noExternalLinks``: a link to another host than its page's is ``outSite``.
* ``lockSite``: only the hosts of the start URLs (and of URLs given at run
  time before any crawl) are crawled; any other host is ``outSite``.
* ``limitToDomain``: the host must end with one of the listed suffixes
  (``.fr`` matches ``a.fr``; ``fr`` matches ``fr`` and ``x.fr``), else ``outDomain``.
* ``forbiddenExtensions``: a path ending in one of them is
  ``forbiddenExtension`` (``.html``, ``.htm`` and paths ending in ``/`` are
  never forbidden).
* ``getCGI`` off: a URL with a query is ``cgi``.
* ``urlInclude`` / ``urlExclude`` (:class:`larbin_py.scope.UrlPatterns`,
  linear-time regular expressions): when includes are given, a URL none
  matches is ``notIncluded``; one an exclude matches is ``excluded``.  They
  are asked last, after the cheaper rules.

The seen test is not here: it belongs to the frontier's caller, after these
rules, so that a URL refused as too deep may still be taken when a shorter
path to it turns up later.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .scope import UrlPatterns
from .url import host_of

__all__ = ["UrlRules"]

NEVER_FORBIDDEN = frozenset({".html", ".htm"})


@dataclass(slots=True)
class UrlRules:
    depth_in_site: int = 5
    depth_by_site: bool = False
    no_external_links: bool = False
    lock_site: bool = False
    get_cgi: bool = True
    limit_to_domain: tuple[str, ...] = ()
    forbidden_extensions: tuple[str, ...] = ()
    locked_hosts: set[str] = field(default_factory=set)
    #: urlInclude / urlExclude (None or empty: every URL).
    patterns: UrlPatterns | None = None
    _ext: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        exts = []
        for ext in self.forbidden_extensions:
            ext = ext.lower()
            if not ext.startswith("."):
                ext = "." + ext
            if ext not in NEVER_FORBIDDEN:
                exts.append(ext)
        self._ext = tuple(exts)
        self.limit_to_domain = tuple(d.lower() for d in self.limit_to_domain)
        if self.patterns is not None and not self.patterns:
            self.patterns = None

    @classmethod
    def from_config(cls, config) -> "UrlRules":
        return cls(
            depth_in_site=config.depth_in_site,
            depth_by_site=config.depth_by_site,
            no_external_links=config.no_external_links,
            lock_site=config.lock_site,
            get_cgi=config.get_cgi,
            limit_to_domain=tuple(config.limit_to_domain),
            forbidden_extensions=tuple(config.forbidden_extensions),
            patterns=UrlPatterns(config.url_include, config.url_exclude),
        )

    def lock(self, url: str) -> None:
        """Add the host of a start URL to the hosts ``lockSite`` allows."""
        self.locked_hosts.add(host_of(url))

    def check(self, url: str) -> str | None:
        """The reason ``url`` may never be crawled, or None (depth aside)."""
        host = None
        if self.lock_site:
            host = host_of(url)
            if host not in self.locked_hosts:
                return "outSite"
        if self.limit_to_domain:
            host = host or host_of(url)
            if not any(host == d.lstrip(".") or host.endswith(d if d.startswith(".") else "." + d) for d in self.limit_to_domain):
                return "outDomain"
        q = url.find("?")
        if q != -1 and not self.get_cgi:
            return "cgi"
        if self._ext:
            path = (url if q == -1 else url[:q]).lower()
            if not path.endswith("/") and path.endswith(self._ext):
                return "forbiddenExtension"
        if self.patterns is not None:
            return self.patterns.check(url)
        return None

    def admit_many(self, urls, page_url: str, page_depth: int, *,
                   redirect: bool = False) -> tuple[list[str], list[int], dict[str, int]]:
        """:meth:`admit` for each of the links found on ``page_url``, in one loop.

        Returns the admitted URLs (in order), their depths, and how many were
        refused for each reason.  A link that starts with the page's own
        ``scheme://host:port/`` is on its host without looking further.
        """
        page_host = host_of(page_url)
        start = page_url.find("://") + 3
        slash = page_url.find("/", start)
        own = page_url[:slash + 1] if slash != -1 else page_url + "/"
        if redirect:
            internal = external = page_depth
        else:
            internal = page_depth - 1
            external = self.depth_in_site if self.depth_by_site else internal
        no_external = self.no_external_links
        check = self.check if (self.lock_site or self.limit_to_domain or not self.get_cgi or self._ext
                               or self.patterns is not None) else None
        ok: list[str] = []
        depths: list[int] = []
        refused: dict[str, int] = {}
        for url in urls:
            if url.startswith(own) or host_of(url) == page_host:
                depth = internal
            elif no_external:
                refused["outSite"] = refused.get("outSite", 0) + 1
                continue
            else:
                depth = external
            if depth < 0:
                refused["tooDeep"] = refused.get("tooDeep", 0) + 1
                continue
            if check is not None:
                reason = check(url)
                if reason is not None:
                    refused[reason] = refused.get(reason, 0) + 1
                    continue
            ok.append(url)
            depths.append(depth)
        return ok, depths, refused

    def admit(self, url: str, page_host: str | None, page_depth: int, *, redirect: bool = False) -> int | str:
        """The depth ``url`` gets, or the reason (a str) it is refused.

        ``page_host``/``page_depth`` describe the page the URL was found on;
        ``page_host`` None means a seed or a URL given at run time.
        """
        if page_host is None:
            depth = self.depth_in_site
        else:
            external = host_of(url) != page_host
            if external and self.no_external_links:
                return "outSite"
            if redirect:
                depth = page_depth
            elif external and self.depth_by_site:
                depth = self.depth_in_site
            else:
                depth = page_depth - 1
            if depth < 0:
                return "tooDeep"
        reason = self.check(url)
        return reason if reason is not None else depth
