"""Chromium's singleton directory in /tmp never outlives the browser (larbin_py.net.browser).

Chromium's ProcessSingleton makes ``/tmp/org.chromium.Chromium.XXXXXX``
(its socket and a cookie link) and links the profile's ``SingletonSocket``
to it; a killed Chromium leaves it.  The first tests run real Chromium (as
``nobody`` here, the tests running as root) through every path that ends a
browser; they check only the directories their own browser's link named, so
browsers of tests running beside them do not matter.  The others check the
validation on directories of their own (a stand-in temp directory, never
/tmp's real entries): a link written by a hostile browser user must never
make the crawler remove anything but that directory.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
from pathlib import Path

import pytest

from larbin_py.net.browser import (Browser, browser_env, browser_tmpdir, remove_singleton_dir,
                                   singleton_dir_name)

from conftest import require_service

NAME = "org.chromium.Chromium.AbC123"


def singleton_dir(browser: Browser) -> str:
    """The directory the running browser's profile link names (checked to be in /tmp, and there)."""
    target = os.readlink(os.path.join(browser.profile, "SingletonSocket"))
    directory = os.path.dirname(target)
    assert os.path.dirname(directory) == "/tmp" and os.path.basename(directory).startswith("org.chromium.Chromium.")
    assert os.path.isdir(directory) and os.path.exists(target)
    return directory


def test_the_browsers_temp_directory_is_tmp_as_browser_env_leaves_it():
    env = browser_env("/state/browser", {"TMPDIR": "/crawler/tmp", "PATH": "/bin"})
    assert "TMPDIR" not in env and browser_tmpdir(env) == "/tmp"
    assert browser_tmpdir({"TMPDIR": "/other/"}) == "/other"


@pytest.mark.async_timeout(60)
async def test_a_killed_browser_and_a_hung_one_leave_no_directory_in_tmp(work_dir):
    require_service("chromium", "apt-get install chromium")
    browser = Browser(str(work_dir))
    try:
        await browser.start()
        first = singleton_dir(browser)
        browser.kill()  # a crash: the next connection() reaps it and starts another
        await browser.conn.closed
        await browser.connection()
        assert browser.crashes == 1 and browser.starts == 2
        assert not os.path.lexists(first)
        second = singleton_dir(browser)
        assert second != first
        os.kill(browser.pid, signal.SIGSTOP)  # Browser.close goes unanswered: close() kills it
    finally:
        await browser.close()
    assert not os.path.lexists(second) and not os.path.exists(browser.profile)

    browser = Browser(str(work_dir))  # a plain start and close (Chromium removes its own then)
    try:
        await browser.start()
        third = singleton_dir(browser)
    finally:
        await browser.close()
    assert not os.path.lexists(third)


@pytest.mark.async_timeout(60)
async def test_the_next_start_removes_the_directory_of_a_crawler_killed_with_sigkill(work_dir):
    require_service("chromium", "apt-get install chromium")
    killed = Browser(str(work_dir))
    await killed.start()
    left = singleton_dir(killed)
    os.killpg(killed.proc.pid, signal.SIGKILL)  # the crawler and its browser gone, nothing reaped
    await killed.proc.wait()
    await killed.conn.close()
    killed._close_log()
    assert os.path.isdir(left)  # what Chromium leaves
    browser = Browser(str(work_dir))
    try:
        await browser.start()
        assert not os.path.lexists(left)
        mine = singleton_dir(browser)
    finally:
        await browser.close()
    assert not os.path.lexists(mine)


# ---- the validation, on directories of the test's own ----------------------------------------


@pytest.fixture
def fake(tmp_path):
    """A stand-in temp directory and a profile (its SingletonSocket link made by each test)."""
    tmpdir = tmp_path / "tmp"
    profile = tmp_path / "profile"
    tmpdir.mkdir()
    profile.mkdir()
    return tmpdir, profile


def chromium_like(directory: Path, uid: int | None = None) -> Path:
    """A directory holding what Chromium puts there: its socket and the cookie link."""
    directory.mkdir()
    os.mknod(directory / "SingletonSocket", stat.S_IFSOCK | 0o755)
    os.symlink("1234567890", directory / "SingletonCookie")
    if uid is not None:
        for path in (directory / "SingletonSocket", directory / "SingletonCookie", directory):
            os.chown(path, uid, -1, follow_symlinks=False)
    return directory


def link(profile: Path, target) -> None:
    os.symlink(str(target), profile / "SingletonSocket")


def intact(directory: Path, extra: tuple[str, ...] = ()) -> bool:
    return sorted(os.listdir(directory)) == sorted(("SingletonCookie", "SingletonSocket", *extra))


