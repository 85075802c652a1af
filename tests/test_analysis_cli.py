"""Issue 22: ``python -m larbin_py analyze`` over what an earlier crawl saved
(mirror and WARC), with the same retries and alerts; usage errors in one line."""

from __future__ import annotations

import json
import os
import sys

import pytest

from larbin_py.analysis.alerts import ALERTS_LOG
from larbin_py.cli import main
from larbin_py.config import format_config, parse_config_text
from larbin_py.output import Document, make_output

PAGES = {f"http://h{i}.test/p{i}": f"<html><title>T{i}</title><a href='/x'>x</a></html>".encode() for i in range(6)}


def saved_crawl(tmp_path, mode: str, **changes):
    config = parse_config_text("", require_start_urls=False).replace(
        output_mode=mode, save_dir=str(tmp_path / "save"), state_dir=str(tmp_path / "state"),
        analysis_dir=str(tmp_path / "results"), analysis_backoff=0.01, analysis_retries=1, **changes)
    out = make_output(config)
    for url, body in PAGES.items():
        out.write(Document(url=url, status=200, headers=[(b"content-type", b"text/html")], body=body,
                           content_type="text/html", fetched_at=1_700_000_000.0,
                           raw_request=b"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
                           raw_response_head=b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n", raw_body=body))
    out.write(Document(url="http://h.test/img.png", status=200, headers=[(b"content-type", b"image/png")],
                       body=b"\x89PNG", content_type="image/png", fetched_at=1_700_000_000.0,
                       raw_request=b"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
                       raw_response_head=b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n\r\n", raw_body=b"\x89PNG"))
    out.close()
    conf = tmp_path / "larbin.conf"
    conf.write_text(format_config(config))
    return config, str(conf)


@pytest.mark.parametrize("mode", ["mirror", "warc"])
def test_analyze_runs_meta_over_the_saved_html_pages(tmp_path, mode, capsys):
    config, conf = saved_crawl(tmp_path, mode)
    assert main(["analyze", "-c", conf, "--analyzer", "meta", "--workers", "1"]) == 0
    records = [json.loads(line) for line in open(tmp_path / "results" / "meta.jsonl")]
    assert {r["url"]: r["title"] for r in records} == {u: f"T{u[8]}" for u in PAGES}  # the PNG is not HTML
    assert "6 pages, 6 tasks done, 0 failed" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "state" / "analyze")


def test_analyze_retries_then_alerts_and_exits_1(tmp_path, capsys):
    script = tmp_path / "check.py"  # (an analyzer line is split on spaces)
    script.write_text("import sys\nsys.exit(0 if sys.argv[1].endswith(('p1', 'p2', 'p3', 'p4', 'p5')) else 4)\n")
    config, conf = saved_crawl(tmp_path, "mirror",
                               analyzers=(("check", "exec", sys.executable, str(script), "{url}"),))
    assert main(["analyze", "-c", conf]) == 1
    alerts = [json.loads(line) for line in open(tmp_path / "state" / ALERTS_LOG)]
    assert [(a["url"], a["tries"]) for a in alerts] == [("http://h0.test/p0", 2)]
    assert "exited with status 4" in alerts[0]["error"]
    assert len(open(tmp_path / "results" / "check.jsonl").readlines()) == 5
    assert "6 pages, 5 tasks done, 1 failed" in capsys.readouterr().err


def test_analyze_usage_errors_are_one_line(tmp_path, capsys):
    config, conf = saved_crawl(tmp_path, "mirror")
    assert main(["analyze", "-c", conf]) == 2
    assert "no analyzer configured" in capsys.readouterr().err
    assert main(["analyze", "-c", conf, "--analyzer", "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
