"""The schema: every larbin.conf key declared once, as a field of :class:`Config`.

Each field of the frozen dataclass :class:`Config` is one key::

    wait_duration: float = setting(
        Seconds("waitDuration", 0, 3600), 2.0,
        doc="seconds between two requests to one host name or one IP ...")

-- the attribute and its type, the key's name and syntax with its range
(larbin_py.config.keys), the default and a one-line description, in one
place.  :func:`setting` returns a :func:`dataclasses.field` carrying the key
in its metadata; :data:`KEYS` is read back from the fields, in their order
(``--print-config``'s and docs/configuration.md's).  From that one
declaration come the defaults, every check (the file's, ``--set``'s and a
Config built in code: :meth:`Config.__post_init__` runs each key's
``coerce``), ``--print-config`` (larbin_py.config.text.format_config) and
the reference table (larbin_py.config.reference).

Why fields that carry their keys, and not a Config made by
:func:`dataclasses.make_dataclass` from a table of keys: the class stays a
class that readers and type checkers see as written (each attribute with
its annotation; :func:`setting` is typed like :func:`dataclasses.field`,
its return the default's type), and no caller changes.

Rules between keys (``urlInput`` needs ``httpPort``, ``rttMin`` at most
``rttMax``, ``saveDir`` and ``stateDir`` apart...) are :func:`_cross_problems`,
checked after every key's own; each key's description names the ones it
is part of.  A field without a key (only ``source``, which is not a
setting) or two keys of one name are refused when this module is imported.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import os
from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, TypeVar, overload

from .. import __version__
from ..frontier.addresses import POLICIES as PRIVATE_NETWORKS
from ..frontier.addresses import is_loopback
from ..net.choices import CA_MODES as TLS_CA_MODES
from ..net.choices import H2_AVAILABLE
from ..net.choices import HTTP_VERSIONS
from ..net.choices import PARSERS as HTTP_PARSERS
from ..site_settings import SiteRule
from .errors import Bad, ConfigError
from .keys import (
    Analyzers,
    AuthBlock,
    CaFile,
    Choice,
    Command,
    DnsServers,
    DynamicPages,
    Fraction,
    HttpHosts,
    Int,
    Key,
    Name,
    OutputMode,
    Proxy,
    RedisUrl,
    Replicas,
    Seconds,
    SiteBlock,
    StartUrls,
    Switch,
    Text,
    TlsVerify,
    UrlPatternBlock,
    UserName,
    Words,
    ZkAuthKey,
    ZkHosts,
    ZkPath,
)
from .values import ZkAuth

__all__ = [
    "BY_ATTR", "BY_LOWER", "BY_NAME", "Config", "DEFAULT_FORBIDDEN_EXTENSIONS", "DEFAULT_USER_AGENT", "KEYS",
    "RESOLV_CONF", "default_analysis_workers", "read_resolv_conf", "replicas_for", "setting",
    "system_dns_servers",
]

DEFAULT_USER_AGENT = f"larbin_py/{__version__}"

#: Extensions that are almost never HTML: not worth a request by default.
DEFAULT_FORBIDDEN_EXTENSIONS: tuple[str, ...] = (
    ".7z", ".apk", ".avi", ".bin", ".bmp", ".bz2", ".class", ".deb", ".dmg",
    ".doc", ".docx", ".dvi", ".exe", ".flac", ".flv", ".gif", ".gz", ".ico",
    ".iso", ".jar", ".jpeg", ".jpg", ".m4a", ".m4v", ".mkv", ".mov", ".mp3",
    ".mp4", ".mpeg", ".mpg", ".msi", ".ogg", ".pdf", ".png", ".ppt", ".pptx",
    ".ps", ".psd", ".rar", ".rpm", ".svg", ".tar", ".tgz", ".tif", ".tiff",
    ".wav", ".webm", ".webp", ".wmv", ".woff", ".woff2", ".xls", ".xlsx",
    ".xz", ".zip",
)

RESOLV_CONF = "/etc/resolv.conf"
_FALLBACK_DNS: tuple[tuple[str, int], ...] = (("127.0.0.1", 53),)


# --------------------------------------------------------------------------
# The defaults that depend on the machine


def read_resolv_conf(path: str | os.PathLike[str] = RESOLV_CONF) -> tuple[tuple[str, int], ...]:
    """The ``nameserver`` addresses of a resolv.conf, port 53, in order.

    Unreadable files, comments and malformed lines are skipped; duplicates
    are kept once.  Falls back to ``(("127.0.0.1", 53),)`` when none is found.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return _FALLBACK_DNS
    servers: list[tuple[str, int]] = []
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                server = (str(ipaddress.ip_address(words[1])), 53)
            except ValueError:
                continue
            if server not in servers:
                servers.append(server)
    return tuple(servers) or _FALLBACK_DNS


