"""Run a scenario's validator command against one artifact, in a throw-away directory.

The verification task calls `run_validator(scenario.validator_command, blob_file, artifact_name=path)`
and stores the `SandboxResult` on the submission. Everything that can go wrong with the *command*
(not configured, not installed, too slow, too chatty, killed) comes back as an outcome, never as an
exception, so a missing toolchain shows up as "cannot verify" in the dashboard instead of a failed
task. Errors while *preparing* the workspace (reading the artifact, a full disk) do raise: they are
infrastructure faults the caller may retry, not a verdict on the artifact.

What the sandbox guarantees:

* The command is an argument list executed without a shell (`shell=False`); placeholders are
  replaced inside argument strings, so shell metacharacters in a command or an artifact name are
  passed literally.
* The artifact is written under a fresh temporary directory at a path derived from its name with
  every way out (`..`, absolute paths, backslashes, NUL) removed; `{artifact}` is always absolute,
  so a name starting with `-` cannot be mistaken for an option.
* The environment is rebuilt from scratch (see `scrubbed_env`): no SECRET_KEY, DATABASE_URL, AWS_*
  or tokens from the worker reach the validator.
* The validator runs in a session and process group of its own. On timeout the whole group gets
  SIGTERM, then SIGKILL after `KILL_GRACE_S`; when the validator exits, whatever it left running
  in its group is killed too, so nothing outlives a verification.
* Output (stdout and stderr combined, in order) is read as it comes and only the last `output_cap`
  bytes are kept, so a validator printing gigabytes costs a bounded amount of memory.
* The temporary directory is removed afterwards, whatever happened.

Confinement (red-team findings 4 and N4): with a `Confinement` (what the verification task always
passes, unless the operator set SMRWEB_SANDBOX=unconfined) the command runs under bubblewrap: new user,
PID, network, IPC, UTS and cgroup namespaces (no network at all; /proc shows only the sandbox's own
processes; no further user namespace can be made inside, `--disable-userns`), a root made of read-only
binds of /usr, the Python installation and the validators, the artifact read-only at /sandbox/artifact,
and two size-limited tmpfs, /tmp and /sandbox, the only writable places (a disk quota that lives in the
sandbox's memory). Each run takes a *slot* of its own (a lock file per slot, released by the kernel even
when the worker is SIGKILLed), which gives it its own uid (`uid_base` + slot: RLIMIT_NPROC is no longer
shared between validators) and its own cgroup (`core.cgroups`): one memory limit for all its processes
and its tmpfs, one pids limit, and the whole group killed at the memory limit. The worker (root) puts a
tiny shell in the cgroup, which then execs bubblewrap, so the untrusted command is in the cgroup
before it starts. Also RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NPROC and RLIMIT_NOFILE per process,
no capabilities, no_new_privs; killed with everything it started when it exits, times out, or when the
worker dies (--die-with-parent, the PID namespace ends with its first process, and the next holder of
the slot kills whatever is left in its cgroup). Nothing of the data directory, the worker's environment
or other processes is visible. When the host cannot give all this (bubblewrap missing or older than
0.8, a worker not running as root, no writable cgroup with the memory and pids controllers), the
verification says "cannot verify safely: <what is missing>" rather than run with weaker limits.

`smrweb rescore` (a person re-scoring a bundle on their own machine) uses the same `run_validator`: with
the `Confinement` above when it runs as root on a host that gives one, else with `PersonalConfinement`,
bubblewrap as that person (the same read-only root, namespaces, private /tmp and /sandbox and limits per
process, the root remounted read-only; no uid slot and no cgroup, which need root).

What it does not do: it does not judge what a validator concludes from an artifact.

Exit-code convention for validators: **0 = passed, 1 (or any other code) = failed, 2 = cannot
verify** (the validator could not check the artifact: a Python package missing, an unreadable
format it does not support, bad usage). 126 and 127, the shells' "not executable" / "command not
found", also mean cannot verify, so a wrapper script whose toolchain is missing reads the same as a
missing binary. Death by a signal is a failure.

Pure module: no Django, no models, no database.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from smrweb.core import cgroups

__all__ = [
    "CANNOT_VERIFY",
    "FAILED",
    "PASSED",
    "TIMED_OUT",
    "Confinement",
    "PersonalConfinement",
    "Unsafe",
    "SandboxResult",
    "confinement_from",
    "remove_stale_cgroups",
    "remove_stale_workdirs",
    "run_validator",
    "safe_artifact_path",
    "scrubbed_env",
]

logger = logging.getLogger(__name__)

# The same strings as tracking.models.VerificationOutcome (not imported: this module has no Django).
PASSED = "passed"
FAILED = "failed"
TIMED_OUT = "timed_out"
CANNOT_VERIFY = "cannot_verify"

EXIT_CANNOT_VERIFY = 2
_SHELL_CANNOT_RUN = {126: "is not executable", 127: "was not found"}

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL on timeout: time to flush and clean up
DRAIN_S = 2.0  # after the validator exits, how long to wait for the output pipe to close
PROGRESS_EVERY_S = 0.5
HEARTBEAT_S = 20.0  # a silent validator still reports (its last line) this often: it is alive
_UNKILLABLE_S = 10.0  # after SIGKILL; only a process stuck in the kernel (D state) takes longer
_TICK_S = 0.1
_READ_CHUNK = 64 * 1024
_COPY_CHUNK = 1024 * 1024
_ARTIFACT_DIR = "artifact"
_MAX_SEGMENTS = 8  # keeps the written path well under PATH_MAX whatever the name
_MAX_SEGMENT_BYTES = 255  # NAME_MAX on Linux and macOS
_PLACEHOLDER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


JAIL_WORKDIR = "/sandbox"  # where the work directory is inside the jail (so no worker path shows in output)
WORKDIR_PREFIX = "smrweb-validate-"
# Processes of the jail itself in its cgroup besides the validator's: the outer bubblewrap and its pid 1,
# the inner bubblewrap and its child.
_JAIL_PROCESSES = 5
SLOT_WAIT_S = 60.0  # how long a verification waits for a free sandbox slot
# Joins the cgroup(s) named by its first arguments, then execs the rest: the pid is in the cgroup
# before setpriv, bubblewrap and the validator exist.
_JOIN = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || '
    '{ echo "smrweb: could not join the sandbox cgroup" >&2; exit 125; }; shift; n=$((n - 1)); done; '
    'exec "$@"'
)
_JOIN_FAILED = 125


@dataclass(frozen=True)
class Confinement:
    """Run validators under bubblewrap with these limits (see the module docstring)."""

    memory_bytes: int = 2 * 1024**3  # the whole sandbox (cgroup: processes + tmpfs), and RLIMIT_AS
    cpu_seconds: int = 300
    file_bytes: int = 256 * 1024**2
    processes: int = 64  # the sandbox's pids limit, and RLIMIT_NPROC of its own uid
    open_files: int = 256
    disk_bytes: int = 256 * 1024**2  # size of /tmp and of /sandbox, each (counted in memory_bytes too)
    readonly: tuple[str, ...] = ()  # more host paths to bind read-only at the same place (the validators)
    bwrap: str = "bwrap"
    uid_base: int = 60000  # slot n runs as uid uid_base + n
    slots: int = 64  # sandboxes at once on this host, across all workers
    slot_dir: str = "/run/smrweb-sandbox"  # one lock file per slot (host-local)
    cgroup_root: str = "/sys/fs/cgroup"  # where the cgroup filesystems are mounted
    cgroup_parent: str = ""  # the cgroup smrweb-sandbox/ is made in; "" = the worker's own

    def problem(self) -> str:
        """Why validators cannot be confined safely on this machine, or ""; checked once per process."""
        key = (self, os.geteuid())
        if key not in _JAIL_PROBLEMS:
            _JAIL_PROBLEMS[key] = _probe(self)
        return _JAIL_PROBLEMS[key]

    def hierarchy(self) -> cgroups.Hierarchy:
        """Where this host's sandbox cgroups are (raises cgroups.CgroupError saying what is missing)."""
        return cgroups.detect(self.cgroup_root, self.cgroup_parent)

    @contextlib.contextmanager
    def jail(self):
        """A slot of its own for one run: its uid and a fresh cgroup with the limits, both given back
        (the cgroup killed and removed) afterwards. Raises Unsafe when the host cannot give them."""
        try:
            hierarchy = self.hierarchy()
        except cgroups.CgroupError as exc:
            raise Unsafe(str(exc)) from exc
        slot, fd = _acquire_slot(self.slot_dir, self.slots)
        try:
            try:
                _forget(fd)  # a previous holder killed before it cleaned up
                group = hierarchy.create(
                    f"slot-{slot}", memory_bytes=self.memory_bytes, processes=self.processes + _JAIL_PROCESSES
                )
            except cgroups.CgroupError as exc:
                raise Unsafe(str(exc)) from exc
            _remember(fd, group)
            try:
                yield Jail(self.uid_base + slot, group, self)
            finally:
                try:
                    group.remove()
                    os.ftruncate(fd, 0)
                except (cgroups.CgroupError, OSError) as exc:  # the next holder of the slot retries
                    logger.error("could not remove the sandbox cgroup: %s", exc)
        finally:
            os.close(fd)  # releases the slot

    def wrap(self, argv: list[str], workdir: Path, jail: Jail) -> list[str]:
        """The command line that runs `argv` confined in `jail`, with `workdir`'s artifact read-only at
        /sandbox/artifact."""
        binds = _root_binds(self.readonly)
        limits = [
            "prlimit",
            f"--as={self.memory_bytes}",
            f"--cpu={self.cpu_seconds}",
            f"--fsize={self.file_bytes}",
            f"--nproc={self.processes}",
            f"--nofile={self.open_files}",
            "--",
        ]
        files = jail.cgroup.procs_files()
        join = ["/bin/sh", "-c", _JOIN, "smrweb-join", str(len(files)), *files]
        # Root's bubblewrap makes the namespaces and mounts (it can read every path it binds), then the
        # command drops to the slot's uid (a real uid, so RLIMIT_NPROC is its own) and an unprivileged
        # bubblewrap inside adds a user namespace whose --disable-userns leaves no way to make another.
        drop = [
            "setpriv",
            f"--reuid={jail.uid}",
            f"--regid={jail.uid}",
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
            self.bwrap,
            "--unshare-user",
            "--disable-userns",
            "--dev-bind",
            "/",
            "/",
            "--die-with-parent",
            "--",
        ]
        namespaces = [
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup",
        ]
        # The private /tmp first: a Python or validators installed under /tmp are bound on top of it.
        return [
            *join,
            self.bwrap,
            *namespaces,
            "--die-with-parent",
            "--new-session",
            *_jail_mounts(self.disk_bytes, binds, workdir),
            "--chdir",
            JAIL_WORKDIR,
            "--",
            *drop,
            *limits,
            *argv,
        ]


