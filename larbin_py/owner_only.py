"""Owner-only state: stateDir is 0700 and what the crawl writes in it 0600 / 0700.

stateDir holds what other users of the machine must not read: the session
cookies of the crawled sites (``cookies.json``), the Redis password the
workers need (``launcher.conf``), every URL the crawl met (the stores, the
journal, the analysis spool with the pages' bodies).  Two layers keep it
private, whatever the process umask:

1. **The folder.**  :func:`make_private_dir` creates stateDir with mode
   0700, or takes group and other bits off an existing one that this user
   owns (``chmod go-rwx``): nobody else can then open anything inside,
   whatever the files' own modes (those a version before this one left at
   0644 included).  It is called once the stateDir lock is held
   (larbin_py.statelock), so a process refused by the lock changes nothing.
   A sticky folder (``/tmp`` given as stateDir) or one owned by another user
   is not changed; :func:`make_private_dir` says so in its return value
   and the caller prints one line.
2. **Each file and folder.**  Every writer of stateDir opens its files with
   :func:`opener` (``os.open(..., 0o600)``, or ``open(..., opener=opener)``;
   a file found with group or other bits loses them) and creates its
   folders with mode 0700 (:func:`makedirs`), so a copy of stateDir
   (``cp -r``, ``rsync``, a backup) stays private too.  The umask can only
   take bits away, so 0600 stays 0600 under 022 and 077 alike.

Why not a restrictive umask for the whole process: the umask is per
process, and the same process writes saveDir, whose pages keep today's
modes (0644 files, 0755 folders under a 022 umask) for whoever serves or
reads them.  A private redis-server (``redisUrl auto``) is a separate
process: it is started with umask 077 (its AOF, its log).  Chromium's
profile (``stateDir/browser``) is written by Chromium; the 0700 folder
keeps it private.  The one exception: when Chromium runs as another user
(``dynamicUser``, the crawler being root), that user must pass through
stateDir to its profile, so stateDir gets the execute bit for others
(0711, larbin_py.net.browser.let_pass): a name can be reached, the folder
not listed, and every file in it stays 0600, every other folder 0700.

Files written by a temporary file and a rename (the checkpoint, the cookie
jar, the sieve's run, launcher.conf) take the temporary file's mode: 0600.
A file of an older stateDir that no writer opens again keeps its mode;
layer 1 covers it.
"""

from __future__ import annotations

import os
import stat

__all__ = ["FILE_MODE", "DIR_MODE", "opener", "makedirs", "make_private_dir"]

#: The mode of every file written in stateDir.
FILE_MODE = 0o600
#: The mode of stateDir and of every folder in it.
DIR_MODE = 0o700


def opener(path: str, flags: int) -> int:
    """``os.open(path, flags, 0o600)`` with close-on-exec; also ``open(..., opener=opener)``.

    A file that existed with group or other bits (left by an older version,
    or a temporary file left by a crash) loses them here (``fchmod``), so
    that what is written into it, or renamed from it, is private too; a file
    of another user's is left as it is (the 0700 folder covers it).
    """
    fd = os.open(path, flags | os.O_CLOEXEC, FILE_MODE)
    try:
        mode = os.fstat(fd).st_mode
        if mode & 0o077:
            os.fchmod(fd, stat.S_IMODE(mode) & ~0o077)
    except PermissionError:
        pass
    except BaseException:
        os.close(fd)
        raise
    return fd


def makedirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)`` with every folder it creates 0700.

    (``os.makedirs``'s ``mode`` applies to the last folder only: the ones
    between, ``frontier/`` of ``frontier/main``, would get 0755.)
    """
    if os.path.isdir(path):
        return
    parent = os.path.dirname(os.path.normpath(path))
    if parent and parent != path and not os.path.isdir(parent):
        makedirs(parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def make_private_dir(path: str) -> str | None:
    """Create ``path`` 0700, or make an existing one owner-only (see the module).

    Returns None when ``path`` is private now, else a sentence saying why it
    was left as it is (a sticky folder, another user's); raises OSError when
    it cannot be created.  Folders above ``path`` that it creates get the
    usual modes (they are not the crawl's).
    """
    try:
        os.makedirs(path, mode=DIR_MODE)
        return None
    except FileExistsError:
        pass
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(20, "not a folder", path)
    if not st.st_mode & 0o077:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if st.st_mode & stat.S_ISVTX:
        return f"{path} is a shared folder (mode {mode:04o}, sticky): its files are 0600, the folder is left as it is"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to another user (mode {mode:04o}): its files are 0600, the folder is left as it is"
    os.chmod(path, mode & ~0o077)
    return None
