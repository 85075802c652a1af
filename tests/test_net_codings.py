"""brotli and zstd response bodies (larbin_py.net.decode): decoded, bounded like gzip, offered only
when their package is installed.

Bombs are real compressed streams of hundreds of megabytes of zeros; the
decoder must stop at the cap without inflating them (its peak memory is
measured), and the fetcher must say ``tooBig``.  Debian's nginx serves a
precompressed file with its Content-Encoding, end to end.  A subprocess
without the packages shows the not-installed path: neither coding offered,
such a body passed through undecoded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import brotli
import pytest
import zstandard

from larbin_py.net.decode import CODINGS, BodyDecoder, DecodeError, accept_encoding
from larbin_py.net.http import Fetcher
from helpers.http_server import Server, reply
from helpers.nginx import Nginx, free_port

PAGE = b"<html>" + b"brotli and zstd are decoded here " * 2000 + b"</html>"
COMPRESS = {"br": lambda b: brotli.compress(b, quality=11), "zstd": lambda b: zstandard.ZstdCompressor().compress(b)}


def test_both_codings_are_offered_when_installed():
    assert CODINGS == ("gzip", "deflate", "br", "zstd")
    assert accept_encoding() == b"gzip, deflate, br, zstd"


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_a_body_fed_in_small_pieces_is_decoded(coding):
    data = COMPRESS[coding](PAGE)
    dec = BodyDecoder(coding.encode(), 10_000_000)
    out = b"".join(dec.feed(data[i:i + 7]) for i in range(0, len(data), 7))
    dec.finish()
    assert out == PAGE and not dec.over


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_a_truncated_or_corrupt_body_is_a_decode_error(coding):
    data = COMPRESS[coding](PAGE)
    dec = BodyDecoder(coding.encode(), 10_000_000)
    dec.feed(data[: len(data) // 2])
    with pytest.raises(DecodeError, match="truncated"):
        dec.finish()
    with pytest.raises(DecodeError, match=coding):
        BodyDecoder(coding.encode(), 10_000_000).feed(b"\xff" * 64 + data)


def bomb(coding: str, size: int) -> bytes:
    if coding == "br":
        return brotli.compress(b"\0" * size, quality=5)
    return zstandard.ZstdCompressor(level=3).compress(b"\0" * size)


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_a_bomb_stops_at_the_cap_without_inflating(coding):
    payload = bomb(coding, 100_000_000)  # 100 MB of zeros
    assert len(payload) < 1_000_000
    cap = 1_000_000
    tracemalloc.start()
    try:
        dec = BodyDecoder(coding.encode(), cap)
        size = 0
        for i in range(0, len(payload), 16384):
            size += len(dec.feed(payload[i:i + 16384]))
            if dec.over:
                break
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert dec.over and size == cap
    assert peak < cap + 4_000_000, peak  # about the cap, never the 100 MB


@pytest.mark.parametrize("coding", ["br", "zstd"])
async def test_the_fetcher_decodes_and_stops_a_bomb_as_too_big(coding):
    async with Server(reply(COMPRESS[coding](PAGE), headers=b"Content-Encoding: " + coding.encode() + b"\r\n")) as s:
        f = Fetcher(user_agent="t", max_page_size=1_000_000)
        res = await f.fetch(f"http://a.test:{s.port}/", "127.0.0.1", s.port)
        await f.close()
    assert res.error is None and res.body == PAGE
    assert b"accept-encoding: gzip, deflate, br, zstd" in s.heads[0].lower()
    async with Server(reply(bomb(coding, 200_000_000), headers=b"Content-Encoding: " + coding.encode() + b"\r\n")) as s:
        f = Fetcher(user_agent="t", max_page_size=1_000_000)
        res = await f.fetch(f"http://a.test:{s.port}/", "127.0.0.1", s.port)
        await f.close()
    assert res.error == "tooBig" and len(res.body) == 1_000_000 and f.stats["errors"] == {"tooBig": 1}


async def test_nginx_serves_precompressed_br_and_zstd_end_to_end():
    port = free_port()
    nginx = Nginx(f"""
    server {{
        listen 127.0.0.1:{port};
        root {{root}}/www;
        location = /page.br {{ default_type text/html; add_header Content-Encoding br; }}
        location = /page.zst {{ default_type text/html; add_header Content-Encoding zstd; }}
    }}""", ports=[("127.0.0.1", port)])
    nginx.write("www/page.br", COMPRESS["br"](PAGE))
    nginx.write("www/page.zst", COMPRESS["zstd"](PAGE))
    with nginx.start():
        f = Fetcher(user_agent="t")
        results = [await f.fetch(f"http://a.test:{port}/page.{ext}", "127.0.0.1", port) for ext in ("br", "zst")]
        await f.close()
        log = nginx.wait_log(lambda log: len(log) >= 2)
    assert [(r.error, r.body == PAGE) for r in results] == [(None, True), (None, True)]
    assert all(e["accept_encoding"] == "gzip, deflate, br, zstd" for e in log)


def test_without_the_packages_neither_coding_is_offered_and_such_a_body_passes_through():
    code = """
import sys
sys.modules["brotli"] = None
sys.modules["zstandard"] = None
from larbin_py.net import decode, http
assert decode.CODINGS == ("gzip", "deflate"), decode.CODINGS
assert http.ACCEPT_ENCODING == b"gzip, deflate", http.ACCEPT_ENCODING
dec = decode.BodyDecoder(b"br", 100)
assert dec.feed(b"\\x1b\\x03raw") == b"\\x1b\\x03raw"
print("ok")
"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