def _jail_mounts(disk_bytes: int, binds: list[str], workdir: Path) -> list[str]:
    """What both confinements mount: a private /tmp and work directory of capped size (the private /tmp
    first: a Python or validators installed under /tmp are bound on top of it), the read-only root `binds`,
    /proc, /dev, and the artifact read-only in the work directory."""
    return [
        "--hostname",
        "sandbox",
        "--perms",
        "1777",
        "--size",
        str(disk_bytes),
        "--tmpfs",
        "/tmp",
        *binds,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(disk_bytes),
        "--tmpfs",
        JAIL_WORKDIR,
        "--ro-bind",
        str(workdir / _ARTIFACT_DIR),
        f"{JAIL_WORKDIR}/{_ARTIFACT_DIR}",
    ]


def _root_binds(readonly: tuple[str, ...]) -> list[str]:
    """bubblewrap's read-only root, the same for both confinements: /usr and its links, the Python
    installation, the `readonly` paths (the validators) and the few files of /etc programs read."""
    binds = ["--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{link}"):
            binds += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        elif os.path.isdir(f"/{link}"):
            binds += ["--ro-bind", f"/{link}", f"/{link}"]
    python = {
        sys.base_prefix,
        sys.prefix,
        os.path.dirname(os.path.realpath(sys.executable or "/usr/bin")),
    }
    mounts = sorted(
        path
        for path in {*python, *readonly}
        if path and os.path.exists(path) and path != "/usr" and not path.startswith("/usr/")
    )
    # bubblewrap makes missing parents 0700 (root's): nobody could not reach what is bound below them.
    parents = sorted(
        {str(parent) for path in mounts for parent in Path(path).parents if str(parent) != "/"},
        key=lambda p: (p.count("/"), p),
    )
    for parent in parents:
        binds += ["--perms", "0755", "--dir", parent]
    for path in mounts:
        binds += ["--ro-bind", path, path]
    for path in ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"):
        binds += ["--ro-bind-try", path, path]
    return binds


