"""The records a crawl keeps for its recrawl (larbin_py.records): the token, the links log, the cut.

Sans-I/O where it can be (the token's codec, the ETag's check), the files in
a temporary folder otherwise: a hostile ETag is never kept to be sent back,
a damaged links entry is told (CRC), a torn record line is not read as one,
and a cut to a commit's position leaves exactly what that commit wrote.
"""

from __future__ import annotations

import os

from larbin_py.frontier.store import LINK, SEED, UrlRecord, decode_record
from larbin_py.records import (
    NO_LINKS, OldRecords, RecordsWriter, Visit, clean_etag, cut_records, decode_token, encode_token, links_path,
    records_path)


def test_the_token_round_trips_and_an_etag_with_commas_stays_whole():
    v = Visit(1700000000, 1690000000, 1600000000, "3P3SINYXPTEZ", 1234, 'W/"a,b,c"', "text/html")
    token = encode_token(v)
    assert " " not in token and decode_token(token) == v
    none = Visit(5, 4, None, "", None, "", "")
    assert decode_token(encode_token(none)) == none
    assert decode_token(encode_token(Visit(5, 4, links=NO_LINKS))).links == NO_LINKS
    for bad in ("", "1,2,3", "x,2,,d,,,", "1,2,notanumber,d,,,"):
        assert decode_token(bad) is None, bad


def test_a_decoded_token_is_a_new_visit_each_time_and_dates_are_written_as_http_wants_them():
    from email.utils import formatdate

    from larbin_py.recrawl import http_date

    token = encode_token(Visit(1700000000, 1690000000, 784111777, "ab" * 20, 12, '"v1"', "text/html"))
    a = decode_token(token)
    a.checked, a.links = 1, None  # (a caller's changes: on_unchanged sets them)
    b = decode_token(token)  # read again (from the cache): as the token says, not as ``a`` was left
    assert b.checked == 1700000000 and b.links == 12 and b is not a
    for seconds in (0, 784111777, 951782400, 1700000000, 4102444799):  # 2000-02-29 among them
        assert http_date(seconds) == formatdate(seconds, usegmt=True).encode()


def test_last_modified_is_read_as_email_utils_reads_it_whatever_the_value():
    """The IMF-fixdate fast path gives mktime_tz(parsedate_tz(...))'s seconds for every date
    (leap days, a day past the month's end, second 60, years from 1000 to 9999), and any
    other form or a hostile value goes the slow way with the same answer."""
    import random
    from email.utils import formatdate

    from larbin_py.recrawl import date_by_email, last_modified_of

    rnd = random.Random(33)
    values = [formatdate(rnd.randrange(-30_000_000_000, 250_000_000_000), usegmt=True).encode() for _ in range(3000)]
    values += [b"Thu, 29 Feb 2024 12:00:00 GMT", b"Fri, 31 Feb 2023 00:00:00 GMT", b"Sat, 31 Dec 2016 23:59:60 GMT",
               b"Mon, 00 Jan 2001 29:59:69 GMT", b"Sun, 06 Nov 0094 08:49:37 GMT", b"Sun, 06 Nov 1000 08:49:37 GMT",
               b"  Sun, 06 Nov 1994 08:49:37 GMT  ", b"Sunday, 06-Nov-94 08:49:37 GMT", b"Sun Nov  6 08:49:37 1994",
               b"Sun, 06 Nov 1994 08:49:37 +0200", b"Sun, 06 Nov 1994 08:49:37 gmt", b"Sun, 06 Nov 1994 08:49 GMT",
               b"", b"garbage", b"Sun, 99 Nov 1994 08:49:37 GMT", b"\xff\xfe, 06 Nov 1994", b"Sun, 06 Nov 99999 08:49:37 GMT"]
    for value in values:
        assert last_modified_of([(b"etag", b'"x"'), (b"last-modified", value)]) == date_by_email(value), value
    assert last_modified_of([(b"etag", b'"x"')]) is None
    assert last_modified_of([(b"last-modified", b"Sun, 06 Nov 1994 08:49:37 GMT")]) == 784111777  # RFC 9110's example