def system_dns_servers() -> tuple[tuple[str, int], ...]:
    """``read_resolv_conf()`` of this machine, read once (Config's default)."""
    return read_resolv_conf(RESOLV_CONF)


@functools.cache
def default_analysis_workers() -> int:
    """``analysisWorkers``' default: one fewer than the cores this process may use, at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


# --------------------------------------------------------------------------
# One declaration per key

_T = TypeVar("_T")


@overload
def setting(key: Key, default: _T, *, doc: str, default_text: str | None = None) -> _T: ...


@overload
def setting(key: Key, *, factory: Callable[[], _T], doc: str, default_text: str) -> _T: ...


def setting(key: Key, default: Any = MISSING, *, doc: str, factory: Callable[[], Any] | None = None,
            default_text: str | None = None) -> Any:
    """The Config field of larbin.conf key ``key``: its ``default`` (or a
    ``factory`` of it, whose value depends on the machine: ``default_text``
    then says it in words for the docs) and ``doc``, one line saying what
    the key does."""
    key.doc = doc
    key.default_text = default_text
    if factory is not None:
        return field(default_factory=factory, metadata={"key": key})
    return field(default=default, metadata={"key": key})


@dataclass(frozen=True, slots=True)
class Config:
    """Every crawl setting; attribute names are larbin.conf keys in snake_case.

    Times are seconds (float), sizes bytes, 0 means "off" or "no limit" where
    the key's description says so.  Construction validates every value
    (raising :class:`ConfigError`); lists may be given as any sequence and
    are stored as tuples.  The fields are in larbin.conf's order, each
    declared with its key (:func:`setting`): see docs/configuration.md.
    """

    # Who you are, what is done with the pages, the statistics server
    from_addr: str = setting(
        Text("From", empty=True, email=True), "",
        doc="your e-mail address, sent in the From header so that webmasters can reach you")
    user_agent: str = setting(
        Text("UserAgent"), DEFAULT_USER_AGENT, default_text="larbin_py/VERSION",
        doc="the User-Agent header; robots.txt rules are matched against its name (before '/')")
    output_mode: str = setting(
        OutputMode("outputMode"), "mirror",
        doc="what is done with the pages: mirror rebuilds the sites under saveDir, save numbers them, "
            "warc writes WARC files, stats only counts")
    http_port: int = setting(
        Int("httpPort", 0, 65535), 8081,
        doc="port of the statistics server (/, /stats.json, /metrics); 0: no server")
    http_bind: str = setting(
        Text("httpBind", one_word=True), "127.0.0.1",
        doc="address the statistics server and inputPort listen on; beyond loopback they need httpToken")
    input_port: int = setting(
        Int("inputPort", 0, 65535), 0,
        doc="Larbin's URL input port ('priority depth url' lines); 0: off; differs from httpPort")
    url_input: bool = setting(
        Switch("urlInput"), False,
        doc="accept new URLs by POST /urls on the statistics server (needs httpPort; httpToken beyond loopback)")
    http_token: str | None = setting(
        Text("httpToken", one_word=True, none=True, min_length=8, secret=True), None,
        doc="the secret POST /urls presents (Authorization: Bearer), and every route beyond loopback; "
            "shown as ***")
    http_hosts: tuple[str, ...] = setting(
        HttpHosts("httpHosts"), (),
        doc="names the statistics server answers besides localhost, loopback and httpBind (others: 421, "
            "against DNS rebinding)")
    print_stats: bool = setting(
        Switch("printStats"), False,
        doc="print a summary of the crawl on stdout now and then")
    fetch_info: bool = setting(
        Switch("fetchInfo"), False,
        doc="print one line per fetched page on stdout (url, status, size, time)")
    histograms: bool = setting(
        Switch("histograms"), True,
        doc="show histograms (pages, bytes over time) on the statistics page")

    # Crash safety and files
    can_reload: bool = setting(
        Switch("canReload"), True,
        doc="keep the journal and checkpoints with which --reload continues a crawl after a stop or a crash")
    checkpoint_interval: float = setting(
        Seconds("checkpointInterval", 0, 86_400, above=True), 5.0,
        doc="seconds between two checkpoints: at most this much work is done again after a machine crash")
    sync_commits: bool = setting(
        Switch("syncCommits"), False,
        doc="fsync every commit too: a power loss then costs only the requests in flight (about half "
            "the pages per CPU-second on a disk)")
    save_dir: str = setting(
        Text("saveDir"), "save",
        doc="where mirror, save and warc write")
    state_dir: str = setting(
        Text("stateDir"), "state",
        doc="where the crawl's state lives (owner-only, one process at a time); neither in saveDir nor "
            "holding it")
    files_per_dir: int = setting(
        Int("filesPerDir", 1, 1_000_000), 2000,
        doc="files per directory in save mode")

    # Records of the crawl: the crawl log, recrawls (issue 33)
    crawl_log: str = setting(
        Text("crawlLog", empty=True), "", default_text="stateDir/crawl.log",
        doc="the crawl log, one tab-separated line per URL outcome and robots.txt answer (docs/outputs.md); "
            "none: no log")
    crawl_log_max_bytes: int = setting(
        Int("crawlLogMaxBytes", 0, 1 << 50), 1 << 30,
        doc="the crawl log is rotated (crawl.log.1, .2, ...) once it holds this many bytes; 0: never")
    recrawl_gone: str = setting(
        Choice("recrawlGone", ("keep", "delete")), "keep",
        doc="--recrawl: a page that answers 404 or 410 keeps its file and index line in the mirror (keep) or "
            "loses them (delete)")
    revisit_after: float = setting(
        Seconds("revisitAfter", 0, 315_360_000), 0.0,
        doc="--recrawl: pages that answered fewer seconds ago are not asked again (their files and links "
            "are kept); 0: every page is asked")

    # Connections and flow control
    pages_connexions: int = setting(
        Int("pagesConnexions", 1, 100_000), 100,
        doc="pages fetched in parallel, at most")
    dns_connexions: int = setting(
        Int("dnsConnexions", 1, 10_000), 10,
        doc="DNS queries in flight, at most")
    connexions_per_ip: int = setting(
        Int("connexionsPerIP", 1, 100_000), 1,
        doc="open connections to one IP address, at most")
    flow_control: bool = setting(
        Switch("flowControl"), True,
        doc="adapt the number of connections to round-trip times, within [minConnexions, pagesConnexions]")
    min_connexions: int = setting(
        Int("minConnexions", 1, 100_000), 10,
        doc="flow control: the lowest cap on connections (lowered to pagesConnexions when above it)")
    rtt_alpha: float = setting(
        Fraction("rttAlpha"), 0.125,
        doc="flow control: the weight of a new round-trip time in the smoothed one")
    rtt_interval: float = setting(
        Seconds("rttInterval", 0, 3600, above=True), 5.0,
        doc="flow control: seconds over which the lowest and highest smoothed round trips are kept")
    rtt_min: float = setting(
        Seconds("rttMin", 0, 600), 0.1,
        doc="flow control: a response faster than this opens connIncrease more connections; at most rttMax")
    rtt_max: float = setting(
        Seconds("rttMax", 0, 600, above=True), 2.0,
        doc="flow control: a response slower than this closes connDecrease connections")
    conn_increase: int = setting(
        Int("connIncrease", 0, 100_000), 1,
        doc="flow control: connections opened by a fast response")
    conn_decrease: int = setting(
        Int("connDecrease", 0, 100_000), 2,
        doc="flow control: connections closed by a slow response")
    server_rtt_factor: float = setting(
        Seconds("serverRttFactor", 0, 100, what="a number"), 3.0,
        doc="the delay between two requests to a slow IP grows to this many times its smoothed round trip "
            "(0: never)")

    # DNS, politeness, timeouts
    dns_servers: tuple[tuple[str, int], ...] = setting(
        DnsServers("dnsServers", nonempty=True), factory=system_dns_servers,
        default_text="the nameserver lines of /etc/resolv.conf (127.0.0.1:53 if none)",
        doc="the DNS servers asked")
    dns_timeout: float = setting(
        Seconds("dnsTimeout", 0, 600, above=True), 5.0,
        doc="seconds to wait for a DNS answer before retrying")
    dns_retry_delay: float = setting(
        Seconds("dnsRetryDelay", 0, 3600, above=True), 2.0,
        doc="seconds before a name that did not resolve is asked again, doubled at each failure")
    dns_valid_time: float = setting(
        Seconds("dnsValidTime", 0, 31_536_000), 172_800.0,
        doc="seconds a DNS answer is kept, at least (2 days, as Larbin)")
    wait_duration: float = setting(
        Seconds("waitDuration", 0, 3600), 2.0,
        doc="seconds between two requests to one host name or one IP (a longer robots.txt Crawl-delay wins)")
    wait_jitter: float = setting(
        Fraction("waitJitter", zero=True), 0.05,
        doc="each wait is stretched by a random part of up to this fraction of it")
    connect_timeout: float = setting(
        Seconds("connectTimeout", 0, 600, above=True), 10.0,
        doc="seconds to wait for a TCP connection")
    timeout_page: float = setting(
        Seconds("timeoutPage", 0, 3600, above=True), 30.0,
        doc="seconds a page may take, plus one per timeoutIncr bytes of body received")
    timeout_incr: int = setting(
        Int("timeoutIncr", 0, 1_000_000_000), 2000,
        doc="bytes of body that earn a page one more second (0: none)")
    retries: int = setting(
        Int("retries", 0, 20), 3,
        doc="times a URL is tried again after a DNS failure, a refused or reset connection, a timeout, "
            "or a 429, 500, 502, 503 or 504 answer")

    # Limits and memory
    max_page_size: int = setting(
        Int("maxPageSize", 1, 1_000_000_000), 5_000_000,
        doc="largest page kept, bytes; longer pages are cut and counted as tooBig")
    max_url_size: int = setting(
        Int("maxUrlSize", 16, 65_536), 512,
        doc="longest URL followed, characters")
    max_urls_by_site: int = setting(
        Int("maxUrlsBySite", 1, 1_000_000), 40,
        doc="URLs waiting per site in its queue, in memory; more wait beside it (see ramUrls)")
    ram_urls: int = setting(
        Int("ramUrls", 1, 100_000_000), 100_000,
        doc="URLs held in memory by the URL library (the rest wait on disk)")
    prune_after: float = setting(
        Seconds("pruneAfter", 0, 86_400, above=True), 120.0,
        doc="seconds an idle site stays in memory before it is pruned")
    keep_sites: int = setting(
        Int("keepSites", 0, 100_000_000), 100_000,
        doc="pruned sites whose robots.txt rules, crawl-delay and counts are kept in an LRU (0: none)")
    seen_store: str = setting(
        Choice("seenStore", ("auto", "array", "disk")), "auto",
        doc="the URL-seen set: disk (a sorted file, 1.3 bytes of RAM a URL), array (all in RAM, 8 to 11 "
            "bytes a URL), auto (disk past 262144 URLs)")
    # The network's reach (docs/network.md): proxy, TLS, IPv6, authentication
    proxy: tuple | None = setting(
        Proxy("proxy"), None,
        doc="an HTTP proxy for every request, https through CONNECT; USER:PASSWORD@ sends Basic proxy "
            "authentication (the password shown as ***)")
    no_proxy: tuple[str, ...] = setting(
        Words("noProxy"), (),
        doc="hosts reached without the proxy: example.com (and its subdomains), .example.com (subdomains), "
            "an address or CIDR range, * (all)")
    tls_ca_file: str = setting(
        CaFile("tlsCaFile"), "",
        doc="a PEM file of CA certificates to trust for https (see tlsCaMode)")
    tls_ca_mode: str = setting(
        Choice("tlsCaMode", TLS_CA_MODES), "add",
        doc="add: tlsCaFile's CAs besides the system's; only: tlsCaFile's CAs alone")
    tls_verify: tuple[str, ...] = setting(
        TlsVerify("tlsVerify"), (),
        doc="on, or off HOST...: the hosts whose certificates are not checked (warned at start; * for all)")
    ip_version: str = setting(
        Choice("ipVersion", ("any", "4", "6")), "any",
        doc="the addresses asked of DNS and used: any (AAAA and A, IPv6 first with Happy Eyeballs), 4 or 6")
    ipv6_prefix: int = setting(
        Int("ipv6Prefix", 32, 128), 64,
        doc="IPv6 addresses sharing this many leading bits count as one IP for politeness (128: each address)")
    happy_eyeballs_delay: float = setting(
        Seconds("happyEyeballsDelay", 0.01, 5.0), 0.25,
        doc="seconds before the next address of a host is tried while the first does not answer (RFC 8305)")
    http_version: str = setting(
        Choice("httpVersion", HTTP_VERSIONS), "1.1",
        doc="https: 1.1 only, auto (HTTP/2 when the server offers it by ALPN and the h2 package is "
            "installed) or 2 (only h2 offered)")
    auth: tuple[tuple[str, str, str, str], ...] = setting(
        AuthBlock("auth"), (),
        doc="HTTP authentication, one rule a line: PREFIX basic|digest USER PASSWORD, or PREFIX bearer "
            "FILE; sent to that origin only")
    bond_width: int = setting(
        Int("bondWidth", 0, 1_000_000_000_000), 0,
        doc="total download bandwidth, bytes/s (0: unlimited)")
    http_parser: str = setting(
        Choice("httpParser", HTTP_PARSERS), "httptools",
        doc="what reads HTTP responses: httptools (llhttp; h11 referees what it refuses) or h11 alone")
    limit_time: float = setting(
        Seconds("limitTime", 0, 31_536_000), 0.0,
        doc="stop after this many seconds (0: no limit)")
    limit_page: int = setting(
        Int("limitPage", 0, 1_000_000_000_000), 0,
        doc="stop after this many pages fetched (0: no limit)")

    # What is crawled
    depth_in_site: int = setting(
        Int("depthInSite", 0, 10_000), 5,
        doc="how many links deep to go from a start URL (0: the start pages only)")
    depth_by_site: bool = setting(
        Switch("depthBySite"), False,
        doc="count the depth per site: a link to another site starts again at depthInSite")
    max_redirects: int = setting(
        Int("maxRedirects", 0, 100), 5,
        doc="redirects followed from one URL (0: none)")
    no_external_links: bool = setting(
        Switch("noExternalLinks"), False,
        doc="follow only links within the page's own site")
    lock_site: bool = setting(
        Switch("lockSite"), False,
        doc="crawl only the sites of the start URLs (and of URLs given before the crawl starts)")
    private_networks: str = setting(
        Choice("privateNetworks", PRIVATE_NETWORKS), "seeds",
        doc="private addresses (loopback, RFC 1918, link-local...): allow, seeds (only for the start "
            "URLs' hosts) or deny")

    # Scope: sitemaps, URL patterns, budgets, per-site settings, page-level robots rules (docs/scope.md)
    sitemaps: bool = setting(
        Switch("sitemaps"), False,
        doc="read each site's sitemaps (those its robots.txt names, else /sitemap.xml) and queue the URLs "
            "they list, through the same rules as links")
    url_include: tuple[str, ...] = setting(
        UrlPatternBlock("urlInclude"), (),
        doc="regular expressions (RE2, one a line): when given, a URL must match one of them (else notIncluded)")
    url_exclude: tuple[str, ...] = setting(
        UrlPatternBlock("urlExclude"), (),
        doc="regular expressions (RE2, one a line): a URL matching one of them is not crawled (excluded)")
    max_pages_by_site: int = setting(
        Int("maxPagesBySite", 0, 1_000_000_000_000), 0,
        doc="a site's page budget: past it, its URLs are forgotten as siteBudget (0: none)")
    max_bytes_by_site: int = setting(
        Int("maxBytesBySite", 0, 1 << 60), 0,
        doc="a site's byte budget (bodies read): past it, its URLs are forgotten as siteBudget (0: none)")
    site: tuple[SiteRule, ...] = setting(
        SiteBlock("site"), (),
        doc="per-site settings, one HOST-PATTERN NAME=VALUE... line each (waitDuration, header, UserAgent, "
            "budgets...); the first matching line wins")
    respect_noindex: bool = setting(
        Switch("respectNoindex"), True,
        doc="do not save a page whose meta robots or X-Robots-Tag says noindex (counted noindex; its links "
            "are still followed unless nofollow)")
    follow_canonical: bool = setting(
        Switch("followCanonical"), False,
        doc="a page whose rel=canonical names another URL is not saved (counted canonicalised): that URL "
            "is queued instead")

    # Membership of the distributed mode
    membership: str = setting(
        Choice("membership", ("redis", "zookeeper")), "redis",
        doc="distributed mode: how workers learn who is alive (a Redis key each, or a ZooKeeper session each)")
    zk_hosts: str = setting(
        ZkHosts("zkHosts"), "127.0.0.1:2181",
        doc="the ZooKeeper ensemble (membership zookeeper)")
    zk_path: str = setting(
        ZkPath("zkPath"), "/larbin_py",
        doc="the znode under which workers register (membership zookeeper)")
    zk_session_timeout: float = setting(
        Seconds("zkSessionTimeout", 0, 600, above=True), 6.0,
        doc="the ZooKeeper session timeout: how long a killed worker stays in the others' view; below leaseTtl")
    zk_auth: ZkAuth | None = setting(
        ZkAuthKey("zkAuth"), None,
        doc="the crawl's ZooKeeper identity: its znodes get an ACL for it alone; shown as USER:***")

    # What is fetched and kept
    use_cookies: bool = setting(
        Switch("useCookies"), False,
        doc="send back the cookies sites set (RFC 6265); the jar is kept across --reload")
    get_cgi: bool = setting(
        Switch("getCGI"), False,
        doc="fetch URLs with a query string ('?')")
    punycode: bool = setting(
        Switch("punycode"), True,
        doc="accept internationalized host names (converted to punycode); off drops them")
    ignore_robots: bool = setting(
        Switch("ignoreRobots"), False,
        doc="do not read robots.txt (only for sites that are yours)")
    robots_retry_delay: float = setting(
        Seconds("robotsRetryDelay", 0, 3600, above=True), 1.0,
        doc="seconds before a robots.txt that answered 5xx or 429, or no answer, is asked again, "
            "doubled at each failure")
    page_no_duplicate: bool = setting(
        Switch("pageNoDuplicate"), False,
        doc="do not keep a page whose body is the same as one already kept (among the last 100000)")
    get_image: bool = setting(
        Switch("getImage"), False,
        doc="fetch images (img src) too")
    any_type: bool = setting(
        Switch("anyType"), False,
        doc="keep pages of every content type, not only HTML")
    specific_search: bool = setting(
        Switch("specificSearch"), False,
        doc="keep only the pages whose content type or extension is in specificSet (crawling HTML to find them)")
    specific_set: tuple[str, ...] = setting(
        Words("specificSet", block=True), (),
        doc="the content types and extensions specificSearch keeps")
    limit_to_domain: tuple[str, ...] = setting(
        Words("limitToDomain", block=True), (),
        doc="crawl only hosts ending with one of these suffixes (.fr matches a.fr; fr matches fr and x.fr)")
    forbidden_extensions: tuple[str, ...] = setting(
        Words("forbiddenExtensions", block=True), DEFAULT_FORBIDDEN_EXTENSIONS,
        doc="URLs whose path ends with one of these extensions are not fetched (the block replaces the default)")

    # Dynamic pages
    dynamic_pages: tuple[tuple[str, str], ...] = setting(
        DynamicPages("dynamicPages"), (),
        doc="the URLs rendered in headless Chromium: PATTERN a URL prefix or re:REGEX, TRIGGER none, "
            "scroll or call:FUNCTION")
    dynamic_connexions: int = setting(
        Int("dynamicConnexions", 1, 64), 2,
        doc="dynamic pages rendered at once (browser tabs)")
    dynamic_timeout: float = setting(
        Seconds("dynamicTimeout", 0, 600, above=True), 10.0,
        doc="seconds a dynamic page may take to settle; one still busy is kept as rendered so far")
    dynamic_other_hosts: bool = setting(
        Switch("dynamicOtherHosts"), False,
        doc="let a dynamic page's scripts request other hosts (only hosts the crawl already knows)")
    dynamic_user: str = setting(
        UserName("dynamicUser"), "nobody",
        doc="the user Chromium runs as when the crawler runs as root (never uid 0)")
    dynamic_sandbox: bool = setting(
        Switch("dynamicSandbox"), True,
        doc="Chromium's sandbox; off runs it with --no-sandbox (a warning at start)")

    # The process's cores
    cpu_affinity: str = setting(
        Choice("cpuAffinity", ("off", "auto")), "off",
        doc="auto keeps the event loop and its writer thread on one core while no other program wants it "
            "(less CPU); off: the kernel places them")

    # The analysis stage
    analysis_workers: int = setting(
        Int("analysisWorkers", 0, 256), factory=default_analysis_workers,
        default_text="the cores less one, at least 1",
        doc="analysis processes beside the event loop (0: analysis inline, unless analyzer lines are given)")
    analysis_share: bool = setting(
        Switch("analysisShare"), True,
        doc="when every analysis process is busy, the event loop extracts a page's links itself")
    analyzers: tuple[tuple[str, ...], ...] = setting(
        Analyzers("analyzer"), (),
        doc="an analyzer run on the pages; results in analysisDir/NAME.jsonl")
    analysis_retries: int = setting(
        Int("analysisRetries", 0, 100), 3,
        doc="times a failed analysis is tried again before it is marked failed and an alert raised")
    analysis_timeout: float = setting(
        Seconds("analysisTimeout", 0, 86_400, above=True), 60.0,
        doc="seconds one analysis may take; past it the process is killed and replaced")
    analysis_backoff: float = setting(
        Seconds("analysisBackoff", 0, 3600), 1.0,
        doc="seconds before the first retry of an analysis (doubled each time, at most 60)")
    analysis_queue_max: int = setting(
        Int("analysisQueueMax", 1, 10_000_000), 1000,
        doc="analysis tasks queued or running at most: the crawl starts no request while this many wait")
    alert_command: tuple[str, ...] = setting(
        Command("alertCommand"), (),
        doc="a command run with each alert: the alert as JSON on its stdin, {url}, {analyzer}, {error}, "
            "{kind} replaced")
    analysis_dir: str = setting(
        Text("analysisDir"), "analysis",
        doc="where analyzers write their results")

    # The start, and the distributed mode
    start_urls: tuple[str, ...] = setting(
        StartUrls("startUrl"), (),
        doc="the start URLs (--seed URL adds more)")
    redis_url: str = setting(
        RedisUrl("redisUrl"), "", default_text="none (one process)",
        doc="distributed mode: where the crawl's shared state lives (auto: a private redis-server under stateDir)")
    redis_replicas: int | None = setting(
        Replicas("redisReplicas"), None,
        doc="replicas that must hold a tick's writes (Redis WAIT); auto: 1 with redis+sentinel://, else 0")
    crawl_name: str = setting(
        Name("crawlName"), "larbin",
        doc="the crawl's name: every Redis key starts with lb:NAME:, so crawls can share a Redis")
    worker_id: str = setting(
        Name("workerId", empty=True), "", default_text="the host name and process id",
        doc="this worker's name in the crawl (save and warc write under saveDir/WORKER)")
    partitions: int = setting(
        Int("partitions", 1, 65_536), 256,
        doc="hosts are hashed into this many partitions, the unit that moves between workers; fixed at creation")
    seen_buckets: int = setting(
        Int("seenBuckets", 1, 65_536), 128,
        doc="seen-URL buckets per partition in Redis; fixed at creation")
    lease_ttl: float = setting(
        Seconds("leaseTtl", 0.2, 3600), 10.0,
        doc="seconds a worker's membership and partition leases live without renewal")
    ip_lease_hold: float = setting(
        Seconds("ipLeaseHold", 0, 3600), 0.0,
        doc="seconds a worker keeps an IP lease another worker asks for (0: max(10, 5 x waitDuration))")
    redis_flush_interval: float = setting(
        Seconds("redisFlushInterval", 0, 60, above=True), 0.5,
        doc="seconds links wait, at most, before a worker sends its Redis pipeline")
    redis_batch: int = setting(
        Int("redisBatch", 1, 1_000_000), 1000,
        doc="links buffered, at most, before a worker sends its Redis pipeline")
    respawn: bool = setting(
        Switch("respawn"), True,
        doc="--workers: start a worker again when it dies")
    partition_shares: str = setting(
        Choice("partitionShares", ("measured", "equal")), "measured",
        doc="distributed mode: partitions per worker in proportion to each one's measured pages per second "
            "(measured), or as many each (equal)")

    #: The file this configuration was read from (not a setting: ignored by ==).
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for key in KEYS:
            value = getattr(self, key.attr)
            try:
                coerced = key.coerce(value)
            except Bad as exc:
                raise ConfigError(None, None, key.name, str(exc)) from None
            if coerced is not value:
                object.__setattr__(self, key.attr, coerced)
        problems = _cross_problems(self)
        if problems:
            name, message = problems[0]
            raise ConfigError(None, None, name, message)

    def replace(self, **changes: Any) -> "Config":
        """A copy with ``changes`` (attribute names), validated like the original."""
        return dataclasses.replace(self, **changes)

    @property
    def crawl_log_path(self) -> str | None:
        """The crawl log's file: ``crawlLog``, by default ``stateDir/crawl.log``; None for ``none``."""
        if self.crawl_log == "none":
            return None
        return self.crawl_log or os.path.join(self.state_dir, "crawl.log")


