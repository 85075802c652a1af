"""The outcome table of a page request (larbin_py.outcomes): every row, no sockets."""

from __future__ import annotations

import pytest

from larbin_py import outcomes
from larbin_py.outcomes import (FORGET, MAX_RETRY_AFTER, REDIRECT, RETRY, RETRY_FREE, RULES, SUCCESS,
                                Action, content_policy, decide, redirect_target, status_class)


@pytest.mark.parametrize("status, action", [
    (200, Action(SUCCESS)), (204, Action(SUCCESS)), (299, Action(SUCCESS)),
    (301, Action(REDIRECT, "err30X")), (302, Action(REDIRECT, "err30X")), (399, Action(REDIRECT, "err30X")),
    (404, Action(FORGET, "err40X")), (410, Action(FORGET, "err40X")), (403, Action(FORGET, "err40X")),
    (501, Action(FORGET, "err50X")), (505, Action(FORGET, "err50X")), (599, Action(FORGET, "err50X")),
    (100, Action(FORGET, "err40X")), (600, Action(FORGET, "err50X")),
])
def test_answers_that_are_not_retried(status, action):
    assert decide(None, status) == action


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_a_busy_server_is_retried_after_its_retry_after_capped(status):
    assert decide(None, status, retry_after=7.5) == Action(RETRY, "err50X", 7.5)
    assert decide(None, status, retry_after=10_000.0) == Action(RETRY, "err50X", MAX_RETRY_AFTER)
    assert decide(None, status, retry_after=0.0) == Action(RETRY, "err50X", 0.0)


def test_without_retry_after_the_backoff_doubles_per_retry_spent():
    delays = [decide(None, 503, retries=3, retries_left=left, wait_duration=2.0).delay for left in (3, 2, 1, 0)]
    assert delays == [2.0, 4.0, 8.0, 16.0]
    # a short waitDuration still waits at least a second
    assert decide(None, 500, retries=2, retries_left=2, wait_duration=0.1).delay == 1.0


@pytest.mark.parametrize("error", ["noConnection", "timeout", "reset"])
def test_transport_errors_are_retried_under_their_name(error):
    assert decide(error, None) == Action(RETRY, error)
    # an answer that arrived before the error does not change the rule
    assert decide(error, 200, bytes_read=100) == Action(RETRY, error)


def test_a_stale_kept_alive_connection_is_retried_for_free():
    assert decide("reset", None, conn_reused=True, bytes_read=0) == Action(RETRY_FREE, "staleConnection")
    # bytes of the answer came: the server got the request, it costs a retry
    assert decide("reset", None, conn_reused=True, bytes_read=1) == Action(RETRY, "reset")
    # a fresh connection reset: an ordinary retry
    assert decide("reset", None, conn_reused=False, bytes_read=0) == Action(RETRY, "reset")
    # only a reset is stale: a timeout on a reused connection is a timeout
    assert decide("timeout", None, conn_reused=True) == Action(RETRY, "timeout")


def test_a_request_not_sent_on_its_new_connection_is_retried_for_free():
    """A worker whose IP lease lapsed while it connected writes nothing (larbin_py.net.http's
    may_send): the server got nothing, so no retry is spent."""
    assert decide("notSent", None) == Action(RETRY_FREE, "notSent")


@pytest.mark.parametrize("error", ["tooBig", "badHeader", "noDNS", "privateAddress", "whatever"])
def test_other_errors_are_forgotten_under_their_name(error):
    assert decide(error, 200) == Action(FORGET, error)
    assert decide(error, None) == Action(FORGET, error)


def test_every_row_of_the_table_is_reached():
    reached = set()
    for status in range(100, 700):
        reached.add(("answer", status_class(status)))
    reached |= {(kind, None) for kind in ("stale", "notSent", "noConnection", "timeout", "reset", "proxyError",
                                          "authRetry", "tlsError", "authRequired")}
    assert reached == set(RULES)


def test_network_failures_keep_their_own_reasons():
    """A proxy's failure is retried like a connection's; a refused certificate and a 401 without
    credentials are forgotten under their names; a digest challenge is asked again for free."""
    assert decide("proxyError", None) == Action(RETRY, "proxyError")
    assert decide("proxyError", 407) == Action(RETRY, "proxyError")  # the proxy's 407, never the site's 4xx
    assert decide("tlsError", None) == Action(FORGET, "tlsError")
    assert decide("authRequired", 401) == Action(FORGET, "authRequired")
    assert decide("authRetry", 401) == Action(RETRY_FREE, "authRetry")


def test_content_policy():
    html = content_policy("text/html")
    assert html.wanted and html.save and html.is_html
    assert not content_policy("application/pdf").wanted
    assert not content_policy(None).wanted
    assert content_policy("application/pdf", any_type=True).wanted
    assert content_policy("image/png", get_image=True).wanted
    assert not content_policy("application/pdf", get_image=True).wanted
    pdf = content_policy("application/pdf", specific_search=True, specific_set=frozenset({"application/pdf"}))
    assert pdf.wanted and pdf.save and not pdf.is_html
    page = content_policy("text/html", specific_search=True, specific_set=frozenset({"application/pdf"}))
    assert page.wanted and not page.save and page.is_html


def test_redirect_target():
    kw = dict(max_redirects=5, max_url_size=512)
    assert redirect_target("/b", "http://a.test/x", 0, **kw) == ("http://a.test/b", None)
    assert redirect_target("/b", "http://a.test/x", 4, **kw) == ("http://a.test/b", None)
    assert redirect_target("/b", "http://a.test/x", 5, **kw) == (None, "tooManyRedirects")
    assert redirect_target(None, "http://a.test/x", 0, **kw) == (None, None)
    assert redirect_target("", "http://a.test/x", 0, **kw) == (None, None)
    assert redirect_target("mailto:x@a.test", "http://a.test/x", 0, **kw) == (None, None)
    assert redirect_target("/" + "b" * 600, "http://a.test/x", 0, **kw) == (None, None)


def test_the_page_handler_applies_the_table():
    """The page handler reads the rules from this module, not its own copy."""
    import larbin_py.engine as engine
    import larbin_py.pages as pages

    assert pages.outcomes is outcomes
    assert not hasattr(pages, "RETRY_STATUSES") and not hasattr(engine, "RETRY_STATUSES")