def confinement_from(config: object, readonly: tuple[str, ...] = ()) -> Confinement:
    """The Confinement the SMRWEB_SANDBOX_* settings describe (`config`: django.conf.settings)."""
    return Confinement(
        memory_bytes=config.SMRWEB_SANDBOX_MEMORY_BYTES,
        cpu_seconds=config.SMRWEB_SANDBOX_CPU_SECONDS,
        file_bytes=config.SMRWEB_SANDBOX_FILE_BYTES,
        processes=config.SMRWEB_SANDBOX_PROCESSES,
        disk_bytes=config.SMRWEB_SANDBOX_DISK_BYTES,
        readonly=readonly,
        uid_base=config.SMRWEB_SANDBOX_UID_BASE,
        slots=config.SMRWEB_SANDBOX_SLOTS,
        slot_dir=config.SMRWEB_SANDBOX_SLOT_DIR,
        cgroup_root=config.SMRWEB_SANDBOX_CGROUP_ROOT,
        cgroup_parent=config.SMRWEB_SANDBOX_CGROUP,
    )


class _NoCgroup:
    """A personal confinement has no cgroup: nothing to kill as a whole, no memory limit hit."""

    def kill(self) -> None:
        pass

    def oom_killed(self) -> bool:
        return False


@dataclass(frozen=True)
class PersonalConfinement:
    """bubblewrap as the person running it, for `smrweb rescore` on a machine where they are not root.

    The same read-only root, private /tmp and /sandbox of a size, the artifact read-only, and new user,
    PID, network, IPC and UTS namespaces (no network; no further user namespace: --disable-userns), every
    capability dropped, killed with its parent; RLIMIT_AS, RLIMIT_CPU, RLIMIT_FSIZE and RLIMIT_NOFILE per
    process. What it cannot give without root: a uid of its own (it runs as the person, mapped in its
    namespace), a cgroup (so no memory limit for all its processes together, no pids limit: RLIMIT_NPROC
    would count the person's other processes too). Needs unprivileged user namespaces."""

    memory_bytes: int = 2 * 1024**3
    cpu_seconds: int = 300
    file_bytes: int = 256 * 1024**2
    open_files: int = 256
    disk_bytes: int = 256 * 1024**2
    readonly: tuple[str, ...] = ()
    bwrap: str = "bwrap"

    def problem(self) -> str:
        """Why bubblewrap cannot confine a validator here, or ""; checked once per process."""
        key = (self, os.geteuid())
        if key not in _JAIL_PROBLEMS:
            _JAIL_PROBLEMS[key] = (
                _bwrap_problem(self.bwrap)
                or ("`prlimit` (util-linux) is not installed" if shutil.which("prlimit") is None else "")
                or _try_jail(self)
            )
        return _JAIL_PROBLEMS[key]

    @contextlib.contextmanager
    def jail(self):
        yield Jail(os.getuid(), _NoCgroup(), self)

    def wrap(self, argv: list[str], workdir: Path, jail: Jail) -> list[str]:
        limits = [
            "prlimit",
            f"--as={self.memory_bytes}",
            f"--cpu={self.cpu_seconds}",
            f"--fsize={self.file_bytes}",
            f"--nofile={self.open_files}",
            "--",
        ]
        return [
            self.bwrap,
            "--unshare-user",
            "--disable-userns",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            *_jail_mounts(self.disk_bytes, _root_binds(self.readonly), workdir),
            # The root itself (bubblewrap's tmpfs) is the person's own here: read-only, so nothing is
            # written outside /tmp and /sandbox, whose sizes are capped.
            "--remount-ro",
            "/",
            "--chdir",
            JAIL_WORKDIR,
            "--",
            *limits,
            *argv,
        ]


