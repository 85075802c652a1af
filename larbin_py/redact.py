"""Secrets shown as ``***``: the one place that hides them before anything is printed.

A configuration carries three kinds of secret: ``httpToken`` (the whole
value), the password of a URL's userinfo (``redis://user:PASSWORD@host``,
``redis://:PASSWORD@host``; a userinfo without ``:`` is hidden whole, as
``redis://TOKEN@host`` may be a password), and a password given as a query
parameter (``?password=...``, as redis-py accepts; any parameter whose name
ends in ``password``, ``passwd``, ``pwd``, ``token``, ``secret``, ``auth`` or
``apikey``).  Whatever shows a
value to a person -- a configuration error, ``--print-config``, a message
naming a Redis URL -- passes it through here:

* :func:`redact_url` hides the credentials of ONE value that is meant to be
  a URL or an authority (``redisUrl``, a proxy's ``host``).  Over-cautious
  on purpose: everything between ``://`` and the LAST ``@`` before the path
  counts as userinfo, so a password with an unencoded ``@`` does not leak
  its tail, and an ``@`` further on hides as much as needed too (a password
  with an unencoded ``/``: such a URL is broken anyway, its secret is not
  shown).
* :func:`redact_text` hides every ``scheme://userinfo@`` inside a free line
  of text (an error message that quotes a value), and the password-like
  query parameters; it leaves e-mail addresses and URLs without userinfo
  alone.

Both are pure functions over ``str``: no I/O, nothing to configure.  They
are not a parser: a value is shown safely, not checked (larbin_py.config
checks it).
"""

from __future__ import annotations

import re

__all__ = ["SHOWN", "redact_url", "redact_text"]

#: What a secret looks like once hidden.
SHOWN = "***"

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: ``scheme://userinfo@`` inside text: the userinfo runs to the last ``@`` before a
#: path, query, fragment, quote, bracket or space.
_USERINFO_IN_TEXT = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#'\"\[\]]*)@")
#: A query parameter whose value is a secret.
_SECRET_PARAM = re.compile(r"(?P<name>[?&;][A-Za-z0-9_.-]*(?:password|passwd|pwd|token|secret|auth|api_?key)=)"
                           r"[^&#\s'\"]*", re.IGNORECASE)


def _hide_userinfo(userinfo: str) -> str:
    """``user:password`` -> ``user:***``; a userinfo without ``:`` is hidden whole."""
    user, colon, _password = userinfo.partition(":")
    return f"{user}:{SHOWN}" if colon else SHOWN


def redact_url(value: str) -> str:
    """``value`` (a URL, or an authority ``user:pw@host``) with its credentials as ``***``.

    >>> redact_url("redis://:s3cret@h:6379/0")
    'redis://:***@h:6379/0'
    >>> redact_url("u:s3cret@proxy.example")
    'u:***@proxy.example'
    """
    match = _SCHEME.match(value)
    start = match.end() if match else 0
    rest = value[start:]
    query_at = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, query_at)
    if at >= 0:
        rest = _hide_userinfo(rest[:at]) + rest[at:]
    return _SECRET_PARAM.sub(lambda m: m.group("name") + SHOWN, value[:start] + rest)


def redact_text(text: str) -> str:
    """``text`` with every URL's userinfo and password-like query parameter as ``***``."""
    if "@" in text:
        text = _USERINFO_IN_TEXT.sub(lambda m: m.group("scheme") + _hide_userinfo(m.group("userinfo")) + "@",
                                     text)
    if "=" in text:
        text = _SECRET_PARAM.sub(lambda m: m.group("name") + SHOWN, text)
    return text
