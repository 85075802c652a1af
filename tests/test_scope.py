"""urlInclude / urlExclude (larbin_py.scope): the patterns, their errors, linear time, the rules."""

from __future__ import annotations

import re
import time

import pytest

from larbin_py.config import ConfigError, parse_config_text
from larbin_py.rules import UrlRules
from larbin_py.scope import UrlPatterns, check_pattern

SEED = "startUrl http://a.example/\n"


def test_include_and_exclude_decide_in_that_order():
    p = UrlPatterns(include=[r"^https?://([a-z0-9-]+\.)*example\.org/", r"/docs/"],
                    exclude=[r"[?&]sid=", r"\.pdf$"])
    assert p.check("http://example.org/") is None
    assert p.check("https://www.example.org/a.html") is None
    assert p.check("http://other.net/docs/x") is None  # the second include
    assert p.check("http://other.net/x") == "notIncluded"
    assert p.check("http://example.org/a?sid=1") == "excluded"
    assert p.check("http://example.org/a.pdf") == "excluded"
    assert p.check("http://example.org.evil.net/") == "notIncluded"  # the host's dots are escaped
    assert UrlPatterns(exclude=["/x"]).check("http://a/") is None  # no include: every URL included
    assert not UrlPatterns() and UrlPatterns(exclude=["x"])


def test_patterns_are_searched_not_matched():
    p = UrlPatterns(include=["docs"])
    assert p.check("http://a/x/docs/y") is None
    assert UrlPatterns(include=["^docs"]).check("http://a/docs") == "notIncluded"


def test_pythons_re_backtracks_on_the_pattern_re2_answers_at_once():
    """The reason for RE2: Python's re takes exponential time on (a+)+$ (20 characters: about
    a million steps), RE2 linear time on 100 KB."""
    t0 = time.perf_counter()
    assert re.search(r"(a+)+$", "a" * 20 + "!") is None
    backtracking = time.perf_counter() - t0
    patterns = UrlPatterns(include=[r"(a+)+$"])
    t0 = time.perf_counter()
    assert patterns.check("http://a.example/" + "a" * 100_000 + "!") == "notIncluded"
    linear = time.perf_counter() - t0
    assert linear * 20 < backtracking, (linear, backtracking)


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)+$", r"(a|a?)+b", r"(x+x+)+y", r"^(([a-z])+.)+[A-Z]([a-z])+$"])
def test_a_catastrophic_pattern_on_a_100_kb_url_takes_milliseconds(pattern):
    url = "http://a.example/" + "a" * 50_000 + "x" * 50_000 + "!"
    patterns = UrlPatterns(include=[pattern], exclude=[pattern])
    t0 = time.perf_counter()
    for _ in range(10):
        assert patterns.check(url) == "notIncluded"
    assert (time.perf_counter() - t0) / 10 < 0.05, pattern


def test_many_patterns_cost_one_search_per_block():
    include = [f"/section{i}/" for i in range(500)]
    p = UrlPatterns(include=include)
    url = "http://a.example/" + "b" * 100_000
    t0 = time.perf_counter()
    assert p.check(url) == "notIncluded"
    assert time.perf_counter() - t0 < 0.1


@pytest.mark.parametrize("pattern,message", [
    ("(a", "missing )"), (r"(a)\1", r"invalid escape sequence: \1"), ("(?!x)y", "invalid perl operator"),
    ("(?<=a)b", "invalid perl operator"), ("a{2,1}", "invalid repetition size"), ("*a", "no argument for repetition operator"),
    ("x" * 5000, "at most 4096 characters"), ("a\tb", "no white space"),
])
def test_a_bad_pattern_says_what_is_wrong(pattern, message):
    with pytest.raises(ValueError) as exc:
        check_pattern(pattern)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_pattern_too_big_for_re2_is_refused_not_built():
    with pytest.raises(ValueError, match="bad regular expression"):
        check_pattern("((a{100}){100}){100}")


@pytest.mark.parametrize("block,line,message", [
    ("urlInclude\n  ^http://ok/\n  (unclosed\nend\n", 4, "urlInclude: bad regular expression '(unclosed': missing )"),
    ("urlExclude\n  ok\n\n  (a)\\1\nend\n", 5, "urlExclude: bad regular expression"),
    ("urlInclude\n  two words\nend\n", 3, "urlInclude: expected one regular expression a line"),
    ("urlExclude (?=x) end\n", 2, "urlExclude: bad regular expression '(?=x)': invalid perl operator"),
])
def test_a_bad_pattern_in_larbin_conf_names_its_line(block, line, message):
    with pytest.raises(ConfigError) as exc:
        parse_config_text(SEED + block, "t.conf")
    assert str(exc.value).startswith(f"t.conf:{line}: {message}"), str(exc.value)


def test_config_blocks_reach_the_rules_and_refusals_are_counted():
    config = parse_config_text(SEED + "getCGI\nurlInclude\n  ^http://a\\.example/\nend\n"
                               "urlExclude\n  /private/\n  [?&]sid=\nend\n", "t.conf")
    rules = UrlRules.from_config(config)
    links = ["http://a.example/x", "http://b.example/", "http://a.example/private/y",
             "http://a.example/q?sid=3", "http://a.example/z"]
    ok, depths, refused = rules.admit_many(links, "http://a.example/", 3)
    assert ok == ["http://a.example/x", "http://a.example/z"]
    assert refused == {"notIncluded": 1, "excluded": 2}
    assert rules.admit("http://b.example/", None, 0) == "notIncluded"  # start URLs too
    assert rules.admit("http://a.example/", None, 0) == config.depth_in_site
    # without patterns, admit_many takes its fast path and refuses nothing
    assert UrlRules.from_config(parse_config_text(SEED, "t.conf")).patterns is None
