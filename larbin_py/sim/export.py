"""Export a :class:`SimWeb` as static files plus an ``nginx.conf``.

Layout under ``DIR``::

    nginx.conf            one server block per host: listen IP:PORT, server_name
    www/<host>/...        each 200 resource at its decoded path (``/`` and
                          ``/dir/`` -> ``index.html``; ``/a?q`` -> ``__q/a@q``)
    www/<host>/robots.txt the static robots profiles (rules, patterns, allow,
                          delay, agent, oversized; redirect -> rules file)
    logs/ tmp/            nginx's pid, logs and temp paths (nothing root-owned)

Redirects become ``return 30X <Location as written>`` (``absolute_redirect
off`` keeps relative Locations relative), robots ``error`` profiles ``return
5xx``.  Not exported (they need a live server): the spider trap (its ``/``
is), the ``timeout`` robots profile (served as absent), faults, load,
chunked encoding and Content-Type charsets (nginx picks types by extension).
Check with ``nginx -t -p DIR -e DIR/logs/error.log -c DIR/nginx.conf``.
"""

from __future__ import annotations

import os
from urllib.parse import unquote

from .web import SimWeb

TYPES = """    types {
        text/html html htm;
        text/plain txt;
        image/png png;
        image/jpeg jpg jpeg;
        application/pdf pdf;
    }
    default_type text/html;
"""


def file_path(pq: str) -> str:
    """Relative file name (under the host root) of canonical ``pq``."""
    path, sep, query = pq.partition("?")
    path = unquote(path)
    if path.endswith("/"):
        path += "index.html"
    if sep:
        path = "/__q" + path + "@" + query
    return path.lstrip("/")


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def export(web: SimWeb, directory: str) -> dict[str, int]:
    """Write the web under ``directory``; return counts (files, hosts, redirects)."""
    root = os.path.abspath(directory)
    for sub in ("logs", "tmp", "www"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    counts = {"files": 0, "hosts": 0, "redirects": 0}
    blocks = []
    for host in web.hosts.values():
        counts["hosts"] += 1
        hroot = os.path.join(root, "www", host.name)
        os.makedirs(hroot, exist_ok=True)
        locs = []
        for pq, res in host.resources.items():
            if res.status == 200:
                dest = os.path.join(hroot, file_path(pq))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with open(dest, "wb") as f:
                    f.write(res.body)
                counts["files"] += 1
            elif res.location is not None and "?" not in pq:
                locs.append(f"        location = {_quote(unquote(pq))} "
                            f"{{ return {res.status} {_quote(res.location)}; }}")
                counts["redirects"] += 1
        prof = host.robots
        if prof.kind in ("rules", "patterns", "allow", "delay", "agent", "oversized"):
            with open(os.path.join(hroot, "robots.txt"), "wb") as f:
                f.write(prof.body)
            counts["files"] += 1
        elif prof.kind == "redirect":
            with open(os.path.join(hroot, prof.target.lstrip("/")), "wb") as f:
                f.write(prof.rules_body)
            locs.append(f"        location = /robots.txt {{ return {prof.status} {prof.target}; }}")
        elif prof.kind in ("error", "forbidden"):
            locs.append(f"        location = /robots.txt {{ return {prof.status}; }}")
        gz = "        gzip on;\n        gzip_types text/plain;\n" if host.gzip else ""
        blocks.append(
            "    server {\n"
            f"        listen {host.ip}:{web.port};\n"
            f"        server_name {host.name};\n"
            f"        root {_quote(hroot)};\n{gz}"
            "        location /shop/ { try_files /__q$uri@$args $uri =404; }\n"
            "        location / { try_files $uri $uri/index.html =404; }\n"
            + "\n".join(locs) + ("\n" if locs else "") + "    }\n")
    tmp = os.path.join(root, "tmp")
    conf = (
        "# nginx in front of the larbin_py synthetic web (generated)\n"
        "worker_processes 1;\n"
        f"pid {_quote(os.path.join(root, 'logs', 'nginx.pid'))};\n"
        f"error_log {_quote(os.path.join(root, 'logs', 'error.log'))} warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n"
        "    access_log off;\n"
        "    server_tokens off;\n"
        "    absolute_redirect off;\n"
        "    keepalive_requests 100000;\n"
        + "".join(f"    {k}_temp_path {_quote(os.path.join(tmp, k))};\n"
                  for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        + TYPES
        + "    server {\n"
          f"        listen {web.ips()[0]}:{web.port} default_server;\n"
          "        return 404;\n    }\n"
        + "".join(blocks) + "}\n")
    with open(os.path.join(root, "nginx.conf"), "w", encoding="utf-8") as f:
        f.write(conf)
    return counts