class Unsafe(Exception):
    """The host cannot give a validator its own uid, cgroup and limits: what is missing."""


@dataclass(frozen=True)
class Jail:
    """One run's slot: its uid and its cgroup."""

    uid: int
    cgroup: cgroups.Cgroup
    confinement: Confinement

    def limit_hit(self) -> str:
        """Why the sandbox must be (or was) killed as a whole, or ""."""
        if self.cgroup.oom_killed():
            return (
                f"killed: the sandbox went over its memory limit of {_size(self.confinement.memory_bytes)} "
                "(its processes, /tmp and /sandbox together)"
            )
        return ""


def _size(n: int) -> str:
    return f"{n / 1024**3:g} GiB" if n >= 1024**3 else f"{n / 1024**2:g} MiB"


def _acquire_slot(slot_dir: str, slots: int) -> tuple[int, int]:
    """Lock a free slot's file (flock: the kernel releases it when the holder dies, however it dies);
    returns (slot, fd). Raises Unsafe when the directory is unusable, or none frees up in time."""
    try:
        os.makedirs(slot_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise Unsafe(f"cannot create the sandbox slot directory {slot_dir}: {exc.strerror}") from exc
    first = os.getpid() % slots  # workers start at different slots: fewer collisions
    deadline = time.monotonic() + SLOT_WAIT_S
    while True:
        for slot in [*range(first, slots), *range(first)]:
            try:
                fd = os.open(
                    os.path.join(slot_dir, f"slot-{slot}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
                )
            except OSError as exc:
                raise Unsafe(f"cannot open a sandbox slot in {slot_dir}: {exc.strerror}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return slot, fd
        if time.monotonic() > deadline:
            raise Unsafe(f"all {slots} sandbox slots stayed busy for {SLOT_WAIT_S:g} s")
        time.sleep(0.2)


def _remember(fd: int, group: cgroups.Cgroup) -> None:
    """Write the slot's cgroup into its lock file, for whoever takes the slot after a crash."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{group.version}\n{group.memory}\n{group.pids}\n".encode(), 0)


def _forget(fd: int) -> list[str]:
    """Kill and remove the cgroup a dead holder of this (locked) slot left; returns what was removed."""
    try:
        version, memory, pids = os.pread(fd, 4096, 0).decode().split("\n")[:3]
        group = cgroups.Cgroup(int(version), Path(memory), Path(pids))
    except (ValueError, UnicodeDecodeError):
        return []
    if not group.exists():
        return []
    group.remove()
    os.ftruncate(fd, 0)
    return [str(group.memory)]


def remove_stale_cgroups(confinement: Confinement) -> list[str]:
    """Kill and remove sandbox cgroups whose slot nobody holds (their worker was killed); called when a
    worker starts. Returns what was removed."""
    removed: list[str] = []
    try:
        names = os.listdir(confinement.slot_dir)
    except OSError:
        return removed
    for name in sorted(names):
        if not (name.startswith("slot-") and name.endswith(".lock")):
            continue
        try:
            fd = os.open(os.path.join(confinement.slot_dir, name), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            removed += _forget(fd)
        except BlockingIOError:
            pass  # a live verification holds it
        except cgroups.CgroupError as exc:
            logger.error("could not remove a stale sandbox cgroup: %s", exc)
        finally:
            os.close(fd)
    return removed


_JAIL_PROBLEMS: dict[tuple[str, int], str] = {}


def _probe(confinement: Confinement) -> str:
    """What the host lacks, checked in turn; then start one confined `true` in a slot of its own:
    namespaces allowed, the cgroup joined, the tools inside found."""
    if problem := _bwrap_problem(confinement.bwrap):
        return problem
    if os.geteuid() != 0:
        return (
            "the worker does not run as root, so it cannot give each validator a uid and a cgroup of its own"
        )
    for tool in ("setpriv", "prlimit"):
        if shutil.which(tool) is None:
            return f"`{tool}` (util-linux) is not installed on this worker"
    try:
        confinement.hierarchy()
    except cgroups.CgroupError as exc:
        return str(exc)
    return _try_jail(confinement)


def _bwrap_problem(bwrap: str) -> str:
    """Why this bubblewrap cannot confine a validator (missing, older than 0.8), or ""."""
    if shutil.which(bwrap) is None:
        return (
            "the validator sandbox is not available: bubblewrap (`bwrap`) is not installed on this worker "
            "(apt install bubblewrap)"
        )
    try:
        usage = subprocess.run([bwrap, "--help"], capture_output=True, timeout=30, check=False).stdout.decode(
            "utf-8", "replace"
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the validator sandbox could not start on this worker: {exc}"
    if "--size" not in usage or "--disable-userns" not in usage:
        return (
            "bubblewrap on this worker is older than 0.8 (no --size for the /tmp quota, no --disable-userns)"
        )
    return ""


def _try_jail(confinement) -> str:
    """Start one confined `true`: "" when it ran, else what went wrong."""
    workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX + f"{os.getpid()}-probe-"))
    try:
        (workdir / _ARTIFACT_DIR).mkdir()
        with confinement.jail() as jail:
            _own_for_jail(workdir, jail.uid)
            done = subprocess.run(
                confinement.wrap(["true"], workdir, jail),
                env=scrubbed_env(JAIL_WORKDIR),
                timeout=30,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                check=False,
            )
    except Unsafe as exc:
        return str(exc)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the validator sandbox could not start on this worker: {exc}"
    finally:
        _remove_tree(workdir)
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return (
            f"the validator sandbox could not start on this worker: {said[-1] if said else done.returncode}"
        )
    return ""


def _own_for_jail(workdir: Path, uid: int) -> None:
    """The jailed command runs as its slot's uid: give it the work directory (and nothing else), which
    bubblewrap, already that uid, binds read-only."""
    for dirpath, _dirnames, filenames in os.walk(workdir):
        os.chown(dirpath, uid, uid)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def remove_stale_workdirs(parent: str | None = None) -> list[str]:
    """Remove work directories left by validators of workers that died (their pid is in the name and no
    longer runs); called when a worker starts (finding 12). Returns what was removed."""
    parent = parent or tempfile.gettempdir()
    removed = []
    for entry in os.scandir(parent):
        if not entry.name.startswith(WORKDIR_PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        pid = entry.name[len(WORKDIR_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        _remove_tree(Path(entry.path))
        removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class SandboxResult:
    """What one validator run said, ready for `Submission.verification_*`."""

    outcome: str  # PASSED | FAILED | TIMED_OUT | CANNOT_VERIFY
    # The validator's own status (negative: the signal that ended it); None if it never ran or we killed it.
    exit_code: int | None
    output_tail: str  # stdout+stderr, the last `output_cap` characters at most, cut marker included
    duration_s: float  # from start to exit of the validator; 0 when it never started
    detail: str  # one sentence saying why this outcome


def run_validator(
    command: list[str],
    artifact: BinaryIO | bytes,
    *,
    artifact_name: str,
    timeout: float = 60.0,
    output_cap: int = 16_000,
    extra_placeholders: dict[str, str] | None = None,
    on_progress: Callable[[str], None] | None = None,
    confinement: Confinement | None = Confinement(),
) -> SandboxResult:
    """Write `artifact` into a fresh temporary directory and run `command` against it.

    Placeholders, replaced inside each argument (one pass, so a value that itself contains
    `{workdir}` is not expanded again): `{artifact}` the absolute path of the written file,
    `{workdir}` the temporary directory (also the working directory, HOME and TMPDIR),
    `{python}` the worker's interpreter, and each name in `extra_placeholders` (keys without
    braces, e.g. `{"validators": "/srv/validators"}`). Unknown `{...}` stay as they are.

    `artifact` is bytes or a binary file object, copied from its current position in chunks.
    `on_progress` is called with the latest output line at most every PROGRESS_EVERY_S, from the
    calling thread (so a Django connection it uses is the caller's own); if it raises, the error is
    logged and progress reports stop, the verification goes on. It is also called with the same line
    every HEARTBEAT_S while the validator is silent, so the caller can tell a live verification from a
    lost one.

    `confinement`: run under bubblewrap (the default); None runs the command directly (only when the
    operator chose SMRWEB_SANDBOX=unconfined, and for tests of the mechanics). Inside the jail the work
    directory is /sandbox, so `{artifact}` is /sandbox/artifact/<name> and `{workdir}` is /sandbox.
    """
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    if output_cap < 0:
        raise ValueError("output_cap must not be negative")
    placeholders = _extra_placeholders(extra_placeholders)
    problem = _command_problem(command)
    if problem:
        return SandboxResult(CANNOT_VERIFY, None, "", 0.0, problem)

    if confinement is not None and (problem := confinement.problem()):
        return SandboxResult(CANNOT_VERIFY, None, "", 0.0, f"cannot verify safely: {problem}")

    # The worker's pid is in the name: a worker starting later removes what a dead one left behind.
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-")).resolve()
    try:
        artifact_path = _write_artifact(workdir, artifact, artifact_name)
        seen_as = Path(JAIL_WORKDIR) if confinement is not None else workdir
        placeholders.update(
            artifact=str(seen_as / artifact_path.relative_to(workdir)),
            workdir=str(seen_as),
            python=sys.executable or "python3",
        )
        argv = [_substitute(arg, placeholders) for arg in command]
        run = dict(timeout=timeout, output_cap=output_cap, on_progress=on_progress, env=scrubbed_env(seen_as))
        if confinement is None:
            return _run(argv, workdir, **run)
        env = scrubbed_env(seen_as)
        if shutil.which(argv[0], path=env["PATH"]) is None and not argv[0].startswith(str(seen_as)):
            return SandboxResult(
                CANNOT_VERIFY, None, "", 0.0, _not_found_detail(argv[0], env["PATH"], workdir)
            )
        try:
            with confinement.jail() as jail:
                _own_for_jail(workdir, jail.uid)
                return _run(confinement.wrap(argv, workdir, jail), workdir, **run, jail=jail)
        except Unsafe as exc:
            return SandboxResult(CANNOT_VERIFY, None, "", 0.0, f"cannot verify safely: {exc}")
    finally:
        _remove_tree(workdir)


def safe_artifact_path(name: str) -> PurePosixPath:
    """A relative path derived from an artifact's name that cannot leave the directory it is joined to.

    Backslashes count as separators (a Windows-style name keeps its folders); empty, `.` and `..`
    segments are dropped rather than resolved, so `a/../../b` becomes `a/b`; control characters
    (NUL included) become `_`; over-long segments are shortened keeping their extension, and only the
    last few segments are kept. Nothing left gives `artifact`.
    """
    text = str(name).encode("utf-8", "replace").decode("utf-8")  # lone surrogates would break encode()
    segments = []
    for raw in text.replace("\\", "/").split("/"):
        segment = _CONTROL.sub("_", raw).strip()
        if segment in ("", ".", ".."):
            continue
        segments.append(_shorten(segment))
    segments = segments[-_MAX_SEGMENTS:]
    return PurePosixPath(*segments) if segments else PurePosixPath("artifact")


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def scrubbed_env(workdir: str | os.PathLike[str]) -> dict[str, str]:
    """The validator's whole environment: nothing is inherited from the worker.

    PATH is the worker interpreter's directory followed by /usr/local/bin:/usr/bin:/bin, so `python3`
    (and `pip`, `python`) mean the worker's own interpreter and environment: the one the operator
    installs a scenario's `required_toolchains` into, and the same on every worker whatever the
    system Python is. The venv is used through its `pyvenv.cfg`, no VIRTUAL_ENV needed.
    PYTHONUNBUFFERED makes a Python validator's lines arrive as printed (live progress, and stdout
    and stderr interleaved in the order they happened).
    One BLAS/OpenMP thread: the sandbox caps processes *and threads* per uid, and OpenBLAS (loaded with
    numpy) starts a thread per core at import and raises SIGINT when it cannot, so on a worker with more
    cores than the cap `import numpy` alone would kill any scenario's validator.
    """
    workdir = os.fspath(workdir)
    path = SAFE_PATH
    interpreter_dir = os.path.dirname(sys.executable) if sys.executable else ""
    if interpreter_dir and interpreter_dir not in SAFE_PATH.split(":"):
        path = f"{interpreter_dir}:{SAFE_PATH}"
    return {
        "PATH": path,
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
        **dict.fromkeys(BLAS_THREAD_VARIABLES, "1"),
    }


# --- preparing ---------------------------------------------------------------------------------


def _command_problem(command: object) -> str:
    """Why `command` cannot be run, as the result's detail, or "" when it can."""
    if command is None or (isinstance(command, (list, tuple)) and not command):
        return "no command configured"
    if not isinstance(command, (list, tuple)):
        return (
            "command must be an argument list, not a shell string"
            if isinstance(command, str)
            else "command must be an argument list"
        )
    if not all(isinstance(arg, str) for arg in command):
        return "command must be an argument list of strings"
    if not command[0].strip():
        return "no command configured"
    if any("\x00" in arg for arg in command):
        return "command must not contain NUL characters"
    return ""


def _extra_placeholders(extra: dict[str, str] | None) -> dict[str, str]:
    """Caller-supplied placeholders, names checked: they come from code, so a bad one is a bug."""
    result: dict[str, str] = {}
    for key, value in (extra or {}).items():
        name = key[1:-1] if key.startswith("{") and key.endswith("}") else key
        if not _PLACEHOLDER_NAME.fullmatch(name):
            raise ValueError(f"placeholder name {key!r} is not an identifier")
        if name in ("artifact", "workdir", "python"):
            raise ValueError(f"placeholder {{{name}}} is built in")
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"placeholder {{{name}}} must be a string without NUL")
        result[name] = value
    return result


def _substitute(arg: str, placeholders: dict[str, str]) -> str:
    """Replace known `{name}`s in one argument, in a single pass (str.format would also evaluate
    `{artifact.__class__}` and choke on the braces of a JSON argument)."""
    if not placeholders:
        return arg
    pattern = re.compile("|".join(re.escape("{" + name + "}") for name in placeholders))
    return pattern.sub(lambda match: placeholders[match.group(0)[1:-1]], arg)


def _shorten(segment: str) -> str:
    encoded = segment.encode("utf-8")
    if len(encoded) <= _MAX_SEGMENT_BYTES:
        return segment
    stem, dot, ext = segment.rpartition(".")
    suffix = (dot + ext).encode("utf-8") if stem and len(ext) <= 16 else b""
    head = encoded[: _MAX_SEGMENT_BYTES - len(suffix)].decode("utf-8", "ignore")
    return head + suffix.decode("utf-8")


def _write_artifact(workdir: Path, artifact: BinaryIO | bytes, name: str) -> Path:
    """Write the bytes under `<workdir>/artifact/<safe path>` and return that absolute path.

    The extra `artifact/` level keeps names chosen by an agent out of the working directory itself,
    where `python -m …` or `python -c …` would import a file called `numpy.py` before the real one.
    """
    root = workdir / _ARTIFACT_DIR
    target = (root / safe_artifact_path(name)).resolve()
    if not target.is_relative_to(root):  # cannot happen after safe_artifact_path; checked anyway
        raise ValueError(f"artifact name {name!r} leaves the sandbox")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "xb") as out:  # x: never follow or reuse something that is already there
        if isinstance(artifact, (bytes, bytearray, memoryview)):
            out.write(artifact)
        else:
            shutil.copyfileobj(artifact, out, _COPY_CHUNK)
    return target