def test_an_unchanged_page_keeps_the_validators_a_full_read_of_its_answer_would_give():
    """revalidated() (the 304's shortcut: the bytes sent back recognized as they are) against
    what etag_of and last_modified_of say of the whole answer, on answers that send back
    what was asked, send other values, hostile ones, none, or a name twice."""
    import random

    from larbin_py.recrawl import etag_of, http_date, last_modified_of, revalidated

    rnd = random.Random(37)
    etags = ['"v1"', 'W/"v1"', '"v2"', "", ' "v1" ', '"a\r\nX: 1"', "v1", '"' + "x" * 300 + '"']
    dates = [0, 784111777, 1700000000, 253402300799, -1, None]
    for _ in range(2000):
        etag = rnd.choice(['"v1"', 'W/"v1"', ""])
        date = rnd.choice([0, 784111777, 1700000000, 253402300799, 253402300800, -1, None])
        headers = [(b"content-length", b"0")]
        for _ in range(rnd.randrange(4)):
            if rnd.random() < 0.5:
                headers.append((b"etag", rnd.choice(etags + [etag]).encode("latin-1")))
            else:
                value = rnd.choice(dates + [date])
                raw = rnd.choice([b"garbage", b"Sun, 06 Nov 1994 08:49:37 +0200", b"  Sun, 06 Nov 1994 08:49:37 GMT"]
                                 if value is None else [http_date(value)])
                headers.append((b"last-modified", raw))
        rnd.shuffle(headers)
        want = (etag_of(headers) or etag, last_modified_of(headers) or date)
        assert revalidated(headers, etag, date) == want, (headers, etag, date)
    assert revalidated([(b"etag", b'"v1"'), (b"last-modified", http_date(7))], '"v1"', 7) == ('"v1"', 7)
    assert revalidated([(b"etag", b'"v2"'), (b"last-modified", http_date(9))], '"v1"', 7) == ('"v2"', 9)


def test_a_hostile_etag_is_never_kept_to_be_sent_back():
    assert clean_etag(' "abc" ') == '"abc"' and clean_etag('W/"x"') == 'W/"x"'
    for bad in ('"a\r\nX-Injected: 1"', '"a b"', "abc", '"' + "x" * 300 + '"', '"caf\u00e9"', '"a"b"', ""):
        assert clean_etag(bad) == "", bad
    # a token read back from disk is checked again (a record written by hand, a damaged one)
    assert decode_token('1,2,,d,,text/html,"a\nb"').etag == ""
    assert decode_token("1,2,,d,,text/html;evil,").content_type == ""


def _flip(path, offset: int) -> None:
    """Damage one byte of ``path`` at ``offset``."""
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def _write(tmp_path, ops):
    w = RecordsWriter(str(tmp_path), 1)
    w.apply(ops)
    pos = w.position()
    w.close()
    return pos


def test_links_come_back_with_their_embeds_and_a_damaged_entry_is_told(tmp_path):
    recs = [UrlRecord(f"http://a.test/{i}", 3, 0, 0, found=LINK, ref="http://a.test/") for i in range(3)]
    links = ["http://a.test/x", "http://a.test/img.png", "http://b.test/\u00e9"]
    pos = _write(tmp_path, [(recs[0], Visit(1, 1, digest="D0"), (links, frozenset(["http://a.test/img.png"]))),
                            (recs[1], Visit(1, 1, digest="D1", links=NO_LINKS), None),
                            (recs[2], Visit(1, 1, digest="D2"), ["http://a.test/only"])])
    old = OldRecords(str(tmp_path), 1, pos)
    batch, end = old.batch(0)
    assert end == pos[0] and [r.url for r in batch] == [r.url for r in recs]
    visits = [decode_token(r.prev) for r in batch]
    assert [v.digest for v in visits] == ["D0", "D1", "D2"] and batch[0].ref == "http://a.test/"
    first = old.links(visits[0].links)
    assert first[:2] == (links, frozenset(["http://a.test/img.png"]))
    assert first[2] == old.raw(visits[0].links)  # the whole entry, to copy as it is
    assert old.links(visits[1].links) == ([], frozenset(), None)
    assert old.links(visits[2].links)[:2] == (["http://a.test/only"], frozenset())
    old.close()
    # one byte of the second entry's payload flipped: that entry is damaged, not the first
    _flip(links_path(str(tmp_path), 1), visits[2].links + 10)
    old = OldRecords(str(tmp_path), 1, pos)
    assert old.links(visits[2].links) is None and old.damaged == 1
    assert old.links(visits[0].links)[0] == links
    old.close()


