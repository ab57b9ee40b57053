"""A cgroup per validator sandbox (red-team finding N4): one memory limit for everything a validator
runs and keeps in its tmpfs, one process limit it cannot take from another validator, and a kill of the
whole group. One small interface over cgroup v2 (a delegated subtree: `memory.max`, `pids.max`,
`memory.oom.group`, `cgroup.kill`) and cgroup v1 (separate `memory` and `pids` hierarchies), detected at
run time from /proc/self/mountinfo.

Pure module: no Django. Every failure to set things up is a `CgroupError` whose message says what is
missing; the sandbox turns it into "cannot verify safely: …".
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Cgroup", "CgroupError", "Hierarchy", "detect"]

GROUP = "smrweb-sandbox"  # created under the parent cgroup; one child per sandbox slot
_CONTROLLERS = ("memory", "pids")
_KILL_WAIT_S = 10.0


class CgroupError(Exception):
    """Why validators cannot get a cgroup of their own here."""


@dataclass(frozen=True)
class Cgroup:
    """One sandbox's cgroup: a single directory (v2) or one per hierarchy (v1: memory, pids)."""

    version: int
    memory: Path
    pids: Path

    @property
    def dirs(self) -> tuple[Path, ...]:
        return (self.memory,) if self.memory == self.pids else (self.memory, self.pids)

    def procs_files(self) -> list[str]:
        """What a process writes its pid to, to join this cgroup (in every hierarchy)."""
        return [str(path / "cgroup.procs") for path in self.dirs]

    def exists(self) -> bool:
        return any(path.is_dir() for path in self.dirs)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this cgroup for going over its memory limit."""
        if self.version == 2:
            events = _keyed(self.memory / "memory.events")
            return events.get("oom_kill", 0) > 0 or events.get("oom_group_kill", 0) > 0
        return _keyed(self.memory / "memory.oom_control").get("oom_kill", 0) > 0

    def pids_in(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs:
            try:
                found.update(int(line) for line in (path / "cgroup.procs").read_text().split())
            except FileNotFoundError:
                pass
        return sorted(found)

    def kill(self) -> None:
        """SIGKILL every process in the group, and wait until it is empty (a fork bomb refills it until
        every member is gone; the pids limit keeps that finite)."""
        if self.version == 2 and (self.memory / "cgroup.kill").exists():
            _write(self.memory / "cgroup.kill", "1")
        deadline = time.monotonic() + _KILL_WAIT_S
        while pids := self.pids_in():
            for pid in pids:
                _kill_member(pid, self)
            if time.monotonic() > deadline:
                raise CgroupError(f"processes {pids[:10]} of {self.memory} survived SIGKILL")
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left and remove the group's directories."""
        if not self.exists():
            return
        self.kill()
        deadline = time.monotonic() + _KILL_WAIT_S
        for path in self.dirs:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:  # EBUSY while the last member is still being torn down
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise CgroupError(f"could not remove cgroup {path}: {exc.strerror}") from exc
                    time.sleep(0.02)