# --- running -----------------------------------------------------------------------------------


def _run(
    argv: list[str],
    workdir: Path,
    *,
    timeout: float,
    output_cap: int,
    on_progress: Callable[[str], None] | None,
    env: dict[str, str],
    jail: Jail | None = None,
) -> SandboxResult:
    try:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=env,
            shell=False,
            close_fds=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session and process group: killpg reaches grandchildren
        )
    except FileNotFoundError:
        return SandboxResult(CANNOT_VERIFY, None, "", 0.0, _not_found_detail(argv[0], env["PATH"], workdir))
    except PermissionError:
        return SandboxResult(CANNOT_VERIFY, None, "", 0.0, f"`{argv[0]}` is not executable on this worker")
    except OSError as exc:  # ENOEXEC (a script without #!), ENOTDIR, E2BIG…
        detail = f"`{argv[0]}` could not start: {exc.strerror or exc}"
        return SandboxResult(CANNOT_VERIFY, None, "", 0.0, detail)

    tail = _Tail(output_cap)
    try:
        timed_out, duration = _supervise(proc, tail, timeout, _Progress(on_progress, tail), jail)
    finally:
        # Reached with the group still alive only if _supervise raised (e.g. KeyboardInterrupt).
        if proc.returncode is None and not _has_exited(proc):
            _signal_group(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=_UNKILLABLE_S)
            except subprocess.TimeoutExpired:
                pass
        proc.stdout.close()
    returncode = proc.poll()  # reaps: the group was signalled while the leader was still a zombie
    if jail is None:
        return (
            _verdict(returncode, tail.text(), duration)
            if not timed_out
            else _timed_out(timeout, tail, duration)
        )
    try:
        jail.cgroup.kill()  # anything that left the process group goes too
    except cgroups.CgroupError as exc:  # stuck in the kernel; the slot's next holder tries again
        logger.error("validator %s: %s", argv[0], exc)
    if limit := jail.limit_hit():  # checked after the exit too: the kernel may have been quicker than us
        return SandboxResult(FAILED, None, tail.text(), duration, limit)
    if timed_out:
        return _timed_out(timeout, tail, duration)
    if returncode == _JOIN_FAILED and "smrweb: could not join the sandbox cgroup" in tail.text():
        return SandboxResult(
            CANNOT_VERIFY, None, "", 0.0, "cannot verify safely: could not join the sandbox cgroup"
        )
    if returncode is not None and 128 < returncode < 128 + 65:
        returncode = 128 - returncode  # bubblewrap reports its command's death by signal N as 128 + N
    return _verdict(returncode, tail.text(), duration)