def _bind(config_class: type) -> tuple[Key, ...]:
    """The keys of ``config_class``'s fields, in order, each told its attribute."""
    keys: list[Key] = []
    for f in dataclasses.fields(config_class):
        key = f.metadata.get("key")
        if key is None:
            if f.name != "source":
                raise TypeError(f"Config.{f.name} is declared without its key: use setting(KEY, default, doc=...)")
            continue
        if not key.doc or "\n" in key.doc:
            raise TypeError(f"{key.name}: expected a one-line doc")
        if f.default is MISSING and key.default_text is None:
            raise TypeError(f"{key.name}: a default made by a factory needs its default_text (for the docs)")
        key.attr = f.name
        keys.append(key)
    lowered = [key.name.lower() for key in keys]
    if len(set(lowered)) != len(lowered):
        raise TypeError("two keys differ only by case: " + ", ".join(
            sorted({key.name for key in keys if lowered.count(key.name.lower()) > 1})))
    return tuple(keys)


#: Every key, in larbin.conf order.
KEYS: tuple[Key, ...] = _bind(Config)
BY_NAME: dict[str, Key] = {key.name: key for key in KEYS}
BY_ATTR: dict[str, Key] = {key.attr: key for key in KEYS}
BY_LOWER: dict[str, Key] = {key.name.lower(): key for key in KEYS}


