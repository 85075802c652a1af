"""TLS for the fetcher: the client contexts, and what a failed handshake says.

:class:`TlsPolicy` turns the configuration into :class:`ssl.SSLContext`
objects, made once and shared by every connection:

* ``tlsCaFile FILE`` with ``tlsCaMode add`` (default): the file's CAs are
  trusted besides the system's; ``tlsCaMode only``: the file's CAs alone
  (a crawl of an internal network signed by its own CA, a test server).
  A file that cannot be read or holds no certificate is a ValueError
  naming it, raised when the policy is made (the crawl does not start).
  Without a file, the first context is made by the first https connection:
  loading the system's CAs cost 15-25 ms of every crawl's start, before its
  first request, http-only crawls included.
* ``tlsVerify off HOST...``: no certificate check (neither chain nor name)
  for those hosts (``noProxy``'s patterns: a name and its subdomains, an
  address or range, ``*`` for all); every other host is verified.  There is
  no bare ``off``: the hosts are the explicit opt-in, and the crawl warns
  at its start (:meth:`TlsPolicy.warning`).
* ALPN: :meth:`TlsPolicy.context` takes the protocols to offer
  (``("h2", "http/1.1")`` when HTTP/2 may be used, see
  larbin_py.net.h2conn); a context per choice is made once.  The one the
  server chose is read back after the handshake (:func:`negotiated`).

:func:`failure` classifies a handshake's exception into the reason the
fetcher reports (``tlsError``) and a short detail: the certificate's
verification message (``certificate has expired``, ``Hostname mismatch``,
``unable to get local issuer certificate``...) or the handshake's.
Nothing here opens a socket.
"""

from __future__ import annotations

import ssl

from .choices import CA_MODES
from .proxy import NoProxy

__all__ = ["CA_MODES", "TlsPolicy", "failure", "negotiated"]



class TlsPolicy:
    """The client contexts of one crawl; see the module docstring."""

    __slots__ = ("ca_file", "ca_mode", "insecure", "_contexts")

    def __init__(self, *, ca_file: str = "", ca_mode: str = "add", insecure_hosts=()) -> None:
        if ca_mode not in CA_MODES:
            raise ValueError(f"tlsCaMode: expected one of {', '.join(CA_MODES)}, got {ca_mode!r}")
        if ca_mode == "only" and not ca_file:
            raise ValueError("tlsCaMode only needs tlsCaFile (no CA would be trusted)")
        self.ca_file = ca_file
        self.ca_mode = ca_mode
        self.insecure = NoProxy(insecure_hosts)
        # (verified, ALPN protocols) -> the context, made once
        self._contexts: dict[tuple[bool, tuple[str, ...]], ssl.SSLContext] = {}
        if ca_file:  # a CA file that does not load fails here, at once
            self._make(True, ("http/1.1",))

    def _make(self, verify: bool, alpn: tuple[str, ...]) -> ssl.SSLContext:
        ctx = self._contexts.get((verify, alpn))
        if ctx is None:
            ctx = self._contexts[(verify, alpn)] = self._new(verify, alpn)
        return ctx

    def _new(self, verify: bool, alpn: tuple[str, ...]) -> ssl.SSLContext:
        if verify and self.ca_mode == "only":
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        else:
            ctx = ssl.create_default_context()
        if verify and self.ca_file:
            try:
                ctx.load_verify_locations(cafile=self.ca_file)
            except ssl.SSLError as exc:
                raise ValueError(f"tlsCaFile: no CA certificate in {self.ca_file} ({exc.reason or exc})") from None
            except OSError as exc:
                raise ValueError(f"tlsCaFile: cannot read {self.ca_file}: {exc.strerror or exc}") from None
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if alpn:
            ctx.set_alpn_protocols(list(alpn))
        return ctx

    def context(self, host: str, alpn: tuple[str, ...] = ("http/1.1",)) -> ssl.SSLContext:
        """The context for a connection to ``host`` offering ``alpn`` (unverified only for a
        ``tlsVerify off`` host)."""
        return self._make(not (self.insecure and self.insecure.bypass(host)), alpn)

    def warning(self) -> str | None:
        """The start-up warning when some certificates go unchecked, else None."""
        if not self.insecure:
            return None
        hosts = " ".join(self.insecure.patterns)
        return (f"tlsVerify off: TLS certificates are NOT verified for {hosts} "
                "(anyone on the path can read and change those pages)")


def negotiated(transport) -> tuple[str | None, str | None]:
    """``(TLS version, ALPN protocol)`` of a connected transport; ``(None, None)`` over plain TCP."""
    obj = transport.get_extra_info("ssl_object") if transport is not None else None
    if obj is None:
        return None, None
    return obj.version(), obj.selected_alpn_protocol()


def failure(exc: BaseException) -> str:
    """A handshake failure's detail, e.g. ``certificate verify failed: certificate has expired``."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        why = exc.verify_message or exc.reason or str(exc)
        return f"certificate verify failed: {why}"
    if isinstance(exc, ssl.SSLError):
        return f"handshake failed: {exc.reason or exc}"
    return f"handshake failed: {exc!r}"