def _timed_out(timeout: float, tail: _Tail, duration: float) -> SandboxResult:
    return SandboxResult(
        TIMED_OUT, None, tail.text(), duration, f"killed after {timeout:g} s (the time limit)"
    )


def _supervise(
    proc: subprocess.Popen, tail: _Tail, timeout: float, progress: _Progress, jail: Jail | None = None
) -> tuple[bool, float]:
    """Read output until the validator is done; enforce the timeout. Returns (timed out, duration).

    One thread, one selector: no reader thread to leak when a process that escaped the group keeps
    the pipe open, and the progress callback runs on the caller's thread.
    """
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    start = time.monotonic()
    deadline = start + timeout
    term_at = kill_at = exited_at = None
    eof = False
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and _has_exited(proc):
                exited_at = now
                # Whatever it left behind in its group dies with it, and stops holding the pipe.
                _signal_group(proc.pid, signal.SIGKILL)
            elif exited_at is None and jail is not None and jail.limit_hit():
                jail.cgroup.kill()  # at the memory limit the whole sandbox goes, not one process of it
            if exited_at is not None:
                if eof:
                    break
                if now - exited_at >= DRAIN_S:
                    logger.warning(
                        "a process started by validator %s left its group and keeps its output open",
                        proc.args[0],
                    )
                    break
            elif term_at is None and now >= deadline:
                term_at = now
                _signal_group(proc.pid, signal.SIGTERM)
            elif term_at is not None and kill_at is None and now - term_at >= KILL_GRACE_S:
                kill_at = now
                _signal_group(proc.pid, signal.SIGKILL)
            elif kill_at is not None and now - kill_at >= _UNKILLABLE_S:
                logger.error(
                    "validator %s (pid %s) survived SIGKILL; giving up on it", proc.args[0], proc.pid
                )
                break
            progress.maybe_report(now)
            if eof:
                time.sleep(_TICK_S / 2)
            elif selector.select(_TICK_S):
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    continue
                if chunk:
                    tail.feed(chunk)
                else:
                    eof = True
                    selector.unregister(fd)
    finally:
        selector.close()
    return term_at is not None, time.monotonic() - start


