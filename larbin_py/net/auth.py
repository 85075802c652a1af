"""HTTP authentication for the crawl's own requests: the ``auth`` block (sans-I/O but for token files).

One rule a line, by URL prefix::

    auth
        https://intranet.example/docs/  basic   USER PASSWORD
        https://api.example/            bearer  /run/secrets/api-token
        https://wiki.example/           digest  USER PASSWORD
    end

Which requests carry credentials
    A rule applies to a URL that starts with its prefix, the prefix
    normalized as a URL (scheme and host lower-cased, a default port
    dropped, ``/`` when it has no path): the credentials go only to that
    origin, under that path.  A redirect to another origin is a new URL that
    the prefix does not match, so nothing is sent there.  The longest
    matching prefix wins.

Schemes
    * ``basic``: ``Authorization: Basic`` on every matching request.
    * ``bearer FILE``: ``Authorization: Bearer TOKEN``, TOKEN the file's
      content (white space stripped).  The file is read again whenever its
      modification time or size changes (one ``stat`` per request), so a
      separate program can refresh an OAuth token in place.  A file that
      cannot be read, or is empty, sends no header (the request then meets
      the server's 401, counted ``authRequired``).
    * ``digest`` (RFC 7616, MD5 or SHA-256, ``qop=auth`` or none): the first
      request goes without credentials; its 401 brings the challenge, which
      the rule keeps, and the request is queued again (``authRetry``:
      politely, at its site's next turn, without spending a retry).  Every
      later request computes its response from the kept challenge with the
      next nonce count.  A 401 with ``stale=true`` renews the challenge the
      same way, at most :data:`MAX_STALE` times in a row.

Outcomes
    A 401 to a request sent without credentials is ``authRequired``; a 401
    to a request that carried them is the server's refusal, an ordinary 4xx.

Secrets
    Passwords and tokens are never shown: :func:`AuthRule.__repr__` and the
    configuration print ``***``; the fetcher puts ``***`` in the WARC's
    request records (:attr:`Credential.secret` names the bytes to hide).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from dataclasses import dataclass, field

from ..lazyimport import LazyModule
from ..url import normalize

# secrets (and the random and hmac modules it imports) is imported by the
# first Digest answer: the configuration reads auth lines with this module.
secrets = LazyModule("secrets", globals(), "secrets")

__all__ = ["SCHEMES", "MAX_STALE", "AuthRule", "AuthRules", "Credential", "parse_rule", "parse_challenges"]

#: The schemes of an ``auth`` line.
SCHEMES: tuple[str, ...] = ("basic", "bearer", "digest")
#: ``stale=true`` challenges followed in a row before a 401 counts as a refusal.
MAX_STALE = 2


@dataclass(slots=True)
class Credential:
    """An ``Authorization`` value for one request; ``secret``: the bytes a record must hide."""

    value: bytes
    secret: bytes


def parse_rule(words) -> tuple[str, str, str, str]:
    """``PREFIX basic USER PASSWORD`` | ``PREFIX bearer FILE`` | ``PREFIX digest USER PASSWORD``.

    Returns ``(prefix, scheme, a, b)`` (``b`` empty for bearer); ValueError
    names what is wrong, never quoting a password.
    """
    words = list(words)
    if len(words) < 2:
        raise ValueError("expected PREFIX SCHEME ... (basic USER PASSWORD, bearer FILE, digest USER PASSWORD)")
    prefix, scheme = words[0], words[1].lower()
    if scheme not in SCHEMES:
        raise ValueError(f"expected a scheme among {', '.join(SCHEMES)} after the prefix, got {words[1]!r}")
    norm = _prefix(prefix)
    if norm is None:
        raise ValueError(f"expected an http(s) URL prefix, got {prefix!r}")
    if scheme == "bearer":
        if len(words) != 3:
            raise ValueError("expected PREFIX bearer FILE (one token file)")
        return norm, scheme, words[2], ""
    if len(words) != 4:
        raise ValueError(f"expected PREFIX {scheme} USER PASSWORD (got {len(words) - 2} words after the scheme)")
    if ":" in words[2] and scheme == "basic":
        raise ValueError("a basic user name cannot hold ':'")
    return norm, scheme, words[2], words[3]


def _prefix(text: str) -> str | None:
    if not re.match(r"https?://", text, re.IGNORECASE):
        return None
    out = normalize(text)
    if out is None:
        return None
    return out.split("#", 1)[0]


def parse_challenges(values) -> dict[str, dict[str, str]]:
    """``WWW-Authenticate`` values -> ``{scheme: {param: value}}`` (lower-case scheme and names)."""
    out: dict[str, dict[str, str]] = {}
    for raw in values:
        text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
        for m in re.finditer(r'(?:^|,)\s*([A-Za-z][\w-]*)\s+((?:[\w-]+\s*=\s*(?:"(?:[^"\\]|\\.)*"|[^,\s]*)'
                             r'\s*,?\s*)+)', text):
            params = {k.lower(): (v[1:-1].replace('\\"', '"') if v.startswith('"') else v)
                      for k, v in re.findall(r'([\w-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)', m.group(2))}
            out.setdefault(m.group(1).lower(), params)
    return out


class _TokenFile:
    """A bearer token read from a file, read again when the file changes."""

    __slots__ = ("path", "_sig", "_token")

    def __init__(self, path: str) -> None:
        self.path = path
        self._sig: tuple | None = None
        self._token = b""

    def token(self) -> bytes:
        try:
            st = os.stat(self.path)
        except OSError:
            self._sig, self._token = None, b""
            return b""
        sig = (st.st_mtime_ns, st.st_size, st.st_ino)
        if sig != self._sig:
            try:
                with open(self.path, "rb") as f:
                    self._token = f.read(16384).strip()
            except OSError:
                self._token = b""
            self._sig = sig
        return self._token


_HASHES = {"md5": hashlib.md5, "sha-256": hashlib.sha256}


@dataclass(slots=True)
class AuthRule:
    """One ``auth`` line, with its live state (a bearer file, a digest challenge)."""

    prefix: str
    scheme: str
    user: str = ""
    password: str = field(default="", repr=False)
    token_file: str = ""
    challenge: dict | None = field(default=None, repr=False)
    nc: int = 0
    stale: int = 0
    _file: _TokenFile | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        what = self.token_file if self.scheme == "bearer" else f"{self.user} ***"
        return f"AuthRule({self.prefix} {self.scheme} {what})"

    @classmethod
    def from_words(cls, words) -> "AuthRule":
        prefix, scheme, a, b = parse_rule(words)
        if scheme == "bearer":
            return cls(prefix, scheme, token_file=a, _file=_TokenFile(a))
        return cls(prefix, scheme, user=a, password=b)

    def credential(self, method: str, target: str) -> Credential | None:
        """The ``Authorization`` for a request of ``method`` on ``target`` (origin form); None: none to send."""
        if self.scheme == "basic":
            token = base64.b64encode(f"{self.user}:{self.password}".encode("utf-8"))
            return Credential(b"Basic " + token, token)
        if self.scheme == "bearer":
            token = self._file.token() if self._file is not None else b""
            if not token or not re.fullmatch(rb"[\x21-\x7e]+", token):
                return None
            return Credential(b"Bearer " + token, token)
        if self.challenge is None:
            return None
        return self._digest(method, target)

    def _digest(self, method: str, target: str) -> Credential:
        ch = self.challenge
        algo = ch.get("algorithm", "MD5").lower()
        sess = algo.endswith("-sess")
        h = _HASHES.get(algo[:-5] if sess else algo, hashlib.md5)

        def H(text: str) -> str:
            return h(text.encode("utf-8")).hexdigest()

        realm, nonce = ch.get("realm", ""), ch.get("nonce", "")
        self.nc += 1
        nc = f"{self.nc:08x}"
        cnonce = secrets.token_hex(8)
        ha1 = H(f"{self.user}:{realm}:{self.password}")
        if sess:
            ha1 = H(f"{ha1}:{nonce}:{cnonce}")
        ha2 = H(f"{method}:{target}")
        qops = [q.strip() for q in ch.get("qop", "").split(",") if q.strip()]
        parts = [f'username="{self.user}"', f'realm="{realm}"', f'nonce="{nonce}"', f'uri="{target}"']
        if "auth" in qops:
            response = H(f"{ha1}:{nonce}:{nc}:{cnonce}:auth:{ha2}")
            parts += ["qop=auth", f"nc={nc}", f'cnonce="{cnonce}"']
        else:
            response = H(f"{ha1}:{nonce}:{ha2}")
        parts.append(f'response="{response}"')
        if "algorithm" in ch:
            parts.append(f"algorithm={ch['algorithm']}")
        if "opaque" in ch:
            parts.append(f'opaque="{ch["opaque"]}"')
        return Credential(("Digest " + ", ".join(parts)).encode("latin-1", "replace"), response.encode())

    def answered_401(self, sent: bool, challenges: dict[str, dict[str, str]]) -> str:
        """What a 401 means for this rule: ``retry`` (a new digest challenge), or ``refused``.

        ``sent``: the request carried credentials of this rule.
        """
        if self.scheme != "digest":
            return "refused"
        ch = challenges.get("digest")
        if ch is None or not ch.get("nonce"):
            return "refused"
        if not sent:
            self.challenge, self.nc, self.stale = ch, 0, 0
            return "retry"
        if ch.get("stale", "").lower() == "true" and self.stale < MAX_STALE:
            self.challenge, self.nc = ch, 0
            self.stale += 1
            return "retry"
        return "refused"

    def succeeded(self) -> None:
        """A request with this rule's credentials was not refused."""
        self.stale = 0


class AuthRules:
    """The ``auth`` block: :meth:`for_url` picks the rule of a URL (longest prefix)."""

    __slots__ = ("rules",)

    def __init__(self, lines=()) -> None:
        rules = [line if isinstance(line, AuthRule) else AuthRule.from_words([w for w in line if w])
                 for line in lines]
        self.rules = sorted(rules, key=lambda r: len(r.prefix), reverse=True)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def for_url(self, url: str) -> AuthRule | None:
        for rule in self.rules:
            if url.startswith(rule.prefix) and _at_boundary(url, rule.prefix):
                return rule
        return None


def _at_boundary(url: str, prefix: str) -> bool:
    """The prefix ends where the URL's origin ends or inside its path (never mid-host)."""
    scheme_end = prefix.find("://") + 3
    if prefix.find("/", scheme_end) >= 0:  # the prefix has a path: any continuation is inside it
        return True
    return len(url) == len(prefix) or url[len(prefix)] in "/?#"