def test_an_entry_read_is_copied_as_it_is_and_a_long_one_comes_back_whole(tmp_path):
    """A recrawl's unchanged page: the entry read for its links is the one written to the
    next generation's log (bytes), with no second read; an entry longer than one read ahead
    (thousands of links that compress badly) is read whole, and its damage still told."""
    import random

    rnd = random.Random(7)
    many = [f"http://a.test/{rnd.getrandbits(128):032x}" for _ in range(2000)]
    recs = [UrlRecord(f"http://a.test/{i}", 1, 0, 0, found=LINK) for i in range(2)]
    pos = _write(tmp_path, [(recs[0], Visit(1, 1, digest="D0"), many),
                            (recs[1], Visit(1, 1, digest="D1"), ["http://a.test/x"])])
    old = OldRecords(str(tmp_path), 1, pos)
    batch, _end = old.batch(0)
    visits = [decode_token(r.prev) for r in batch]
    big = old.links(visits[0].links)
    assert big[0] == many and len(big[2]) > 4096  # longer than the first read
    small = old.links(visits[1].links)
    w = RecordsWriter(str(tmp_path), 2, old)
    w.apply([(batch[0], visits[0], big[2]), (batch[1], visits[1], small[2])])
    pos2 = w.position()
    w.close()
    old.close()
    new = OldRecords(str(tmp_path), 2, pos2)
    batch2, _end = new.batch(0)
    visits2 = [decode_token(r.prev) for r in batch2]
    assert new.links(visits2[0].links)[0] == many and new.links(visits2[1].links)[0] == ["http://a.test/x"]
    new.close()
    _flip(links_path(str(tmp_path), 2), visits2[0].links + 5000)  # a byte beyond the first read
    new = OldRecords(str(tmp_path), 2, pos2)
    assert new.links(visits2[0].links) is None and new.damaged == 1
    new.close()


def test_beyond_the_commits_length_nothing_is_read_and_the_cut_leaves_the_commit(tmp_path):
    rec = UrlRecord("http://a.test/", 1, 0, 0, found=SEED)
    first = _write(tmp_path, [(rec, Visit(1, 1, digest="A"), ["http://a.test/1"])])
    w = RecordsWriter(str(tmp_path), 1)  # a later commit, appended, then a crash before it was committed
    w.apply([(UrlRecord("http://a.test/2", 1, 0, 0, found=LINK, ref="http://a.test/"), Visit(2, 2, digest="B"),
              ["http://a.test/3"])])
    w.close()
    with open(records_path(str(tmp_path), 1), "ab") as f:
        f.write(b"a torn line without its end")
    old = OldRecords(str(tmp_path), 1, first)  # the first commit's lengths: only its record
    batch, _ = old.batch(0)
    assert [r.url for r in batch] == ["http://a.test/"]
    old.close()
    cut_records(str(tmp_path), 1, first)
    assert [os.path.getsize(records_path(str(tmp_path), 1)), os.path.getsize(links_path(str(tmp_path), 1))] == first
    with open(records_path(str(tmp_path), 1), "rb") as f:
        assert decode_record(f.read()).url == "http://a.test/"


class _State:
    """The crawl state's ``record`` alone: the ops a commit would write."""

    def __init__(self) -> None:
        self.ops = []

    def record(self, op) -> None:
        self.ops.append(op)


class _Admission:
    def __init__(self) -> None:
        self.offered = []

    def offer(self, page_url, depth, links, **kw) -> int:
        self.offered.append((page_url, tuple(links)))
        return len(links)