def _kill_member(pid: int, group: Cgroup) -> None:
    """SIGKILL `pid` only while it is still in `group`: a pidfd pins the process, so a pid that was
    reused by a stranger after its owner died is not hit."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if pid in group.pids_in():
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Hierarchy:
    """Where this host's sandbox cgroups live: `<parent>/smrweb-sandbox/<name>` (one parent on v2, one
    per hierarchy on v1)."""

    version: int
    memory_base: Path
    pids_base: Path

    def group(self, name: str) -> Cgroup:
        return Cgroup(self.version, self.memory_base / name, self.pids_base / name)

    def create(self, name: str, *, memory_bytes: int, processes: int) -> Cgroup:
        """A fresh cgroup `name` with these limits; whatever a previous holder left under that name is
        killed and removed first."""
        group = self.group(name)
        group.remove()
        try:
            for path in group.dirs:
                path.mkdir()
            if self.version == 2:
                _write(group.memory / "memory.max", str(memory_bytes))
                _write_if_present(group.memory / "memory.swap.max", "0")
                _write(group.memory / "memory.oom.group", "1")  # the kernel kills the whole sandbox
            else:
                _write(group.memory / "memory.limit_in_bytes", str(memory_bytes))
                _write_if_present(group.memory / "memory.memsw.limit_in_bytes", str(memory_bytes))
            _write(group.pids / "pids.max", str(processes))
        except OSError as exc:
            try:
                group.remove()
            except CgroupError:
                pass
            raise CgroupError(f"could not set up cgroup {group.memory}: {exc.strerror or exc}") from exc
        return group


def detect(root: str, parent: str = "") -> Hierarchy:
    """The sandbox cgroups under the cgroup filesystems mounted at `root` (usually /sys/fs/cgroup):
    cgroup v2 if `root` is a cgroup2 mount, else cgroup v1 `memory` and `pids` hierarchies under it.
    `parent`: the cgroup to create `smrweb-sandbox` in (absolute, or relative to the v2 mount); by default
    this process's own. Creates and enables what is needed; raises CgroupError saying what is missing."""
    mounts = _cgroup_mounts()
    root = os.path.normpath(root)
    if root in mounts and mounts[root][0] == "cgroup2":
        base = _own_dir(root, mounts[root][1], "", parent) / GROUP
        _enable_v2(base)
        return Hierarchy(2, base, base)
    bases = {}
    for controller in _CONTROLLERS:
        point = os.path.join(root, controller)
        fstype, mount_root, options = mounts.get(point, ("", "", ()))
        if fstype != "cgroup" or controller not in options:
            raise CgroupError(
                f"no cgroup v2 mounted at {root}, and no cgroup v1 `{controller}` hierarchy at {point} "
                "(the sandbox needs the memory and pids controllers)"
            )
        bases[controller] = _own_dir(point, mount_root, controller, parent) / GROUP
        try:
            bases[controller].mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {bases[controller]}: {exc.strerror}") from exc
    return Hierarchy(1, bases["memory"], bases["pids"])


def _enable_v2(base: Path) -> None:
    parent = base.parent
    available = _read(parent / "cgroup.controllers").split()
    missing = [name for name in _CONTROLLERS if name not in available]
    if missing:
        raise CgroupError(
            f"the cgroup v2 parent {parent} does not offer the {' and '.join(missing)} controller"
            f"{'s' if len(missing) > 1 else ''} (delegate them to the worker, e.g. systemd Delegate=yes)"
        )
    try:
        enabled = _read(parent / "cgroup.subtree_control").split()
        if not all(name in enabled for name in _CONTROLLERS):
            _write(parent / "cgroup.subtree_control", " ".join(f"+{name}" for name in _CONTROLLERS))
        base.mkdir(exist_ok=True)
        _write(base / "cgroup.subtree_control", " ".join(f"+{name}" for name in _CONTROLLERS))
    except OSError as exc:
        hint = (
            " (a cgroup v2 parent must hold no processes of its own: set SMRWEB_SANDBOX_CGROUP to a "
            "delegated cgroup the worker does not run in, e.g. systemd DelegateSubgroup=)"
            if exc.errno == errno.EBUSY
            else ""
        )
        raise CgroupError(
            f"cannot enable the memory and pids controllers under {parent}: {exc.strerror}{hint}"
        ) from exc


def _own_dir(point: str, mount_root: str, controller: str, parent: str) -> Path:
    """The directory of `parent` (or of this process's own cgroup) in the hierarchy mounted at `point`."""
    if parent:
        path = Path(parent) if parent.startswith(point + "/") or parent == point else None
        if path is None:
            path = Path(point) / parent.lstrip("/")
        if not path.is_dir():
            raise CgroupError(f"the cgroup {path} (SMRWEB_SANDBOX_CGROUP) does not exist")
        return path
    own = _own_cgroup(controller)
    relative = os.path.relpath(own, mount_root)
    if relative.startswith(".."):
        raise CgroupError(f"this process's cgroup {own} is outside the hierarchy mounted at {point}")
    return Path(point) / relative if relative != "." else Path(point)


def _own_cgroup(controller: str) -> str:
    """This process's cgroup path in the v1 hierarchy of `controller`, or in v2 when it is ""."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        if (controller and controller in controllers.split(",")) or (not controller and controllers == ""):
            return path
    return "/"


def _cgroup_mounts() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """Mount point -> (fs type, root inside the hierarchy, super options) of every cgroup mount."""
    mounts = {}
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        mounts[point] = (tail[0], fields[3], tuple(tail[2].split(",")))
    return mounts


def _keyed(path: Path) -> dict[str, int]:
    """A `key value` per line file (memory.events, pids.events, memory.oom_control)."""
    found = {}
    try:
        text = path.read_text()
    except OSError:
        return found
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            found[key] = int(value)
        except ValueError:
            pass
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror}") from exc


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


def _write_if_present(path: Path, value: str) -> None:
    if path.exists():
        _write(path, value)
