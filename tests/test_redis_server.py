"""The private redis-server (redisUrl auto): started, answering, settings, stopped."""

from __future__ import annotations

import pytest
import redis

from larbin_py.distributed.redis_server import INSTALL_HINT, RedisServer, RedisServerError


def test_private_server_has_the_durable_settings(redis_server):
    client = redis.Redis(unix_socket_path=redis_server.socket_path)
    assert client.ping()
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    assert client.config_get("port") == {"port": "0"}  # no TCP: the socket only


def test_acknowledged_write_survives_kill_9(redis_server):
    client = redis.Redis(unix_socket_path=redis_server.socket_path)
    client.set("k", "v")
    redis_server.kill()
    redis_server.start()
    assert redis.Redis(unix_socket_path=redis_server.socket_path).get("k") == b"v"


def test_missing_binary_names_the_package(tmp_path):
    server = RedisServer(str(tmp_path), binary=None)
    server.binary = None
    with pytest.raises(RedisServerError, match="apt-get install redis-server"):
        server.start()
    assert "apt-get install redis-server" in INSTALL_HINT