def test_a_page_whose_links_the_analysis_processes_keep_is_recorded_all_the_same():
    """Records of pages handed to the analysis processes (larbin_py.recrawl): links that
    come back are stored, none (meta nofollow) says so, and those that never come back
    (a failed analysis, tasks left to --reload) are recorded without links at the end."""
    from types import SimpleNamespace

    from larbin_py.config import parse_config_text
    from larbin_py.recrawl import Recrawl

    rc = Recrawl(parse_config_text("", require_start_urls=False), wall=lambda: 1_700_000_000)
    state, adm = _State(), _Admission()
    rc.attach(SimpleNamespace(admission=adm), state, None, None)
    res = SimpleNamespace(headers=[(b"etag", b'"v1"')], content_type="text/html")
    recs = {name: UrlRecord(f"http://a.test/{name}", 2, 0, found=LINK, ref="http://a.test/")
            for name in ("links", "nofollow", "failed")}
    for rec in recs.values():
        assert rc.fetched(rec, res, "sha1:ABC", rc.pending()) == ""  # not a recrawl: no verdict
    assert state.ops == []  # waiting for their links
    rc.offer("http://a.test/links", 2, ["http://a.test/x"], embeds=frozenset())
    rc.offer("http://a.test/nofollow", 2, ())
    assert adm.offered == [("http://a.test/links", ("http://a.test/x",)), ("http://a.test/nofollow", ())]
    assert rc.settle() == 1 and rc.settle() == 0
    by_url = {op[0].url: op for op in state.ops}
    assert sorted(by_url) == sorted(r.url for r in recs.values())
    assert by_url["http://a.test/links"][2] == ["http://a.test/x"]
    assert by_url["http://a.test/nofollow"][1].links == NO_LINKS and by_url["http://a.test/nofollow"][2] is None
    failed = by_url["http://a.test/failed"][1]
    assert failed.links is None and failed.etag == '"v1"' and failed.digest == "ABC"  # asked plainly next time


async def test_the_stored_reads_of_requests_started_together_are_one_writer_job(tmp_path, monkeypatch):
    """A recrawl reads what it stored of a page while the page is asked (Recrawl.prefetch):
    the reads asked in one loop turn are one job on the writer thread (a hand-over to the
    writer and back for each page cost a fifth of a recrawl's CPU), each page gets its own
    links; a read that fails fails its own page only, one nobody looks at (the page
    changed) warns of nothing, and a closed writer fails the reads, not the loop."""
    import asyncio
    import gc

    import pytest

    from larbin_py.config import parse_config_text
    from larbin_py.output.writer import WriterThread
    from larbin_py.recrawl import Recrawl

    recs = [UrlRecord(f"http://a.test/{i}", 1, 0, 0, found=LINK) for i in range(3)]
    pos = _write(tmp_path, [(rec, Visit(1, 1, digest=f"D{i}"), [f"http://a.test/{i}/x"])
                            for i, rec in enumerate(recs)])
    old = OldRecords(str(tmp_path), 1, pos)
    batch, _end = old.batch(0)
    loop = asyncio.get_running_loop()
    problems = []
    loop.set_exception_handler(lambda _loop, context: problems.append(context))
    writer = WriterThread(loop)
    rc = Recrawl(parse_config_text("", require_start_urls=False).replace(output_mode="stats"), old=old)
    rc.start(writer, None)
    try:
        got = await asyncio.gather(*(rc.prefetch(rec) for rec in batch))
        assert (rc.read_jobs, rc.reads) == (1, 3)
        assert [s.links for s in got] == [[f"http://a.test/{i}/x"] for i in range(3)]
        assert all(s.present and s.entry for s in got)
        assert (await rc.prefetch(batch[1])).links == ["http://a.test/1/x"]
        assert (rc.read_jobs, rc.reads) == (2, 4)  # a later turn: a job of its own

        real = old.links
        bad = decode_token(batch[0].prev).links

        def links(offset, source=""):
            if offset == bad:
                raise OSError(5, "Input/output error")
            return real(offset, source)

        monkeypatch.setattr(old, "links", links)
        failing, fine, unread = rc.prefetch(batch[0]), rc.prefetch(batch[2]), rc.prefetch(batch[0])
        with pytest.raises(OSError):
            await failing
        assert (await fine).links == ["http://a.test/2/x"] and rc.read_jobs == 3
        await asyncio.sleep(0)
        assert unread.done()
        del unread
        gc.collect()
    finally:
        await writer.aclose()
    closed = rc.prefetch(batch[1])
    with pytest.raises(RuntimeError, match="closed"):
        await closed
    old.close()
    assert problems == []
