"""Response decoding helpers for the fetcher: content codings and header values.

Everything here is sans-I/O and cheap enough for the per-page path.

* :class:`BodyDecoder` undoes ``Content-Encoding: gzip | x-gzip | deflate |
  br | zstd`` incrementally, never producing much more than a fixed cap of
  output, so a decompression bomb stops at the cap (the fetcher then says
  ``tooBig``):

  - gzip and deflate: each chunk is inflated with
    ``zlib.decompressobj().decompress(data, max_length)``, ``max_length``
    the room left under the cap plus one byte: a bomb costs at most
    ``cap + 1`` bytes before it is detected;
  - br (the ``brotli`` package, 1.2 or later): ``Decompressor.process(data,
    output_buffer_limit=room + 1)``, drained while the decoder holds output
    back: the same bound;
  - zstd (the ``zstandard`` package): its decompressor has no output limit
    per call, so a chunk is fed in slices small enough that one slice cannot
    inflate past the room left (zstd's best ratio is one 128 KiB block per
    4 input bytes: a slice is at most ``room / 32768`` bytes, at least 64):
    a bomb costs at most about ``cap + 2 MiB``.  The window a frame may ask
    for is bounded at 8 MiB (RFC 8878's limit for HTTP), so a frame cannot
    make the decoder itself allocate more.

  ``br`` and ``zstd`` are optional: :data:`CODINGS` lists the codings this
  interpreter decodes, and :func:`accept_encoding` offers exactly those (a
  coding whose package is missing is never asked for; a server that sends
  it anyway gets its body passed through undecoded, as any unknown coding).
* :func:`media_type` splits a ``Content-Type`` value into the lower-cased media
  type and the charset parameter.
* :func:`parse_retry_after` reads ``Retry-After`` as delta-seconds or an
  HTTP-date, returning seconds from ``now`` (never negative) or None.
"""

from __future__ import annotations

import time
import zlib
from importlib.util import find_spec as _find_spec

from ..lazyimport import LazyModule

try:  # optional: the "compression" extra
    import brotli as _brotli
    if not hasattr(_brotli.Decompressor(), "can_accept_more_data"):  # < 1.2: no bounded output
        _brotli = None
except ImportError:
    _brotli = None
# zstandard is found at import and imported by the first zstd body: its
# import (and the platform module it reads) cost 15 ms of every crawl's start.
_zstd = LazyModule("zstandard", globals(), "_zstd") if _find_spec("zstandard") is not None else None

__all__ = ["BodyDecoder", "CODINGS", "DecodeError", "accept_encoding", "media_type", "parse_retry_after", "read_headers"]

#: The content codings decoded here, in the order Accept-Encoding offers them.
CODINGS: tuple[str, ...] = ("gzip", "deflate") + (("br",) if _brotli else ()) + (("zstd",) if _zstd else ())
#: Largest zstd window a response may ask for (RFC 8878 section 3.1.1.1.2: 8 MiB for HTTP).
ZSTD_MAX_WINDOW = 8 << 20
#: zstd's largest expansion: a 128 KiB block from 4 bytes (an RLE block).
_ZSTD_RATIO = 1 << 15


def accept_encoding() -> bytes:
    """The Accept-Encoding value: every coding of :data:`CODINGS`."""
    return ", ".join(CODINGS).encode()


class DecodeError(Exception):
    """The entity body is not valid for its declared Content-Encoding."""


class BodyDecoder:
    """Incremental, capped decoder for one response body.

    ``feed(chunk)`` returns the decoded bytes of ``chunk``; it returns at most
    the room left under ``cap`` and sets :attr:`over` when the decoded body
    would exceed ``cap`` (the caller then stops reading: ``tooBig``).
    Codings not in :data:`CODINGS` (``identity``, ``compress``, ``br`` without
    its package...) pass through unchanged.
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
        elif coding == b"br" and _brotli is not None:
            self._kind = 3
            self._z = _brotli.Decompressor()
        elif coding == b"zstd" and _zstd is not None:
            self._kind = 4
            self._z = _zstd.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).decompressobj()
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
        if self._kind == 3:
            return self._keep(self._brotli(data, room), room)
        if self._kind == 4:
            return self._keep(self._zstd(data, room), room)
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
        return self._keep(out, room)

    def _keep(self, out: bytes, room: int) -> bytes:
        if len(out) > room:
            self.over = True
            out = out[:room]
        self.size += len(out)
        return out

    def _brotli(self, data: bytes, room: int) -> bytes:
        """Up to ``room + 1`` bytes of brotli output for ``data``."""
        d = self._z
        try:
            out = d.process(data, output_buffer_limit=room + 1)
            while len(out) <= room and not d.can_accept_more_data():
                out += d.process(b"", output_buffer_limit=room + 1 - len(out))
        except _brotli.error as exc:
            raise DecodeError(f"br: {exc}") from None
        if data:
            self._first = False
        return out

    def _zstd(self, data: bytes, room: int) -> bytes:
        """zstd output for ``data``, fed in slices that cannot inflate far past ``room``."""
        z = self._z
        step = max(64, room // _ZSTD_RATIO)
        parts: list[bytes] = []
        made = 0
        try:
            at = 0
            while at < len(data):
                if z.eof:
                    raise DecodeError("zstd: data after the end of the frame")
                piece = z.decompress(data[at:at + step])
                at += step
                parts.append(piece)
                made += len(piece)
                if made > room:
                    break
                step = max(64, (room - made) // _ZSTD_RATIO)
        except _zstd.ZstdError as exc:
            raise DecodeError(f"zstd: {exc}") from None
        if data:
            self._first = False
        return b"".join(parts)

    def finish(self) -> bytes:
        """End of body: flush, and fail if a compressed stream is truncated."""
        z = self._z
        if z is None or self.over:
            return b""
        if self._kind == 3:
            if not z.is_finished() and not self._first:
                raise DecodeError("compressed body truncated")
            return b""
        if self._kind == 4:
            if not z.eof and not self._first:
                raise DecodeError("compressed body truncated")
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


def read_headers(res, headers) -> bytes | None:
    """What the crawl reads of a response's ``headers`` (lower-cased names, as h11
    and h2 give them), set on ``res``: its media type and charset, ``Location``,
    ``Retry-After``.  Returns its ``Content-Encoding`` (None: none)."""
    coding = None
    for name, value in headers:
        if name == b"content-type":
            res.content_type, res.charset = media_type(value)
        elif name == b"content-encoding":
            coding = value
        elif name == b"location":
            res.location = value.decode("latin-1")
        elif name == b"retry-after":
            res.retry_after = parse_retry_after(value, time.time())
    return coding
