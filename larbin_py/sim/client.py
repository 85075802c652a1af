"""A minimal raw HTTP/1.1 client for the sim's tests and benchmarks (independent of the crawler)."""

from __future__ import annotations

import asyncio


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes, raw_body: bytes):
        self.status, self.headers, self.body, self.raw_body = status, headers, body, raw_body


class Client:
    """One keep-alive connection to ``ip:port``; ``get`` sends and reads one answer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, ip: str, port: int) -> "Client":
        r, w = await asyncio.open_connection(ip, port)
        return cls(r, w)

    @property
    def local_port(self) -> int:
        return self.writer.get_extra_info("sockname")[1]

    def send(self, host: str, target: str, *, method: str = "GET",
             headers: tuple[tuple[str, str], ...] = ()) -> None:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
        lines += [f"{k}: {v}" for k, v in headers]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    async def read(self, method: str = "GET") -> Response:
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        raw = b""
        if method == "HEAD":
            pass
        elif "content-length" in headers:
            raw = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line = await self.reader.readuntil(b"\r\n")
                raw += size_line
                n = int(size_line.strip(), 16)
                chunk = await self.reader.readexactly(n + 2)
                raw += chunk
                body += chunk[:-2]
                if n == 0:
                    break
            return Response(status, headers, body, raw)
        else:
            raw = await self.reader.read()
        return Response(status, headers, raw, raw)

    async def get(self, host: str, target: str, **kw) -> Response:
        self.send(host, target, **kw)
        return await self.read(kw.get("method", "GET"))

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