def _has_exited(proc: subprocess.Popen) -> bool:
    """Whether the validator has exited, *without reaping it*: while it is a zombie its pid (the
    group id) cannot be reused, so signalling the group afterwards cannot hit a stranger."""
    if proc.returncode is not None:
        return True
    if not hasattr(os, "waitid"):
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped by someone else
        return proc.poll() is not None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the group is already empty
        pass


def _verdict(returncode: int | None, output: str, duration: float) -> SandboxResult:
    if returncode is None:  # survived SIGKILL; _supervise logged it
        return SandboxResult(FAILED, None, output, duration, "did not die when killed")
    if returncode == 0:
        return SandboxResult(PASSED, 0, output, duration, "exited 0")
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return SandboxResult(FAILED, returncode, output, duration, f"killed by signal {name}")
    if returncode == EXIT_CANNOT_VERIFY:
        return SandboxResult(
            CANNOT_VERIFY,
            returncode,
            output,
            duration,
            "exited 2: the validator could not check this artifact",
        )
    if returncode in _SHELL_CANNOT_RUN:
        detail = f"exited {returncode}: a program the validator runs {_SHELL_CANNOT_RUN[returncode]}"
        return SandboxResult(CANNOT_VERIFY, returncode, output, duration, detail)
    return SandboxResult(FAILED, returncode, output, duration, f"exited {returncode}")