def test_a_directory_of_chromiums_own_is_emptied_and_removed(fake):
    tmpdir, profile = fake
    chromium_like(tmpdir / NAME)
    link(profile, tmpdir / NAME / "SingletonSocket")
    assert remove_singleton_dir(str(profile), os.geteuid(), str(tmpdir)) is True
    assert os.listdir(tmpdir) == []
    assert remove_singleton_dir(str(profile), os.geteuid(), str(tmpdir)) is False  # gone: nothing to do
    assert remove_singleton_dir(str(tmpdir / "no-profile"), os.geteuid(), str(tmpdir)) is False


def test_the_link_names_exactly_one_singleton_directory_of_the_temp_directory():
    ok = "/tmp/org.chromium.Chromium.aZ09xY/SingletonSocket"
    assert singleton_dir_name(ok, "/tmp") == "org.chromium.Chromium.aZ09xY"
    assert singleton_dir_name("/tmp//org.chromium.Chromium.aZ09xY/SingletonSocket", "/tmp/") is not None
    for bad in ("/tmp/org.chromium.Chromium.aZ09x/SingletonSocket",     # five characters
                "/tmp/org.chromium.Chromium.aZ09xYz/SingletonSocket",   # seven
                "/tmp/org.chromium.Chromium.aZ-9xY/SingletonSocket",    # not a letter or digit
                "/tmp/.org.chromium.Chromium.aZ09xY/SingletonSocket",
                "/tmp/org.chromium.Chromium.aZ09xY\n/SingletonSocket",
                "/tmp/org.chromium.Chromium.aZ09xY/SingletonCookie",    # not the socket
                "/tmp/org.chromium.Chromium.aZ09xY/x/SingletonSocket",
                "/tmp/org.chromium.Chromium.aZ09xY/../etc/SingletonSocket",
                "/tmp/../org.chromium.Chromium.aZ09xY/SingletonSocket",
                "/var/tmp/org.chromium.Chromium.aZ09xY/SingletonSocket",  # another folder
                "/tmp/sub/org.chromium.Chromium.aZ09xY/SingletonSocket",
                "tmp/org.chromium.Chromium.aZ09xY/SingletonSocket",       # relative
                "org.chromium.Chromium.aZ09xY/SingletonSocket", ""):
        assert singleton_dir_name(bad, "/tmp") is None, bad


def test_a_link_to_anything_but_a_real_directory_removes_nothing(fake, tmp_path):
    tmpdir, profile = fake
    link(profile, tmpdir / NAME / "SingletonSocket")
    victim = chromium_like(tmp_path / "victim")  # the names Chromium's directory holds, elsewhere
    os.symlink(victim, tmpdir / NAME)
    assert remove_singleton_dir(str(profile), os.geteuid(), str(tmpdir)) is False
    assert intact(victim) and os.path.islink(tmpdir / NAME)
    os.unlink(tmpdir / NAME)
    os.mkfifo(tmpdir / NAME)  # opened for reading, a FIFO would wait for a writer
    assert remove_singleton_dir(str(profile), os.geteuid(), str(tmpdir)) is False
    assert stat.S_ISFIFO(os.lstat(tmpdir / NAME).st_mode)


def test_a_link_to_a_directory_of_another_name_or_outside_the_temp_directory_removes_nothing(fake, tmp_path):
    tmpdir, profile = fake
    for directory in (tmpdir / "org.chromium.Chromium.AbC12",  # the right place, a wrong name
                      tmpdir / "victim",
                      tmp_path / NAME):                      # the right name, elsewhere
        chromium_like(directory)
        if os.path.lexists(profile / "SingletonSocket"):
            os.unlink(profile / "SingletonSocket")
        link(profile, directory / "SingletonSocket")
        assert remove_singleton_dir(str(profile), os.geteuid(), str(tmpdir)) is False
        assert intact(directory), directory


def test_a_directory_of_another_uid_removes_nothing(fake):
    tmpdir, profile = fake
    link(profile, tmpdir / NAME / "SingletonSocket")
    if os.geteuid() == 0:  # the crawler is root: nobody's directory is not root's browser's, nor the reverse
        nobody = pwd.getpwnam("nobody").pw_uid
        directory = chromium_like(tmpdir / NAME, uid=nobody)
        for claimed in (0, nobody + 1):
            assert remove_singleton_dir(str(profile), claimed, str(tmpdir)) is False
            assert intact(directory)
        shutil.rmtree(directory)
    directory = chromium_like(tmpdir / NAME)  # root's (or the test user's), the browser being nobody
    browser_uid = pwd.getpwnam("nobody").pw_uid if os.geteuid() == 0 else os.geteuid() + 1
    assert remove_singleton_dir(str(profile), browser_uid, str(tmpdir)) is False
    assert intact(directory)


def test_a_directory_holding_anything_else_is_left_whole(fake):
    tmpdir, profile = fake
    directory = chromium_like(tmpdir / NAME)
    (directory / "precious").write_text("data")
    link(profile, directory / "SingletonSocket")
    assert remove_singleton_dir(str(profile), os.geteuid(), str(tmpdir)) is False
    assert intact(directory, ("precious",)) and (directory / "precious").read_text() == "data"