# --------------------------------------------------------------------------
# Rules between keys


def _cross_problems(config: Config) -> list[tuple[str, str]]:
    """Problems between keys, as (key name, message); [] when consistent."""
    problems = []
    if config.url_input:
        if config.http_port == 0:
            problems.append(("urlInput", "needs the stats server: httpPort is 0 (off)"))
        elif config.http_token is None and not is_loopback(config.http_bind):
            problems.append(("urlInput", f"httpBind {config.http_bind} is not a loopback address, "
                                         "so an httpToken is required"))
    if config.rtt_min > config.rtt_max:
        problems.append(("rttMin", f"{config.rtt_min:g} s is above rttMax ({config.rtt_max:g} s)"))
    if config.specific_search and not config.specific_set:
        problems.append(("specificSearch", "needs a specificSet block (the types or extensions to keep)"))
    if config.http_port and config.http_port == config.input_port:
        problems.append(("inputPort", f"same port as httpPort ({config.http_port})"))
    if not is_loopback(config.http_bind) and config.http_token is None:
        # Beyond loopback, whoever reaches the address could feed the crawl
        # URLs, or read every URL and host of it: a token, or no server.
        if config.input_port:
            problems.append(("inputPort", f"httpBind {config.http_bind} is not a loopback address, so the "
                                          "input port needs an httpToken (or inputPort 0)"))
        if config.http_port:
            problems.append(("httpBind", f"{config.http_bind} is not a loopback address, so the stats "
                                         f"server (httpPort {config.http_port}) needs an httpToken "
                                         "(or httpPort 0)"))
    if config.redis_replicas and config.redis_url in ("", "auto"):
        problems.append(("redisReplicas", f"{config.redis_replicas} needs a Redis with replicas (redisUrl "
                                          "redis://... or redis+sentinel://...), but " + (
                                              "redisUrl auto starts one redis-server without any"
                                              if config.redis_url else "redisUrl is not set")))
    if config.http_version == "2" and not H2_AVAILABLE:
        problems.append(("httpVersion", "2 needs the h2 package (pip install 'larbin_py[http2]')"))
    if config.tls_ca_mode == "only" and not config.tls_ca_file:
        problems.append(("tlsCaMode", "only needs a tlsCaFile (no CA would be trusted)"))
    problems.extend(_nesting_problems(config))
    return problems


