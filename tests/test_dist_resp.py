"""The ticks' Redis connection (larbin_py.distributed.resp): the packing, and the
error table of its module docstring, on a real redis-server (the fixture) and
on sockets that misbehave on purpose."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
import redis.asyncio as aredis
from redis.exceptions import ResponseError

from larbin_py.distributed.resp import Pipe, pack

from helpers.zookeeper import free_port


def test_pack_is_the_redis_protocol():
    assert pack([("SET", "k", b"v\r\n"), ("INCRBY", "n", -12), ("X", 1.5, "é")]) == (
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n"
        b"*3\r\n$6\r\nINCRBY\r\n$1\r\nn\r\n$3\r\n-12\r\n"
        b"*3\r\n$1\r\nX\r\n$3\r\n1.5\r\n$2\r\n\xc3\xa9\r\n")
    assert pack([]) == b""


@pytest.mark.parametrize("bad", [None, True, [1], {"a": 1}])
def test_an_argument_redis_py_would_refuse_is_a_type_error(bad):
    with pytest.raises(TypeError, match="a Redis argument"):
        pack([("SET", "k", bad)])


async def test_replies_come_back_in_order_with_error_replies_in_their_slot(redis_server):
    pipe = Pipe(redis_server.url)
    try:
        out = await pipe.execute([("SET", "k", "v"), ("GET", "k"), ("INCR", "k"), ("RPUSH", "l", "a", "b"),
                                  ("LRANGE", "l", 0, -1), ("HSET", "h", "f", "1"), ("HGETALL", "h"),
                                  ("GET", "missing"), ("FCALL", "nope", 0)])
    finally:
        pipe.close()
    assert out[:2] == [b"OK", b"v"]
    assert isinstance(out[2], ResponseError) and "not an integer" in str(out[2])
    assert out[3:8] == [2, [b"a", b"b"], 1, [b"f", b"1"], None]
    assert isinstance(out[8], ResponseError) and "Function not found" in str(out[8])


async def test_a_large_tick_is_read_across_many_chunks(redis_server):
    pipe = Pipe(redis_server.url)
    blob = os.urandom(300_000)
    try:
        out = await pipe.execute([("SET", f"k{i}", blob) for i in range(4)] + [("GET", f"k{i}") for i in range(4)])
    finally:
        pipe.close()
    assert out == [b"OK"] * 4 + [blob] * 4


async def test_auth_and_select_from_the_url(redis_server):
    admin = aredis.Redis(unix_socket_path=redis_server.socket_path)
    await admin.config_set("requirepass", "s3cret")
    try:
        pipe = Pipe(f"unix://{redis_server.socket_path}?db=3&password=s3cret")
        try:
            assert await pipe.execute([("SET", "where", "db3")]) == [b"OK"]
        finally:
            pipe.close()
        check = aredis.Redis(unix_socket_path=redis_server.socket_path, password="s3cret", db=3)
        assert await check.get("where") == b"db3"
        await check.aclose()
        wrong = Pipe(f"unix://{redis_server.socket_path}?password=nope")
        with pytest.raises(ConnectionError, match="Redis refused AUTH"):
            await wrong.execute([("PING",)])
        assert not wrong.connected
    finally:
        await admin.execute_command("AUTH", "s3cret")
        await admin.config_set("requirepass", "")
        await admin.aclose()


async def test_tcp_urls(tmp_path):
    from larbin_py.distributed.redis_server import RedisServer

    from conftest import require_service

    binary = require_service("redis-server", "apt-get install redis-server")
    port = free_port()
    server = RedisServer(str(tmp_path / "tcp"), binary=binary,
                         extra=("--port", str(port), "--bind", "127.0.0.1")).start()
    try:
        pipe = Pipe(f"redis://127.0.0.1:{port}/2")
        try:
            assert await pipe.execute([("SET", "a", 1), ("DBSIZE",)]) == [b"OK", 1]
        finally:
            pipe.close()
    finally:
        server.stop()


async def serve_badly(tmp_path, behaviour):
    """A unix socket whose server reads a request, then ``behaviour(conn)``."""
    path = str(tmp_path / "bad.sock")
    conns = []

    async def handle(reader, writer):
        conns.append(writer)
        await reader.read(1024)
        await behaviour(writer)
    server = await asyncio.start_unix_server(handle, path)
    return server, path, conns


async def test_a_connection_closed_mid_tick_is_a_connection_error_and_is_dropped(tmp_path):
    async def half_then_close(writer):
        writer.write(b"+OK\r\n$5\r\nhel")  # one reply and a half, then the end
        await writer.drain()
        writer.close()
    server, path, _ = await serve_badly(tmp_path, half_then_close)
    pipe = Pipe(f"unix://{path}")
    try:
        with pytest.raises(ConnectionError, match="closed the connection"):
            await pipe.execute([("SET", "a", 1), ("GET", "a")])
        assert not pipe.connected  # the next tick opens a new one
    finally:
        server.close()


async def test_no_answer_within_the_timeout_is_a_timeout_error_and_the_connection_is_dropped(tmp_path):
    never = asyncio.Event()

    async def silent(writer):
        await never.wait()
    server, path, conns = await serve_badly(tmp_path, silent)
    pipe = Pipe(f"unix://{path}", timeout=0.2)
    try:
        with pytest.raises(TimeoutError):
            await pipe.execute([("PING",)])
        assert not pipe.connected  # a late reply can never be read as the next tick's
        assert len(conns) == 1
    finally:
        never.set()
        server.close()


async def test_nobody_listening_is_a_connection_error(tmp_path):
    pipe = Pipe(f"unix://{tmp_path}/none.sock")
    with pytest.raises(OSError):
        await pipe.execute([("PING",)])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pipe = Pipe(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(OSError):
        await pipe.execute([("PING",)])
