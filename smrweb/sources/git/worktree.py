"""Writing a restored file into a work tree the agent controls without following a symlink out of it,
and only when the file there is as git last wrote it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import uuid

from smrweb.sources.base import SourceError
from smrweb.sources.git.cli import Entry
from smrweb.sources.git.mirror import Repo


def _blob_id(data: bytes, like: str) -> str:
    """The id git gives these bytes as a blob, in the hash of `like` (sha1 or sha256 repositories)."""
    digest = hashlib.sha1 if len(like) == 40 else hashlib.sha256
    return digest(b"blob %d\x00" % len(data) + data).hexdigest()


class _Unsafe(Exception):
    """A part of the way to the path is a symlink, not a directory, or not a regular file."""


def _open_dir(worktree: str, parts: list[str], *, create: bool = False) -> int:
    """A descriptor of the directory `parts` below `worktree` (a real path), each step from / opened with
    O_NOFOLLOW relative to the last (so a symlink swapped in after a check, on the way to the work tree or
    inside it, is never followed); created below the work tree when `create`."""
    above = [part for part in worktree.split("/") if part]
    # O_PATH: a step needs only search permission (a 0711 home on the way to the work tree is fine).
    flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open("/", flags)
    try:
        for number, part in enumerate([*above, *parts]):
            try:
                step = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create or number < len(above):
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                step = os.open(part, flags, dir_fd=fd)
            except (NotADirectoryError, OSError) as exc:  # ELOOP: a symlink; ENOTDIR: a file
                raise _Unsafe(part) from exc
            os.close(fd)
            fd = step
        return fd
    except BaseException:
        os.close(fd)
        raise


def _read_worktree_file(worktree: str, path: str) -> bytes | None:
    """The file's bytes (None when it does not exist); _Unsafe when it is not a plain file reached
    through plain directories."""
    *dirs, name = path.split("/")
    try:
        dir_fd = _open_dir(worktree, dirs)
    except FileNotFoundError:
        return None
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _Unsafe(name) from exc
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise _Unsafe(name)
            return fh.read()
    finally:
        os.close(dir_fd)


def path_is_clean(repo: Repo, worktree: str, entry: Entry | None, path: str) -> bool:
    """No staged or unstaged change to `path` in the work tree against `entry` (the path at the branch
    head). Compared by blob ids computed here from the raw bytes and read from the index: `git diff`
    would run the agent's clean filters and fsmonitor. A symlink anywhere on the way is a change."""
    if os.path.realpath(worktree) != repo.own.work_tree:
        return False  # only ever the repository's own work tree
    try:
        data = _read_worktree_file(repo.own.work_tree, path)
    except (_Unsafe, FileNotFoundError):
        return False
    staged = _index_oid(repo, path)
    if entry is None:
        return staged is None and data is None
    return staged == entry.oid and data is not None and _blob_id(data, entry.oid) == entry.oid


def _index_oid(repo: Repo, path: str) -> str | None:
    """The blob id the work tree's index holds for `path` (stage 0), or None."""
    out = repo.agent("ls-files", "-s", "-z", "--", path).stdout
    for record in out.split(b"\x00"):
        meta, _, name = record.partition(b"\t")
        if name.decode("utf-8", "surrogateescape") == path and meta.split()[2:3] == [b"0"]:
            return meta.split()[1].decode()
    return None


DRIVER_KEYS = {
    "filter": ("clean", "smudge", "process"),
    "diff": ("textconv", "command"),
    "merge": ("driver",),
}


def _drivers_disabled(repo: Repo) -> tuple[str, ...]:
    """Overrides that empty every filter, diff and merge driver the repository's configuration defines.
    Attributes (which the agent writes) pick drivers by name, and writing an index re-reads racily clean
    files through their clean filter: with the drivers emptied on the command line, none can run."""
    out = repo.agent(
        "config", "-z", "--name-only", "--get-regexp", r"^(filter|diff|merge)\.", ok=(0, 1)
    ).stdout
    found = set()
    for name in out.decode("utf-8", "surrogateescape").split("\x00"):
        section, _, rest = name.partition(".")
        driver, _, _ = rest.rpartition(".")
        if section in DRIVER_KEYS and driver:
            found.add((section, driver))
    overrides = [
        f"{section}.{driver}.{key}=" for section, driver in sorted(found) for key in DRIVER_KEYS[section]
    ]
    return (
        *overrides,
        *(f"filter.{driver}.required=false" for section, driver in sorted(found) if section == "filter"),
    )


def write_to_worktree(repo: Repo, worktree: str, entry: Entry, path: str) -> bool:
    """Put the committed bytes of `path` in the work tree and its index (what `git checkout <new> -- path`
    did, without the agent's smudge filters, hooks or fsmonitor). Written beside it under a new name and
    moved into place within directories opened without following symlinks, so neither a symlink nor a
    hard link planted at the path or on the way (even after the check) makes smrweb write elsewhere.
    Only ever the repository's own work tree, checked again right before the write."""
    if not repo.own.work_tree or os.path.realpath(worktree) != repo.own.work_tree:
        return False
    try:
        repo.verify()
    except SourceError:
        return False  # the commit is published; the work tree is not written (the note says how)
    data = repo.agent("cat-file", "blob", entry.oid).stdout  # raw bytes: cat-file applies no filters
    *dirs, name = path.split("/")
    try:
        dir_fd = _open_dir(repo.own.work_tree, dirs, create=True)
    except (_Unsafe, FileNotFoundError):
        return False
    try:
        spare = f".{name}.smrweb-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                os.fchmod(fh.fileno(), 0o755 if entry.mode == "100755" else 0o644)
            os.replace(
                spare, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd
            )  # a link at `name` is replaced, not followed
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(spare, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)
    repo.agent(
        "update-index",
        "--add",
        "--cacheinfo",
        f"{entry.mode},{entry.oid},{path}",
        config=_drivers_disabled(repo),
    )
    return True