def _nesting_problems(config: Config) -> list[tuple[str, str]]:
    """saveDir and stateDir must be apart: neither inside the other.

    A mirror writes ``saveDir/HOST/PATH``: with stateDir inside saveDir, a
    crawled host named like it overwrites the crawl's own state.  Compared
    as real paths (symbolic links resolved), so two spellings of one folder
    are caught too.
    """
    save = os.path.realpath(config.save_dir)
    state = os.path.realpath(config.state_dir)
    if save == state:
        return [("stateDir", f"must differ from saveDir ({config.save_dir!r})")]
    if _inside(state, save):
        return [("stateDir", f"{config.state_dir!r} is inside saveDir {config.save_dir!r} (crawled pages "
                             "could overwrite the crawl's state): keep stateDir and saveDir apart")]
    if _inside(save, state):
        return [("saveDir", f"{config.save_dir!r} is inside stateDir {config.state_dir!r}: "
                            "keep saveDir and stateDir apart")]
    return []


def _inside(path: str, folder: str) -> bool:
    """True when real path ``path`` lies under real path ``folder``."""
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def replicas_for(config: Config) -> int:
    """How many replicas a tick waits for (``WAIT N``): ``redisReplicas`` when
    set, else (``auto``) 1 for a ``redis+sentinel://`` redisUrl and 0 otherwise."""
    if config.redis_replicas is not None:
        return config.redis_replicas
    return 1 if config.redis_url[:17].lower() == "redis+sentinel://" else 0
