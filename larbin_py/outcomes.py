"""The outcome rules of a page request, as a table (sans-I/O).

What the engine does with the answer to a page request depends on two
things only: the *kind* of result (an HTTP answer, or which transport error
ended the request) and the *class* of the status.  The rules are data, in
:data:`RULES` (as h11 keeps its transitions in one table), read by one pure
function, :func:`decide`, which the engine's router applies:

==============  ============  ==============  ========================
result kind     status class  action          reason
==============  ============  ==============  ========================
answer          2xx           SUCCESS         (the page is used)
answer          3xx           REDIRECT        err30X (target queued)
answer          busy          RETRY + delay   err50X (429, 500, 502-504)
answer          5xx           FORGET          err50X (501, 505, ...)
answer          4xx / other   FORGET          err40X
stale           -             RETRY_FREE      staleConnection
notSent         -             RETRY_FREE      notSent
noConnection    -             RETRY           noConnection
timeout         -             RETRY           timeout
reset           -             RETRY           reset
proxyError      -             RETRY           proxyError
authRetry       -             RETRY_FREE      authRetry
tlsError        -             FORGET          tlsError
authRequired    -             FORGET          authRequired
any other error -             FORGET          the error's name
==============  ============  ==============  ========================

*stale*: a ``reset`` on a kept-alive connection before a byte of the answer
arrived — the server closed the connection as we reused it, so the request
never reached it: retried politely without spending a retry.

*notSent*: a connection opened when the request was no longer allowed to
go out (a distributed worker's IP lease may have lapsed meanwhile,
larbin_py.net.http's ``may_send``): nothing reached the server, so it is
queued again for free, as *stale*.

*proxyError*: the proxy failed (unreachable, refused CONNECT, 407, garbage,
silence): retried like a connection failure, never counted as the site's
answer.  *authRetry*: a 401 brought a digest challenge the next request
answers (larbin_py.net.auth bounds how often): queued again politely, free.
*tlsError*: the server's certificate was refused (expired, another name, an
unknown CA) or its handshake failed: a certificate does not mend itself in
the minutes a retry waits.  *authRequired*: a 401 to a request sent without
credentials (no ``auth`` rule for it).

A busy server's retry waits its Retry-After (capped at
:data:`MAX_RETRY_AFTER`), or an exponential backoff from ``waitDuration``:
``max(waitDuration, 1) * 2 ** attempts`` (see :func:`backoff`).

Two more pure rules live here, for the router: which content types are
kept (:func:`content_policy`) and where a redirect leads
(:func:`redirect_target`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .parse import HTML_TYPES
from .url import normalize

__all__ = ["Action", "SUCCESS", "REDIRECT", "RETRY", "RETRY_FREE", "FORGET", "RULES",
           "RETRY_STATUSES", "MAX_RETRY_AFTER", "status_class", "result_kind", "decide",
           "backoff", "ContentPolicy", "content_policy", "redirect_target"]

SUCCESS = "success"
REDIRECT = "redirect"
RETRY = "retry"
RETRY_FREE = "retryFree"
FORGET = "forget"

#: Answers retried after a wait: the server is busy or failing for now.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Longest Retry-After honoured, seconds.
MAX_RETRY_AFTER = 600.0

#: (result kind, status class) -> (action, reason).  A transport error has no
#: status class (``None``); an error not named here is forgotten under its name.
RULES: dict[tuple[str, str | None], tuple[str, str | None]] = {
    ("answer", "2xx"): (SUCCESS, None),
    ("answer", "3xx"): (REDIRECT, "err30X"),
    ("answer", "busy"): (RETRY, "err50X"),  # 429 too: a server that asks to slow down
    ("answer", "5xx"): (FORGET, "err50X"),
    ("answer", "4xx"): (FORGET, "err40X"),
    ("answer", "other"): (FORGET, "err40X"),  # 1xx as a final answer, or out of range
    ("stale", None): (RETRY_FREE, "staleConnection"),
    ("notSent", None): (RETRY_FREE, "notSent"),  # connected, but the IP no longer ours: nothing sent
    ("noConnection", None): (RETRY, "noConnection"),
    ("timeout", None): (RETRY, "timeout"),
    ("reset", None): (RETRY, "reset"),
    ("proxyError", None): (RETRY, "proxyError"),
    ("authRetry", None): (RETRY_FREE, "authRetry"),
    ("tlsError", None): (FORGET, "tlsError"),
    ("authRequired", None): (FORGET, "authRequired"),
}


@dataclass(frozen=True, slots=True)
class Action:
    """What to do with a request's result.

    ``kind`` is one of :data:`SUCCESS`, :data:`REDIRECT`, :data:`RETRY`,
    :data:`RETRY_FREE`, :data:`FORGET`; ``reason`` the terminal (or retry)
    reason; ``delay`` the seconds the site waits before the retry (None: the
    frontier's own spacing).
    """

    kind: str
    reason: str | None = None
    delay: float | None = None


def status_class(status: int) -> str:
    """The class of an HTTP status, as :data:`RULES` names it."""
    if 200 <= status < 300:
        return "2xx"
    if 300 <= status < 400:
        return "3xx"
    if status in RETRY_STATUSES:
        return "busy"
    if 500 <= status:
        return "5xx"
    if 400 <= status < 500:
        return "4xx"
    return "other"


def result_kind(error: str | None, conn_reused: bool = False, bytes_read: int = 0) -> str:
    """``answer`` when the request got an HTTP answer, else the error's kind."""
    if error is None:
        return "answer"
    if error == "reset" and conn_reused and bytes_read == 0:
        return "stale"
    return error


def backoff(wait_duration: float, retries: int, retries_left: int) -> float:
    """Seconds before retrying a busy server without a Retry-After: doubles per attempt."""
    return max(wait_duration, 1.0) * (2 ** max(0, retries - retries_left))


def decide(error: str | None, status: int | None, *, conn_reused: bool = False, bytes_read: int = 0,
           retry_after: float | None = None, retries: int = 0, retries_left: int = 0,
           wait_duration: float = 0.0) -> Action:
    """The action for one page request's result (see the module's table).

    ``error``/``status``/``conn_reused``/``bytes_read``/``retry_after``: the
    fetch result's fields; ``retries``: the configured retries of a URL,
    ``retries_left``: those its record has left (the backoff grows as they
    are spent).
    """
    kind = result_kind(error, conn_reused, bytes_read)
    cls = status_class(status) if kind == "answer" else None
    rule = RULES.get((kind, cls))
    if rule is None:
        return Action(FORGET, error)
    action, reason = rule
    if action == RETRY and kind == "answer":
        delay = min(retry_after, MAX_RETRY_AFTER) if retry_after is not None \
            else backoff(wait_duration, retries, retries_left)
        return Action(RETRY, reason, delay)
    return Action(action, reason)


@dataclass(frozen=True, slots=True)
class ContentPolicy:
    """What a 2xx answer of one content type is used for."""

    wanted: bool  # kept at all (else forgotten as ``badType``)
    save: bool  # written by the output
    is_html: bool  # parsed for links


def content_policy(ctype: str | None, *, any_type: bool = False, get_image: bool = False,
                   specific_search: bool = False, specific_set=frozenset()) -> ContentPolicy:
    """Which 2xx answers are kept, saved and parsed (anyType, getImage, specificSearch).

    HTML is always wanted; another type only with ``anyType``, ``getImage``
    (images) or ``specificSearch`` (the types of ``specificSet``).  With
    ``specificSearch`` only those types are saved; HTML is still parsed for
    links.
    """
    ctype = ctype or ""
    is_html = ctype in HTML_TYPES
    wanted = is_html or any_type or (get_image and ctype.startswith("image/"))
    if specific_search and ctype in specific_set:
        wanted = True
    save = not specific_search or ctype in specific_set
    return ContentPolicy(bool(wanted), save, is_html)


def redirect_target(location: str | None, url: str, hops: int, *, max_redirects: int,
                    max_url_size: int) -> tuple[str | None, str | None]:
    """Where a 3xx leads: ``(target, None)``, or ``(None, refusal reason or None)``.

    ``hops`` are counted from the URL first queued (kept in its record, on
    disk too): beyond ``max_redirects`` the target is refused as
    ``tooManyRedirects``, so an endless chain ends.  No Location, or one that
    is no http(s) URL, leads nowhere (no reason: the 3xx itself is counted).
    """
    if not location:
        return None, None
    target = normalize(location, url, max_length=max_url_size)
    if target is None:
        return None, None
    if hops >= max_redirects:
        return None, "tooManyRedirects"
    return target, None
