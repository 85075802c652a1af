"""Response decoding helpers for the fetcher: content codings and header values.

Everything here is sans-I/O and cheap enough for the per-page path.

* :class:`BodyDecoder` undoes ``Content-Encoding: gzip | x-gzip | deflate``
  incrementally, never producing more than a fixed cap of output: each chunk
  is inflated with ``zlib.decompressobj().decompress(data, max_length)`` where
  ``max_length`` is the room left under the cap plus one byte, so a gzip bomb
  costs at most ``cap + 1`` bytes of memory before it is detected.
* :func:`media_type` splits a ``Content-Type`` value into the lower-cased media
  type and the charset parameter.
* :func:`parse_retry_after` reads ``Retry-After`` as delta-seconds or an
  HTTP-date, returning seconds from ``now`` (never negative) or None.
"""

from __future__ import annotations

import zlib

__all__ = ["BodyDecoder", "DecodeError", "media_type", "parse_retry_after"]


class DecodeError(Exception):
    """The entity body is not valid for its declared Content-Encoding."""


class BodyDecoder:
    """Incremental, capped decoder for one response body.

    ``feed(chunk)`` returns the decoded bytes of ``chunk``; it returns at most
    the room left under ``cap`` and sets :attr:`over` when the decoded body
    would exceed ``cap`` (the caller then stops reading: ``tooBig``).
    Unknown codings (``br``, ``zstd``, ``identity``...) pass through unchanged.
    ``finish()`` checks that a compressed stream ended cleanly.
    """

    __slots__ = ("_z", "_kind", "_cap", "size", "over", "_first")

    def __init__(self, coding: bytes, cap: int) -> None:
        coding = coding.strip().lower()
        self._cap = cap
        self.size = 0
        self.over = False
        self._first = True
        if coding in (b"gzip", b"x-gzip"):
            self._kind = 1
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == b"deflate":
            # RFC 9110 says zlib-wrapped; some servers send raw deflate.  Try
            # the wrapper first and fall back to raw on the first chunk.
            self._kind = 2
            self._z = zlib.decompressobj(zlib.MAX_WBITS)
        else:
            self._kind = 0
            self._z = None

    def feed(self, data: bytes) -> bytes:
        """Decode ``data``; returns the output, truncated to the cap."""
        room = self._cap - self.size
        if self._z is None:
            if len(data) > room:
                self.over = True
                data = data[:room]
            self.size += len(data)
            return data
        z = self._z
        try:
            out = z.decompress(data, room + 1)
        except zlib.error as exc:
            if self._kind == 2 and self._first:
                self._z = z = zlib.decompressobj(-zlib.MAX_WBITS)
                self._first = False
                try:
                    out = z.decompress(data, room + 1)
                except zlib.error as exc2:
                    raise DecodeError(f"deflate: {exc2}") from None
            else:
                raise DecodeError(f"{'gzip' if self._kind == 1 else 'deflate'}: {exc}") from None
        self._first = False
        if len(out) > room:
            self.over = True
            out = out[:room]
        self.size += len(out)
        return out

    def finish(self) -> bytes:
        """End of body: flush, and fail if a compressed stream is truncated."""
        z = self._z
        if z is None or self.over:
            return b""
        if not z.eof:
            if self.size == 0 and not z.unconsumed_tail and self._first:
                return b""  # empty body with a Content-Encoding header
            raise DecodeError("compressed body truncated")
        return b""


def media_type(value: bytes) -> tuple[str | None, str | None]:
    """``b'Text/HTML; charset="UTF-8"'`` -> ``('text/html', 'utf-8')``."""
    text = value.decode("latin-1")
    parts = text.split(";")
    mtype = parts[0].strip().lower() or None
    charset = None
    for param in parts[1:]:
        name, sep, val = param.partition("=")
        if sep and name.strip().lower() == "charset":
            charset = val.strip().strip('"').strip("'").lower() or None
    return mtype, charset


def parse_retry_after(value: bytes, now_epoch: float) -> float | None:
    """Seconds to wait from ``Retry-After``: delta-seconds or an HTTP-date.

    ``now_epoch`` is wall-clock time (``time.time()``), since an HTTP-date is
    absolute.  A date in the past gives 0.0; garbage gives None.
    """
    text = value.decode("latin-1").strip()
    if not text:
        return None
    if text.isdigit():
        return float(int(text))
    try:
        import email.utils  # an HTTP date in Retry-After: rare, and email costs every start

        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        import datetime

        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - now_epoch)
