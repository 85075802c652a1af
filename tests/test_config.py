"""larbin.conf reading: the shipped file, every key's round trip, every error."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from larbin_py.site_settings import SiteRule
from larbin_py.config import (
    DEFAULT_FORBIDDEN_EXTENSIONS,
    DEFAULT_USER_AGENT,
    KEYS,
    OUTPUT_MODES,
    Config,
    ConfigError,
    ZkAuth,
    demo_config,
    format_config,
    load_config,
    parse_config_text,
    read_resolv_conf,
)

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "larbin.conf"
SEED = "startUrl http://a.example/\n"


def parse(text: str, *overrides: tuple[str, str], **kw) -> Config:
    kw.setdefault("resolv_conf", "/nonexistent/resolv.conf")
    return parse_config_text(text, "t.conf", overrides, **kw)


def error(text: str, *overrides: tuple[str, str], **kw) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, *overrides, **kw)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- shipped file


def test_shipped_conf_parses_with_sane_polite_defaults():
    config = load_config(SHIPPED, require_start_urls=False, resolv_conf="/nonexistent")
    assert config.start_urls == ()
    assert config.output_mode == "mirror"
    assert config.wait_duration >= 1
    assert config.pages_connexions == 100
    assert config.http_port == 8081 and config.http_bind == "127.0.0.1"
    assert (config.save_dir, config.state_dir) == ("save", "state")
    assert config.connexions_per_ip == 1 and not config.ignore_robots
    assert "@" in config.from_addr
    assert config.forbidden_extensions == DEFAULT_FORBIDDEN_EXTENSIONS
    assert config.source == str(SHIPPED)


def test_shipped_conf_needs_a_seed_for_a_real_crawl():
    with pytest.raises(ConfigError, match=r"larbin\.conf: startUrl: no start URL"):
        load_config(SHIPPED)
    config = load_config(SHIPPED, extra_start_urls=["https://www.example.org/"])
    assert config.start_urls == ("https://www.example.org/",)


def test_shipped_conf_documents_every_key():
    text = SHIPPED.read_text()
    documented = set(re.findall(r"^#?\s*([A-Za-z][A-Za-z0-9]*)\b", text, re.M))
    missing = [key.name for key in KEYS if key.name not in documented]
    assert missing == []


def test_dynamic_pages_block_one_rule_a_line():
    config = parse_config_text(SEED + "dynamicPages\n  http://a.example/list scroll\n"
                               "  re:https?://b\\.example/ call:app.more  # lazy list\n  http://c.example/\nend\n",
                               "t.conf")
    assert config.dynamic_pages == (("http://a.example/list", "scroll"),
                                    ("re:https?://b\\.example/", "call:app.more"), ("http://c.example/", "none"))
    for rule, message in (("http://a/ scrol", "trigger must be none, scroll or call:FUNCTION, got 'scrol'"),
                          ("re:( none", "bad regular expression '('"),
                          ("ftp://a/ none", "a pattern is an http(s) URL prefix or re:REGEX, got 'ftp://a/'"),
                          ("http://a/ call:1x", "call: needs a JavaScript function name, got '1x'"),
                          ("http://a/ none extra", "expected 'PATTERN [TRIGGER]'")):
        with pytest.raises(ConfigError) as exc:
            parse_config_text(SEED + f"dynamicPages\n  http://ok.example/\n  {rule}\nend\n", "t.conf")
        assert str(exc.value).startswith("t.conf:4: dynamicPages: " + message), str(exc.value)


def test_demo_config_needs_no_start_url():
    config = demo_config()
    assert config.start_urls == () and config.output_mode == "stats"
    assert demo_config([("waitDuration", "0")]).wait_duration == 0.0


# ---------------------------------------------------------------- round trip

#: A value different from the default for every Config attribute.
NON_DEFAULTS = {
    "from_addr": "crawler@example.org",
    "user_agent": "mybot/2.0 (+https://example.org/bot)",
    "output_mode": "warc",
    "http_port": 0,
    "http_bind": "::1",
    "input_port": 1976,
    "print_stats": True,
    "fetch_info": True,
    "histograms": False,
    "can_reload": False,
    "lock_site": True,
    "private_networks": "deny",
    "pages_connexions": 12,
    "dns_connexions": 3,
    "depth_in_site": 0,
    "depth_by_site": True,
    "max_redirects": 0,
    "no_external_links": True,
    "wait_duration": 0.2,
    "wait_jitter": 0.0,
    "proxy": ("cache.example", 3128, "crawler", "pr0xy-s3cret"),
    "no_proxy": ("localhost", ".internal.example", "10.0.0.0/8"),
    "tls_ca_file": "/etc/ssl/certs/ca-certificates.crt",
    "tls_ca_mode": "only",
    "tls_verify": ("staging.example", "::1"),
    "ip_version": "6",
    "cpu_affinity": "auto",
    "ipv6_prefix": 56,
    "happy_eyeballs_delay": 0.3,
    "http_version": "auto",
    "auth": (("https://a.example/docs/", "basic", "crawler", "au7h-s3cret"),
             ("https://api.example/", "bearer", "/run/secrets/token", ""),
             ("http://wiki.example/", "digest", "bob", "dig-s3cret")),
    "bond_width": 123456,
    "http_parser": "h11",
    "limit_time": 90.5,
    "limit_page": 1000,
    "use_cookies": True,
    "get_cgi": True,
    "start_urls": ("http://a.example/", "https://b.example:8443/x?y#z"),
    "punycode": False,
    "ignore_robots": True,
    "page_no_duplicate": True,
    "get_image": True,
    "any_type": True,
    "specific_search": True,
    "specific_set": ("application/pdf", ".pdf"),
    "limit_to_domain": (".fr", "dk"),
    "forbidden_extensions": (),
    "max_urls_by_site": 5,
    "ram_urls": 17,
    "prune_after": 2.5,
    "keep_sites": 0,
    "seen_store": "array",
    "timeout_page": 2.5,
    "timeout_incr": 0,
    "connect_timeout": 0.25,
    "max_page_size": 100000,
    "max_url_size": 2048,
    "dns_valid_time": 0.0,
    "dns_timeout": 1e-3,
    "dns_retry_delay": 0.25,
    "robots_retry_delay": 0.75,
    "dns_servers": (("127.0.0.2", 5353), ("::1", 53), ("10.0.0.1", 53)),
    "save_dir": "my save",
    "state_dir": "/var/lib/larbin/state",
    "files_per_dir": 1,
    "crawl_log": "/var/log/larbin/crawl.log",
    "crawl_log_max_bytes": 0,
    "recrawl_gone": "delete",
    "revisit_after": 86400.0,
    "retries": 0,
    "connexions_per_ip": 4,
    "flow_control": False,
    "checkpoint_interval": 1.5,
    "sync_commits": True,
    "min_connexions": 3,
    "rtt_alpha": 0.5,
    "rtt_interval": 2.5,
    "rtt_min": 0.02,
    "rtt_max": 4.0,
    "conn_increase": 2,
    "conn_decrease": 5,
    "server_rtt_factor": 0.0,
    "url_input": True,
    "http_token": "s3cret-token",
    "http_hosts": ("crawler.example", "10.0.0.5", "::1"),
    "dynamic_pages": (("http://a.example/list", "scroll"), ("re:https?://b\\.example/#/", "call:app.more"),
                      ("http://c.example/", "none")),
    "dynamic_connexions": 4,
    "dynamic_timeout": 3.5,
    "dynamic_other_hosts": True,
    "dynamic_user": "larbin-chromium",
    "dynamic_sandbox": False,
    "membership": "zookeeper",
    "zk_hosts": "zk1.example:2181,[::1]:2182",
    "zk_path": "/crawls/larbin",
    "zk_session_timeout": 2.5,
    "zk_auth": ZkAuth("larbin", "zk-s3cret-password"),
    "redis_url": "unix:///run/redis/redis.sock",
    "redis_replicas": 2,
    "crawl_name": "news-2026",
    "worker_id": "w7",
    "partitions": 64,
    "seen_buckets": 1024,
    "lease_ttl": 2.0,
    "ip_lease_hold": 30.0,
    "redis_flush_interval": 0.1,
    "redis_batch": 50,
    "respawn": False,
    "partition_shares": "equal",
    "analysis_workers": 13,
    "analysis_share": False,
    "analyzers": (("pageinfo", "meta"), ("words", "urls=/doc/", "exec", "wc", "-w", "{input}")),
    "analysis_retries": 5,
    "analysis_timeout": 30.0,
    "analysis_backoff": 0.5,
    "analysis_queue_max": 50,
    "alert_command": ("logger", "-t", "larbin", "{url}"),
    "analysis_dir": "results",
    "sitemaps": True,
    "url_include": ("^https?://([a-z0-9-]+\\.)*example\\.org/", "/docs/"),
    "url_exclude": ("[?&]sid=", "\\.pdf$"),
    "max_pages_by_site": 1000,
    "max_bytes_by_site": 10_000_000,
    "site": (SiteRule("*.example.org", wait_duration=5.0, headers=(("Accept-Language", "fr"),)),
             SiteRule("shop.example.com", max_pages=20, max_bytes=999, user_agent="My Bot/2.0 (+https://x.org/)",
                      cookies=True, dynamic="scroll"),
             SiteRule("*", cookies=False, dynamic="off")),
    "respect_noindex": False,
    "follow_canonical": True,
}


def test_non_default_table_covers_every_key():
    attrs = {f.name for f in dataclasses.fields(Config)} - {"source"}
    assert set(NON_DEFAULTS) == attrs == {key.attr for key in KEYS}
    base = Config(dns_servers=(("127.0.0.1", 53),))
    for attr, value in NON_DEFAULTS.items():
        assert getattr(base, attr) != value, attr


@pytest.mark.parametrize("attr", sorted(NON_DEFAULTS))
def test_each_key_round_trips(attr):
    base = Config(dns_servers=(("127.0.0.1", 53),), specific_set=("text/plain",),
                  redis_url="redis://127.0.0.1:6379/0",  # redisReplicas needs a Redis with replicas
                  tls_ca_file=NON_DEFAULTS["tls_ca_file"])  # tlsCaMode only needs a tlsCaFile
    changed = base.replace(**{attr: NON_DEFAULTS[attr]})
    again = parse(format_config(changed), require_start_urls=False)
    assert again == changed
    assert getattr(again, attr) == NON_DEFAULTS[attr]


def test_all_keys_changed_at_once_round_trip():
    config = Config(**{**NON_DEFAULTS, "http_port": 9090})  # urlInput needs the server
    text = format_config(config)
    assert parse(text) == config
    again = format_config(parse(text))
    assert again.splitlines()[0].endswith("(read from t.conf)")
    assert again.splitlines()[1:] == text.splitlines()[1:]


# ---------------------------------------------------------------- syntax


def test_blocks_over_several_lines_comments_and_switches():
    config = parse(
        "# a whole-line comment\n"
        "forbiddenExtensions .tar   # trailing comment inside a block\n"
        "  .gz\n"
        "\n"
        "  .zip .rpm\n"
        "end   # done\n"
        "limitToDomain .fr .dk end\n"
        "noExternalLinks\n"
        "getCGI        # bare switch, then a comment\n"
        "punycode false\n"
        "waitDuration 0.2 # seconds\n"
        "\tUserAgent   my bot/1.0\t(+http://x.example/)  # spaces collapse\n"
        "startUrl http://a.example/#frag\n"
    )
    assert config.forbidden_extensions == (".tar", ".gz", ".zip", ".rpm")
    assert config.limit_to_domain == (".fr", ".dk")
    assert config.no_external_links and config.get_cgi and not config.punycode
    assert config.wait_duration == 0.2
    assert config.user_agent == "my bot/1.0 (+http://x.example/)"
    assert config.start_urls == ("http://a.example/#frag",)


def test_start_url_repeated_and_multi_valued_in_order():
    config = parse("startUrl http://a.example/ https://b.example/\n"
                   "startUrl HTTP://C.example:81/p\n",
                   extra_start_urls=["http://d.example/"])
    assert config.start_urls == ("http://a.example/", "https://b.example/",
                                 "HTTP://C.example:81/p", "http://d.example/")


def test_blocks_accumulate_and_an_empty_block_clears_the_default():
    config = parse(SEED + "specificSet\n.pdf\nend\nspecificSet text/plain end\n"
                   "forbiddenExtensions\nend\n")
    assert config.specific_set == (".pdf", "text/plain")
    assert config.forbidden_extensions == ()


def test_keys_case_insensitive_and_attribute_names_accepted():
    config = parse(SEED + "useragent bot/1\nWAITDURATION 3\npages_connexions 9\n")
    assert (config.user_agent, config.wait_duration, config.pages_connexions) == ("bot/1", 3.0, 9)


@pytest.mark.parametrize("word,mode", [*enumerate(OUTPUT_MODES), *((m, m) for m in OUTPUT_MODES),
                                       ("MIRROR", "mirror")])
def test_output_mode_names_and_numbers(word, mode):
    assert OUTPUT_MODES.index("none") == 0 and OUTPUT_MODES[2] == "mirror"
    assert parse(SEED + f"outputMode {word}\n").output_mode == mode


def test_switch_values():
    for word, expected in [("", True), ("true", True), ("yes", True), ("on", True), ("1", True),
                           ("false", False), ("No", False), ("off", False), ("0", False)]:
        assert parse(SEED + f"anyType {word}\n").any_type is expected, word


def test_dns_servers_syntax():
    config = parse(SEED + "dnsServers 10.0.0.1 10.0.0.2:5353\ndnsServers [::1]:54 fe80::1 [2001:db8::1]\n")
    assert config.dns_servers == (("10.0.0.1", 53), ("10.0.0.2", 5353), ("::1", 54),
                                  ("fe80::1", 53), ("2001:db8::1", 53))


def test_proxy_and_token():
    config = parse(SEED + "proxy cache.example 3128\nhttpToken abcdefgh\n")
    assert config.proxy == ("cache.example", 3128) and config.http_token == "abcdefgh"
    assert parse(SEED + "proxy none\n").proxy is None


# ---------------------------------------------------------------- resolv.conf


def test_dns_default_comes_from_resolv_conf(tmp_path):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("# comment\n; other comment\nsearch example.org\n"
                      "nameserver 192.0.2.1\nnameserver   2001:db8::53\n"
                      "nameserver not-an-ip\nnameserver 192.0.2.1\nnameserver\noptions ndots:2\n")
    assert read_resolv_conf(resolv) == (("192.0.2.1", 53), ("2001:db8::53", 53))
    assert parse(SEED, resolv_conf=resolv).dns_servers == (("192.0.2.1", 53), ("2001:db8::53", 53))
    # An explicit dnsServers wins over resolv.conf.
    assert parse(SEED + "dnsServers 127.0.0.9\n", resolv_conf=resolv).dns_servers == (("127.0.0.9", 53),)


def test_dns_default_falls_back_to_localhost(tmp_path):
    empty = tmp_path / "resolv.conf"
    empty.write_text("search example.org\n")
    assert read_resolv_conf(empty) == (("127.0.0.1", 53),)
    assert read_resolv_conf(tmp_path / "missing") == (("127.0.0.1", 53),)
    assert parse(SEED, resolv_conf=tmp_path / "missing").dns_servers == (("127.0.0.1", 53),)


# ---------------------------------------------------------------- overrides


def test_set_overrides_replace_file_values_and_seeds_add():
    text = SEED + "waitDuration 5\nforbiddenExtensions .a .b end\n"
    config = parse(text, ("waitDuration", "0.5"), ("forbiddenExtensions", ".c"),
                   ("noExternalLinks", ""), ("startUrl", "http://x.example/ http://y.example/"),
                   extra_start_urls=["http://z.example/"])
    assert config.wait_duration == 0.5
    assert config.forbidden_extensions == (".c",)
    assert config.no_external_links is True
    assert config.start_urls == ("http://x.example/", "http://y.example/", "http://z.example/")
    assert parse(text, ("wait_duration", "1"), ("waitDuration", "3")).wait_duration == 3.0


def test_set_errors_name_the_override():
    assert error(SEED, ("waitDuration", "1"), ("pagesConnexions", "0")) == \
        "--set:2: pagesConnexions: expected an integer in 1..100000, got '0'"
    assert error(SEED, ("waitDuraton", "1")) == "--set:1: waitDuraton: unknown key (did you mean waitDuration?)"
    assert error(SEED, ("outputMode", "html")).startswith("--set:1: outputMode: expected one of none, save")
    assert error(SEED, extra_start_urls=["http://ok.example/", "ftp://x"]) == \
        "--seed:2: startUrl: not an http(s) URL: 'ftp://x'"
    # A list emptied by --set is checked by the Config, and still located.
    assert error(SEED, ("dnsServers", "")) == "--set:1: dnsServers: expected at least one value"
    assert error(SEED, ("startUrl", "")) == \
        "t.conf: startUrl: no start URL (add a 'startUrl URL' line, or pass --seed URL)"


def test_cross_key_error_located_on_the_override():
    assert error(SEED, ("urlInput", "yes"), ("httpBind", "0.0.0.0")).startswith(
        "--set:1: urlInput: httpBind 0.0.0.0 is not a loopback address")


# ---------------------------------------------------------------- errors


def test_unknown_key_suggests_the_closest():
    text = SEED + "\n" * 10 + "waitDuraton 3\n"
    assert error(text) == "t.conf:12: waitDuraton: unknown key (did you mean waitDuration?)"
    assert error(SEED + "frobnicate 1\n") == "t.conf:2: frobnicate: unknown key"
    assert error(SEED + "end\n") == "t.conf:2: end: 'end' without a block to close"


@pytest.mark.parametrize("line,message", [
    ("pagesConnexions abc", "pagesConnexions: expected an integer in 1..100000, got 'abc'"),
    ("pagesConnexions 0", "pagesConnexions: expected an integer in 1..100000, got '0'"),
    ("pagesConnexions 1.5", "pagesConnexions: expected an integer in 1..100000, got '1.5'"),
    ("pagesConnexions", "pagesConnexions: expected one value, got nothing"),
    ("pagesConnexions 1 2", "pagesConnexions: expected one value, got 2 words: '1 2'"),
    ("httpPort 65536", "httpPort: expected an integer in 0..65535, got '65536'"),
    ("inputPort -1", "inputPort: expected an integer in 0..65535, got '-1'"),
    ("filesPerDir 0", "filesPerDir: expected an integer in 1..1000000, got '0'"),
    ("waitDuration -0.1", "waitDuration: expected a number of seconds in [0, 3600], got '-0.1'"),
    ("waitDuration nan", "waitDuration: expected a number of seconds in [0, 3600], got 'nan'"),
    ("timeoutPage 0", "timeoutPage: expected a number of seconds in (0, 3600], got '0'"),
    ("outputMode 5", "outputMode: expected one of none, save, mirror, stats, warc or 0..4, got '5'"),
    ("httpParser llhttp", "httpParser: expected one of httptools, h11, got 'llhttp'"),
    ("httpParser", "httpParser: expected one value, got nothing"),
    ("noExternalLinks maybe", "noExternalLinks: is a switch: expected no value or true/false, got 'maybe'"),
    ("proxy cache.example", "proxy: expected HOST:PORT (the proxy's port is required), got 'cache.example'"),
    ("proxy cache.example 0", "proxy: expected a port in 1..65535, got '0'"),
    ("dnsServers ns.example", "dnsServers: expected an IP address[:port] (IPv6 as [addr]:port), got 'ns.example'"),
    ("dnsServers [::1]x", "dnsServers: expected an IP address or [IPv6]:port, got '[::1]x'"),
    ("dnsServers 10.0.0.1:0", "dnsServers: expected a port in 1..65535, got '10.0.0.1:0'"),
    ("httpToken short", "httpToken: expected at least 8 characters, got 5"),
    ("httpToken two words here", "httpToken: expected one value, got 3 words: '***'"),
    ("From nobody", "From: expected an e-mail address, got 'nobody'"),
    ("startUrl example.com", "startUrl: not an http(s) URL: 'example.com'"),
    ("startUrl http://ok.example/ mailto:x@y", "startUrl: not an http(s) URL: 'mailto:x@y'"),
    ("startUrl http://", "startUrl: not an http(s) URL: 'http://'"),
    ("startUrl   # no URL", "startUrl: expected at least one value, got nothing"),
    ("dnsServers", "dnsServers: expected at least one value, got nothing"),
])
def test_bad_values_name_file_line_and_key(line, message):
    assert error(SEED + "# comment\n" + line + "\n") == f"t.conf:3: {message}"


def test_block_without_end_names_the_line_it_began():
    text = SEED + "forbiddenExtensions\n  .tar .gz\n.zip\n"
    assert error(text) == "t.conf:2: forbiddenExtensions: block begun on this line has no 'end'"
    text = SEED + "limitToDomain .fr\nnoExternalLinks\n"
    assert error(text) == ("t.conf:2: limitToDomain: block begun on this line has no 'end' "
                           "(is line 3 'noExternalLinks' a key? close the block before it)")


def test_text_after_end_is_an_error():
    assert error(SEED + "specificSet\n.pdf\nend .doc\n") == \
        "t.conf:4: specificSet: unexpected text after 'end': '.doc'"


def test_duplicate_scalar_key_is_an_error_naming_both_lines():
    assert error(SEED + "waitDuration 1\n\nwaitduration 2\n") == (
        "t.conf:4: waitDuration: set twice (first on line 2); "
        "only startUrl, dnsServers and the blocks may repeat")


def test_no_start_url():
    assert error("waitDuration 1\n") == \
        "t.conf: startUrl: no start URL (add a 'startUrl URL' line, or pass --seed URL)"
    assert parse("waitDuration 1\n", require_start_urls=False).start_urls == ()


@pytest.mark.parametrize("text,message", [
    ("urlInput\nhttpBind 0.0.0.0\n",
     "t.conf:2: urlInput: httpBind 0.0.0.0 is not a loopback address, so an httpToken is required"),
    ("urlInput\nhttpPort 0\n", "t.conf:2: urlInput: needs the stats server: httpPort is 0 (off)"),
    ("specificSearch\n", "t.conf:2: specificSearch: needs a specificSet block (the types or extensions to keep)"),
    ("inputPort 8081\n", "t.conf:2: inputPort: same port as httpPort (8081)"),
    ("saveDir x\nstateDir ./x/\n", "t.conf:3: stateDir: must differ from saveDir ('x')"),
])
def test_inconsistent_keys(text, message):
    assert error(SEED + text) == message


def test_url_input_allowed_on_loopback_or_with_a_token():
    assert parse(SEED + "urlInput\n").url_input
    assert parse(SEED + "urlInput\nhttpBind localhost\n").url_input
    assert parse(SEED + "urlInput\nhttpBind 0.0.0.0\nhttpToken 0123456789abcdef\n").url_input


def test_missing_unreadable_and_non_utf8_files(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.conf")
    assert str(info.value) == f"{tmp_path / 'nope.conf'}: cannot read: No such file or directory"
    with pytest.raises(ConfigError, match=r": cannot read: Is a directory$"):
        load_config(tmp_path)
    bad = tmp_path / "bad.conf"
    bad.write_bytes(b"startUrl http://a.example/\nFrom \xff@x\n")
    with pytest.raises(ConfigError, match=r"bad\.conf:2: cannot read: not UTF-8 text"):
        load_config(bad)


def test_load_config_reads_a_file_with_overrides(tmp_path):
    path = tmp_path / "larbin.conf"
    path.write_bytes(b"\xef\xbb\xbf" + (SEED + "waitDuration 4\r\n").encode())  # BOM, CRLF
    config = load_config(path, [("waitDuration", "0")], resolv_conf=tmp_path / "none")
    assert config.wait_duration == 0.0 and config.source == str(path)
    assert config.dns_servers == (("127.0.0.1", 53),)


# ---------------------------------------------------------------- the dataclass


def test_config_is_frozen_and_replace_validates():
    config = Config(dns_servers=(("127.0.0.1", 53),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.wait_duration = 1.0  # type: ignore[misc]
    with pytest.raises(ConfigError) as info:
        config.replace(pages_connexions=0)
    assert str(info.value) == "pagesConnexions: expected an integer in 1..100000, got 0"
    with pytest.raises(ConfigError, match="waitDuration"):
        config.replace(wait_duration="1")
    with pytest.raises(ConfigError, match="specificSearch"):
        config.replace(specific_search=True)
    with pytest.raises(ConfigError, match="startUrl: not an http"):
        config.replace(start_urls=("gopher://x/",))


def test_config_coerces_lists_and_ints():
    config = Config(start_urls=["http://a.example/"], wait_duration=1,
                    dns_servers=[["127.0.0.1", 53]], proxy=["p.example", 8080])
    assert config.start_urls == ("http://a.example/",) and isinstance(config.start_urls, tuple)
    assert type(config.wait_duration) is float and config.wait_duration == 1.0
    assert config.dns_servers == (("127.0.0.1", 53),)
    assert config.proxy == ("p.example", 8080)
    assert hash(config.replace(forbidden_extensions=[".x"]).forbidden_extensions) is not None


def test_flow_control_keys_are_checked_with_their_line():
    with pytest.raises(ConfigError) as err:
        parse_config_text("startUrl http://a.test/\nrttAlpha 1.5\n", "f.conf")
    assert "f.conf:2: rttAlpha" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config_text("startUrl http://a.test/\nrttMin 3\nrttMax 2\n")
    assert "rttMin" in str(err.value)
    config = parse_config_text("startUrl http://a.test/\nflowControl false\nrttAlpha 1\n")
    assert config.flow_control is False and config.rtt_alpha == 1.0


def test_prune_after_and_keep_sites_default_to_the_frontiers_own():
    from larbin_py.frontier.pruning import KEEP_SITES, PRUNE_AFTER

    config = parse_config_text("startUrl http://a.test/\n")
    assert (config.prune_after, config.keep_sites) == (PRUNE_AFTER, KEEP_SITES)
    config = parse_config_text("startUrl http://a.test/\npruneAfter 0.5\nkeepSites 0\n")
    assert (config.prune_after, config.keep_sites) == (0.5, 0)


def test_wait_jitter_is_a_fraction_from_zero_to_one():
    assert parse_config_text("startUrl http://a.test/\n").wait_jitter == 0.05
    assert parse_config_text("startUrl http://a.test/\nwaitJitter 0\n").wait_jitter == 0.0
    with pytest.raises(ConfigError) as err:
        parse_config_text("startUrl http://a.test/\nwaitJitter 1.5\n", "f.conf")
    assert "f.conf:2: waitJitter" in str(err.value) and "[0, 1]" in str(err.value)
    with pytest.raises(ConfigError):
        parse_config_text("startUrl http://a.test/\nwaitJitter -0.1\n")


# ---------------------------------------------------------------- ranges (issue 18 §5)

#: Every numeric key, with values outside its range, nan and inf included.
BAD_NUMBERS = [
    ("dnsTimeout", "3000000"), ("dnsTimeout", "1e308"), ("dnsTimeout", "0"), ("dnsTimeout", "inf"),
    ("dnsRetryDelay", "0"), ("dnsRetryDelay", "3601"), ("dnsRetryDelay", "nan"),
    ("robotsRetryDelay", "0"), ("robotsRetryDelay", "3601"),
    ("waitDuration", "1e308"), ("waitDuration", "3601"), ("waitDuration", "-inf"), ("waitDuration", "nan"),
    ("dnsValidTime", "1e12"), ("dnsValidTime", "-1"), ("connectTimeout", "601"), ("connectTimeout", "0"),
    ("timeoutPage", "1e9"), ("timeoutPage", "NaN"), ("limitTime", "1e308"), ("limitTime", "31536001"),
    ("checkpointInterval", "0"), ("checkpointInterval", "1e300"), ("rttInterval", "1e6"),
    ("rttMin", "601"), ("rttMax", "0"), ("rttMax", "inf"), ("serverRttFactor", "101"),
    ("rttAlpha", "1.5"), ("waitJitter", "nan"), ("ipv6Prefix", "129"), ("ipv6Prefix", "31"),
    ("happyEyeballsDelay", "0"), ("happyEyeballsDelay", "6"),
    ("httpPort", "65536"), ("inputPort", "-1"), ("filesPerDir", "0"), ("filesPerDir", "1000001"),
    ("pagesConnexions", "0"), ("pagesConnexions", "100001"), ("dnsConnexions", "10001"),
    ("connexionsPerIP", "100001"), ("minConnexions", "0"), ("minConnexions", "100001"),
    ("connIncrease", "100001"), ("connDecrease", "-1"), ("timeoutIncr", "1000000001"),
    ("retries", "21"), ("retries", "99999999999999999999"), ("maxPageSize", "1000000001"),
    ("maxUrlSize", "15"), ("maxUrlSize", "65537"), ("maxUrlsBySite", "1000001"),
    ("ramUrls", "100000001"), ("pruneAfter", "0"), ("pruneAfter", "86401"), ("pruneAfter", "nan"),
    ("keepSites", "-1"), ("keepSites", "100000001"), ("bondWidth", "1000000000001"), ("limitPage", "1000000000001"),
    ("depthInSite", "10001"), ("depthInSite", "1" * 5000),
    ("maxRedirects", "-1"), ("maxRedirects", "101"),
    ("dynamicConnexions", "0"), ("dynamicConnexions", "65"), ("dynamicTimeout", "0"), ("dynamicTimeout", "601"),
    ("zkSessionTimeout", "0"), ("zkSessionTimeout", "601"),
    ("partitions", "0"), ("partitions", "65537"), ("seenBuckets", "0"), ("leaseTtl", "0.1"),
    ("leaseTtl", "inf"), ("ipLeaseHold", "3601"), ("redisFlushInterval", "0"), ("redisBatch", "0"),
    ("redisReplicas", "17"), ("redisReplicas", "-1"),
    ("analysisWorkers", "257"), ("analysisWorkers", "-1"), ("analysisRetries", "101"), ("analysisTimeout", "0"),
    ("analysisBackoff", "3601"), ("analysisQueueMax", "0"),
    ("crawlLogMaxBytes", "-1"), ("crawlLogMaxBytes", "1125899906842625"),
    ("revisitAfter", "-1"), ("revisitAfter", "315360001"), ("revisitAfter", "nan"),
    ("maxPagesBySite", "-1"), ("maxPagesBySite", "1000000000001"), ("maxBytesBySite", "-1"),
    ("maxBytesBySite", str((1 << 60) + 1)),
]


def numeric_keys():
    return [key for key in KEYS if hasattr(key, "high")]


def test_the_bad_number_table_covers_every_numeric_key():
    assert {key.name for key in numeric_keys()} <= {name for name, _ in BAD_NUMBERS}


@pytest.mark.parametrize("name,value", BAD_NUMBERS)
def test_a_number_outside_its_range_names_file_line_key_and_range(name, value):
    key = next(key for key in KEYS if key.name == name)
    assert error(SEED + f"# comment\n{name} {value}\n") == \
        f"t.conf:3: {name}: expected {key.expected}, got {value!r}"
    assert error(SEED, (name, value)) == f"--set:1: {name}: expected {key.expected}, got {value!r}"
    assert re.search(r"in [\[(]?-?\d+(\.\d+)?(\.\.|, )\d+(\.\d+)?\]?$", key.expected), key.expected


def test_every_number_has_a_finite_range_holding_its_default_and_ends():
    config = Config(dns_servers=(("127.0.0.1", 53),))
    shipped = load_config(SHIPPED, require_start_urls=False, resolv_conf="/nonexistent")
    for key in numeric_keys():
        assert math.isfinite(key.high) and key.low <= key.high, key.name
        for value in (getattr(config, key.attr), getattr(shipped, key.attr)):
            if value is not None:  # redisReplicas auto
                assert key.low <= value <= key.high, key.name
        assert parse(SEED, ("rttMax", "600"), ("redisUrl", "redis://h"), (key.name, str(key.high))) is not None
        if not getattr(key, "above", False):
            assert parse(SEED, (key.name, str(key.low))) is not None
    # Config built in code is held to the same ranges
    with pytest.raises(ConfigError, match=r"dnsTimeout: expected a number of seconds in \(0, 600\]"):
        config.replace(dns_timeout=3_000_000)
    with pytest.raises(ConfigError, match="waitDuration"):
        config.replace(wait_duration=10 ** 400)


def test_every_range_is_documented_next_to_its_key():
    paragraphs = SHIPPED.read_text().split("\n\n")
    for key in numeric_keys():
        [paragraph] = [p for p in paragraphs if re.search(rf"^#?{key.name}\b", p, re.M)]
        paragraph = re.sub(r"\s*\n#\s*", " ", paragraph)
        written = key.expected.split(" in ", 1)[1]
        assert f"Range {written}" in paragraph or f"{key.name} {written}" in paragraph, (key.name, written)


@pytest.mark.async_timeout(60)
async def test_a_crawl_starts_and_ends_with_every_number_at_its_maximum(tmp_path):
    from larbin_py.engine import Engine

    values = {key.attr: key.high for key in numeric_keys()
              if key.attr not in ("http_port", "input_port", "redis_replicas")}  # replicas need a redisUrl
    config = Config(dns_servers=(("127.0.0.1", 9),), save_dir=str(tmp_path / "save"),
                    state_dir=str(tmp_path / "state"), http_port=0, output_mode="stats", **values)
    summary = await Engine(config).run()
    assert summary.failed is None and summary.stop_reason == "end of work"


# ---------------------------------------------------------------- servers beyond loopback, nested folders


@pytest.mark.parametrize("text,message", [
    ("inputPort 1976\nhttpPort 0\nhttpBind 0.0.0.0\n",
     "t.conf:2: inputPort: httpBind 0.0.0.0 is not a loopback address, so the input port needs an "
     "httpToken (or inputPort 0)"),
    ("httpBind 192.0.2.7\n",
     "t.conf:2: httpBind: 192.0.2.7 is not a loopback address, so the stats server (httpPort 8081) "
     "needs an httpToken (or httpPort 0)"),
    ("httpBind ::\nhttpPort 9000\n",
     "t.conf:2: httpBind: :: is not a loopback address, so the stats server (httpPort 9000) "
     "needs an httpToken (or httpPort 0)"),
])
def test_a_server_beyond_loopback_needs_a_token(text, message):
    assert error(SEED + text) == message


def test_servers_beyond_loopback_with_a_token_or_off_are_accepted():
    token = "httpToken 0123456789abcdef\n"
    assert parse(SEED + "httpBind 0.0.0.0\ninputPort 1976\n" + token).input_port == 1976
    assert parse(SEED + "httpBind 0.0.0.0\nhttpPort 0\n").http_port == 0
    for bind in ("127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"):
        assert parse(SEED + f"httpBind {bind}\ninputPort 1976\n").input_port == 1976


@pytest.mark.parametrize("save,state,key,inside", [
    ("x", "x/state", "stateDir", "is inside saveDir"),
    ("x/", "./x/y/../state", "stateDir", "is inside saveDir"),
    ("x/save", "x", "saveDir", "is inside stateDir"),
])
def test_nested_save_and_state_dirs_are_refused(tmp_path, save, state, key, inside):
    message = error(SEED + f"saveDir {tmp_path / save}\nstateDir {tmp_path / state}\n")
    line = 2 if key == "saveDir" else 3
    assert message.startswith(f"t.conf:{line}: {key}: ") and inside in message
    assert "saveDir" in message and "stateDir" in message


def test_nesting_is_judged_on_real_paths(tmp_path):
    (tmp_path / "save").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "save")
    message = error(SEED + f"saveDir {tmp_path / 'link'}\nstateDir {tmp_path / 'save' / 'state'}\n")
    assert message.startswith("t.conf:3: stateDir: ") and "is inside saveDir" in message
    assert error(SEED + f"saveDir {tmp_path / 'link'}\nstateDir {tmp_path / 'save'}\n") == \
        f"t.conf:3: stateDir: must differ from saveDir ({str(tmp_path / 'link')!r})"
    # siblings sharing a prefix are apart
    assert parse(SEED + f"saveDir {tmp_path / 'save'}\nstateDir {tmp_path / 'save2'}\n")


# ---------------------------------------------------------------- membership (issue 21)


@pytest.mark.parametrize("line,message", [
    ("membership etcd", "membership: expected one of redis, zookeeper, got 'etcd'"),
    ("zkHosts zk1", "zkHosts: expected host:port[,host:port...] (port 1..65535), got 'zk1' in 'zk1'"),
    ("zkHosts zk1:2181,zk2:0", "zkHosts: expected host:port[,host:port...] (port 1..65535), "
                               "got 'zk2:0' in 'zk1:2181,zk2:0'"),
    ("zkHosts zk1:2181/chroot", "zkHosts: expected host:port[,host:port...] (port 1..65535), "
                                "got 'zk1:2181/chroot' in 'zk1:2181/chroot'"),
    ("zkHosts zk1:2181, zk2:2181", "zkHosts: expected one value, got 2 words: 'zk1:2181, zk2:2181'"),
    ("zkPath larbin", "zkPath: expected an absolute znode path such as /larbin_py, got 'larbin'"),
    ("zkPath /larbin/", "zkPath: expected /a/b (no empty, '.', '..' or 'zookeeper' part, no trailing /), "
                        "got '/larbin/'"),
    ("zkPath /zookeeper", "zkPath: expected /a/b (no empty, '.', '..' or 'zookeeper' part, "
                          "no trailing /), got '/zookeeper'"),
])
def test_a_bad_membership_key_names_file_line_and_key(line, message):
    assert error(SEED + f"# comment\n{line}\n") == f"t.conf:3: {message}"


def test_the_membership_keys_read_and_print():
    config = parse(SEED + "membership ZooKeeper\nzkHosts a:1,b:2\nzkPath /x/y\nzkSessionTimeout 3\n")
    assert (config.membership, config.zk_hosts, config.zk_path, config.zk_session_timeout) == \
        ("zookeeper", "a:1,b:2", "/x/y", 3.0)
    lines = format_config(config).splitlines()
    for line in ("membership zookeeper", "zkHosts a:1,b:2", "zkPath /x/y", "zkSessionTimeout 3"):
        assert line in lines
    default = parse(SEED)
    assert (default.membership, default.zk_hosts, default.zk_path, default.zk_session_timeout) == \
        ("redis", "127.0.0.1:2181", "/larbin_py", 6.0)


def test_print_config_shows_zk_auth_and_the_token_without_their_secrets():
    config = parse(SEED + "membership zookeeper\nzkAuth digest larbin:zk-s3cret-password\nhttpToken s3cret-token\n")
    shown = format_config(config, redact=True)  # --print-config
    assert "zkAuth digest larbin:***" in shown.splitlines() and "httpToken ***" in shown.splitlines()
    assert "s3cret" not in shown
    # the text for the launcher's workers keeps them
    assert "zkAuth digest larbin:zk-s3cret-password" in format_config(config).splitlines()


# ---------------------------------------------------------------- redisUrl and redisReplicas (high availability)


@pytest.mark.parametrize("url", [
    "auto", "redis://127.0.0.1:6379/0", "rediss://alice:pw@redis.example", "unix:///run/redis/redis.sock",
    "unix://:pw@/run/redis/redis.sock?db=2", "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/larbin",
    "redis+sentinel://:s%40cret@s1.example,[::1]:26380/larbin/3?sentinelPassword=other",
])
def test_redis_url_takes_the_plain_and_the_sentinel_forms(url):
    config = parse(SEED + f"redisUrl {url}\n")
    assert config.redis_url == url
    assert parse(format_config(config)) == config


@pytest.mark.parametrize("url,why", [
    ("redis+sentinel://:hunter2@s1:26379,s2:99999/larbin", "got 's2:99999'"),
    ("redis+sentinel://:hunter2@s1:26379/", "no master name"),
    ("redis+sentinel://:hunter2@s1:26379/bad!name", "master name of letters"),
    ("redis+sentinel://:hunter2@s1/larbin?sentinelPassword=hunter3&tls=1", "unknown parameter 'tls'"),
    ("redis://:hunter2@:6379/0", "no host"),
    ("redis://:hunter2@h:0/0", "expected a port in 1..65535"),
    ("redis://:hun/ter2@h/0", "write '@' as %40, '/' as %2F"),
    ("http://:hunter2@h/", "expected redis://, rediss://, unix:// or redis+sentinel://"),
    ("unix://:hunter2@h/run/redis.sock", "expected unix:///path"),
])
def test_a_bad_redis_url_is_named_without_its_passwords(url, why):
    message = error(SEED + f"# comment\nredisUrl {url}\n")
    assert message.startswith("t.conf:3: redisUrl: expected auto, redis://host:port/db"), message
    assert why in message, message
    assert "hunter" not in message and "***" in message
    assert "hunter" not in error(SEED, ("redisUrl", url))
    with pytest.raises(ConfigError) as exc:
        Config(redis_url=url, dns_servers=(("127.0.0.1", 53),))
    assert "hunter" not in str(exc.value)


def test_a_redis_url_split_by_a_space_in_its_password_is_not_echoed():
    message = error(SEED + "redisUrl redis+sentinel://:hunter 2@s1/larbin\n")
    assert message == ("t.conf:2: redisUrl: expected one URL (spaces in a password are written %20), "
                       "got 2 words: 'redis+sentinel://:***@s1/larbin'")
    with pytest.raises(ConfigError) as exc:
        Config(redis_url="redis://:hunter\x012@h/0", dns_servers=(("127.0.0.1", 53),))
    assert "hunter" not in str(exc.value) and "control characters" in str(exc.value)


def test_redis_replicas_auto_is_one_with_sentinels_and_zero_otherwise():
    from larbin_py.config import replicas_for

    sentinel = "redis+sentinel://s1:26379/larbin"
    assert parse(SEED).redis_replicas is None
    assert replicas_for(parse(SEED)) == 0
    assert replicas_for(parse(SEED + f"redisUrl {sentinel}\n")) == 1
    assert replicas_for(parse(SEED + "redisUrl REDIS+SENTINEL://s1/larbin\n")) == 1
    assert replicas_for(parse(SEED + "redisUrl redis://h:6379/0\n")) == 0
    assert replicas_for(parse(SEED + "redisUrl auto\n")) == 0
    assert replicas_for(parse(SEED + f"redisUrl {sentinel}\nredisReplicas 0\n")) == 0
    assert replicas_for(parse(SEED + "redisUrl redis://h:6379/0\nredisReplicas 2\n")) == 2
    config = parse(SEED + f"redisUrl {sentinel}\nredisReplicas AUTO\n")
    assert config.redis_replicas is None and "redisReplicas auto" in format_config(config).splitlines()


@pytest.mark.parametrize("url,why", [("", "redisUrl is not set"),
                                     ("redisUrl auto\n", "redisUrl auto starts one redis-server without any")])
def test_redis_replicas_needs_a_redis_that_has_replicas(url, why):
    assert error(SEED + url + "redisReplicas 1\n") == \
        (f"t.conf:{3 if url else 2}: redisReplicas: 1 needs a Redis with replicas (redisUrl redis://... "
         f"or redis+sentinel://...), but {why}")
    assert parse(SEED + url + "redisReplicas 0\n").redis_replicas == 0


# ---------------------------------------------------------------- the schema: one declaration per key


def test_docs_configuration_md_is_what_the_schema_generates():
    from larbin_py.config.reference import COMMAND, markdown

    page = ROOT / "docs" / "configuration.md"
    assert page.exists() and page.read_text() == markdown(), f"docs/configuration.md is stale: run {COMMAND}"


def test_the_reference_page_has_a_row_per_key_with_default_range_and_description():
    from larbin_py.config.reference import markdown

    text = markdown()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [key.name for key in KEYS]
    assert "| `waitDuration` | `wait_duration` | `2` | seconds [0, 3600] | seconds between two requests" in text
    assert "| `pagesConnexions` | `pages_connexions` | `100` | integer 1..100000 | " in text
    assert "| `redisReplicas` | `redis_replicas` | `auto` | auto, or integer 0..16 | " in text
    assert "| `useCookies` | `use_cookies` | `off` | switch | " in text
    assert "| `startUrl` | `start_urls` | `none` | http(s) URLs; repeatable | " in text
    # a machine's value never: the page is the same on every machine and release
    assert "| `dnsServers` | `dns_servers` | the nameserver lines of /etc/resolv.conf" in text
    assert "| `analysisWorkers` | `analysis_workers` | the cores less one, at least 1 | " in text
    assert DEFAULT_USER_AGENT not in text and "larbin\\_py/VERSION" in text
    # Markdown-safe cells, and a long default below the table, linked
    assert "shown as \\*\\*\\* |" in text and "'\\_'" in text
    assert "[55 words, listed below](#default-forbiddenextensions)" in text
    assert f"### Default forbiddenExtensions\n\n`{' '.join(DEFAULT_FORBIDDEN_EXTENSIONS)}`\n" in text


def test_the_generator_runs_as_a_module_and_refuses_anything_else():
    import subprocess
    import sys

    from larbin_py.config.reference import markdown

    run = [sys.executable, "-m", "larbin_py.config"]
    proc = subprocess.run([*run, "--markdown"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == markdown() and proc.stderr == ""
    proc = subprocess.run([*run, "--markdwon"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "python -m larbin_py.config: expected --markdown, got '--markdwon' "
        "(usage: python -m larbin_py.config --markdown > docs/configuration.md)"]


def test_shipped_conf_shows_every_key_on_a_line_of_its_own():
    """Each key begins a line, as a setting or its commented-out example (not only named in prose)."""
    text = SHIPPED.read_text()
    missing = [key.name for key in KEYS if not re.search(rf"^#?{key.name}(\s|$)", text, re.M)]
    assert missing == []


def test_every_key_is_declared_on_its_field_with_a_short_description():
    fields = {f.name: f for f in dataclasses.fields(Config)}
    for key in KEYS:
        assert fields[key.attr].metadata["key"] is key
        assert key.doc and "\n" not in key.doc and len(key.doc) <= 140, key.name


def test_a_field_declared_without_its_key_is_refused():
    from larbin_py.config.keys import Int, Seconds
    from larbin_py.config.schema import _bind, setting

    @dataclasses.dataclass
    class Good:
        depth: int = setting(Int("depth", 0, 9), 1, doc="how deep")
        source: str | None = None

    [key] = _bind(Good)
    assert (key.name, key.attr, key.doc, Good().depth) == ("depth", "depth", "how deep", 1)

    @dataclasses.dataclass
    class Bare:
        depth: int = 1

    with pytest.raises(TypeError, match=r"Config\.depth is declared without its key"):
        _bind(Bare)

    @dataclasses.dataclass
    class Twice:
        wait: float = setting(Seconds("wait", 0, 9), 1.0, doc="a wait")
        other: float = setting(Seconds("WAIT", 0, 9), 1.0, doc="the same key")

    with pytest.raises(TypeError, match="two keys differ only by case: WAIT, wait"):
        _bind(Twice)

    @dataclasses.dataclass
    class Machine:
        cores: int = setting(Int("cores", 1, 9), factory=lambda: 4, doc="cores", default_text=None)  # type: ignore

    with pytest.raises(TypeError, match="cores: a default made by a factory needs its default_text"):
        _bind(Machine)