def _not_found_detail(argv0: str, path: str, workdir: Path) -> str:
    # ENOENT also comes from a script whose #! interpreter is missing: say which it is.
    candidate = str(workdir / argv0) if "/" in argv0 else argv0
    if shutil.which(candidate, path=path):
        return f"`{argv0}` could not start: the interpreter on its #! line is not installed on this worker"
    return f"`{argv0}` is not installed on this worker"


class _Tail:
    """The last `cap` bytes of the output and a count of all of them."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self.buf = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.buf += chunk
        excess = len(self.buf) - self.cap
        if excess > 0:
            del self.buf[:excess]  # cheap: bytearray moves its start instead of copying

    def last_line(self) -> str:
        recent = bytes(self.buf[-4096:]).decode("utf-8", "replace").replace("\x00", "\ufffd")
        for line in reversed(re.split(r"[\r\n]", recent)):  # \r: progress bars redraw one line
            if line.strip():
                return line.strip()[:300]
        return ""

    def text(self) -> str:
        """Decoded tail, at most `cap` characters including the cut marker. NUL becomes U+FFFD
        because PostgreSQL text cannot hold it."""
        body = bytes(self.buf)
        marker = ""
        reserve = len(_cut_marker(self.total))  # `cut` has no more digits than `total`
        if self.total > len(body) and self.cap > reserve:  # with a tiny cap the marker would not fit
            body = body[len(body) - (self.cap - reserve) :]
            skip = 0
            while skip < min(3, len(body)) and 0x80 <= body[skip] <= 0xBF:  # mid UTF-8 sequence
                skip += 1
            body = body[skip:]
            marker = _cut_marker(self.total - len(body))
        text = marker + body.decode("utf-8", "replace")  # a byte decodes to at most one character
        return text.replace("\x00", "\ufffd") if self.cap else ""


def _cut_marker(cut: int) -> str:
    return f"[… {cut} bytes cut …]\n"


class _Progress:
    """Throttled `on_progress(last line)`; a failing callback is logged once and then left alone."""

    def __init__(self, callback: Callable[[str], None] | None, tail: _Tail) -> None:
        self.callback = callback
        self.tail = tail
        self.last_at = float("-inf")
        self.last_line = ""

    def maybe_report(self, now: float) -> None:
        if self.callback is None or now - self.last_at < PROGRESS_EVERY_S:
            return
        line = self.tail.last_line()
        if line == self.last_line and now - self.last_at < HEARTBEAT_S:
            return
        if not line and self.last_at == float("-inf"):
            self.last_at = now  # nothing said yet: the first heartbeat comes HEARTBEAT_S from now
            return
        self.last_at, self.last_line = now, line
        try:
            self.callback(line)
        except Exception:
            logger.exception("validator progress callback failed; no more progress for this run")
            self.callback = None


# --- cleaning up -------------------------------------------------------------------------------


def _remove_tree(path: Path) -> None:
    """Remove the sandbox even if the validator made parts of it unreadable (chmod 000): give every
    directory back its owner's permissions first. Symlinks are neither followed nor chmod-ed, so a
    link the validator planted cannot make us touch anything outside."""
    if not path.exists():
        return
    try:
        os.chmod(path, 0o700)
        for dirpath, dirnames, _ in os.walk(path):
            for name in dirnames:
                child = os.path.join(dirpath, name)
                if not os.path.islink(child):
                    os.chmod(child, 0o700)  # before os.walk descends into it
    except OSError:
        pass
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        logger.warning("could not remove validator sandbox %s", path)
