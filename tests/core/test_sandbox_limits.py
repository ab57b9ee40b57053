"""Red-team finding N4: a validator's limits are its own sandbox's, not per process and not shared by uid.
Real bubblewrap, real cgroups, real processes: a fork bomb beside another project's validator, five memory
hogs, a disk filler, user namespaces, two sandboxes at once, a host without cgroups, and a worker killed
mid-run. Limits are small here (a 512 MiB sandbox) so the tests are quick and spare the host."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from django.test import override_settings

from smrweb.core import sandbox
from smrweb.core.sandbox import CANNOT_VERIFY, FAILED, PASSED, Confinement, run_validator

pytestmark = [
    pytest.mark.skipif(not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is installed by make test"),
    pytest.mark.skipif(os.geteuid() != 0, reason="per-validator uids and cgroups need a root worker (CI is)"),
]

MiB = 1024**2


def python(code: str, *args: str, confinement: Confinement, **kwargs) -> sandbox.SandboxResult:
    return run_validator(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        b"",
        artifact_name="a",
        timeout=kwargs.pop("timeout", 60),
        confinement=confinement,
        **kwargs,
    )


BOMB = """
    import os, sys, time
    children = 0
    while True:
        try:
            pid = os.fork()
        except OSError as exc:
            print(f"fork failed after {children} children: {exc}; holding them", flush=True)
            break
        if pid == 0:
            time.sleep(float(sys.argv[1]))
            os._exit(0)
        children += 1
    time.sleep(float(sys.argv[1]))
    sys.exit(1)
"""

VICTIM = """
    import os, sys, threading
    forked = 0
    for _ in range(5):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        forked += 1
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    print(f"victim validator: forks ok={forked}, thread ok")
"""


def test_a_fork_bomb_beside_another_validator_does_not_make_it_fail():
    """The review: `bomb.py` held uid 65534's RLIMIT_NPROC, and another project's validator started 12 s
    later could neither fork nor start a thread: its submission became invalid."""
    confinement = Confinement(processes=16, memory_bytes=512 * MiB)
    holding = threading.Event()
    results = {}

    def bomb():
        results["bomb"] = python(
            BOMB, "8", confinement=confinement, on_progress=lambda line: "holding" in line and holding.set()
        )

    thread = threading.Thread(target=bomb)
    thread.start()
    assert holding.wait(30), "the bomb never reached its limit"
    victim = python(VICTIM, confinement=confinement)
    thread.join()
    assert victim.outcome == PASSED, victim
    assert "forks ok=5, thread ok" in victim.output_tail
    bombed = results["bomb"]
    assert bombed.outcome == FAILED and "fork failed after" in bombed.output_tail, bombed


HOGS = """
    import os, sys
    size = int(sys.argv[1])
    pids = []
    for _ in range(5):
        pid = os.fork()
        if pid == 0:
            block = bytearray(size)
            for i in range(0, size, 4096):
                block[i] = 1
            os._exit(0)
        pids.append(pid)
    print("children:", [os.waitpid(pid, 0)[1] for pid in pids])
"""


def test_five_memory_hogs_are_killed_together_at_the_sandboxs_memory_limit():
    """The review: five children touching 1,000 MiB each held ~5 GB past the "4 GiB" limit (RLIMIT_AS is
    per process). Here 5 × 400 MiB, each inside the per-process limit, against a 512 MiB sandbox."""
    started = time.monotonic()
    result = python(HOGS, str(400 * MiB), confinement=Confinement(memory_bytes=512 * MiB))
    assert result.outcome == FAILED, result
    assert result.detail == (
        "killed: the sandbox went over its memory limit of 512 MiB "
        "(its processes, /tmp and /sandbox together)"
    )
    assert "children:" not in result.output_tail  # the parent went with them
    assert time.monotonic() - started < 30


FILLER = """
    import os
    written = {}
    for place in ("/tmp", "/sandbox"):
        written[place] = 0
        try:
            for n in range(3):
                with open(f"{place}/fill-{n}", "wb") as fh:
                    for _ in range(100):
                        fh.write(b"x" * (1024 * 1024))
                        fh.flush()
                        written[place] += 1024 * 1024
        except OSError as exc:
            print(place, "stopped:", exc.strerror)
    print("written", written)
"""


def test_a_disk_filler_is_stopped_at_the_quota_in_tmp_and_in_the_work_directory():
    """The review: 3 × 200 MiB in /sandbox (the host's disk) and 3 × 200 MiB in /tmp (RAM-backed, half the
    host's memory), 1.2 GiB under a 256 MiB file-size limit. Here 3 × 100 MiB to each, with a 64 MiB quota."""
    result = python(FILLER, confinement=Confinement(memory_bytes=512 * MiB, disk_bytes=64 * MiB))
    assert result.outcome == PASSED, result
    assert "/tmp stopped: No space left on device" in result.output_tail
    assert "/sandbox stopped: No space left on device" in result.output_tail
    written = eval(re.search(r"written (\{.*\})", result.output_tail).group(1))  # noqa: S307 (our own output)
    assert 0 < written["/tmp"] <= 64 * MiB and 0 < written["/sandbox"] <= 64 * MiB, written


USERNS = """
    import ctypes, os, subprocess
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWUSER = 0x10000000
    said = libc.unshare(CLONE_NEWUSER)
    print("unshare(CLONE_NEWUSER):", said, os.strerror(ctypes.get_errno()) if said else "")
    done = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
    print("unshare -U:", done.returncode, done.stderr.strip())
"""


def test_user_namespaces_cannot_be_created_inside():
    """The review's isolation probe: `unshare(CLONE_NEWUSER)` returned 0 inside the jail."""
    result = python(USERNS, confinement=Confinement(memory_bytes=512 * MiB))
    assert result.outcome == PASSED, result
    syscall = re.search(r"unshare\(CLONE_NEWUSER\): (-?\d+)", result.output_tail)
    command = re.search(r"unshare -U: (\d+)", result.output_tail)
    assert syscall and command, result.output_tail
    assert int(syscall.group(1)) == -1 and int(command.group(1)) != 0, result.output_tail


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _seen(marker: str) -> tuple[int, str] | None:
    """(uid, memory cgroup) of the process whose command line holds `marker`, seen from the host."""
    for pid in _pids():
        try:
            if marker not in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                "utf-8", "replace"
            ):
                continue
            uid = int(re.search(r"^Uid:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M).group(1))
            cgroup = re.search(
                r"^\d+:(?:[^:]*,)?memory(?:,[^:]*)?:(.*)$|^0::(.*)$",
                Path(f"/proc/{pid}/cgroup").read_text(),
                re.M,
            )
        except (OSError, AttributeError):
            continue
        if uid != 0:  # the validator, not the worker or the outer bubblewrap
            return uid, next(g for g in cgroup.groups() if g is not None)
    return None


def test_two_concurrent_verifications_get_their_own_uid_and_cgroup():
    confinement = Confinement(memory_bytes=512 * MiB)
    markers = [f"marker-{os.getpid()}-{n}" for n in range(2)]
    results = []
    threads = [
        threading.Thread(
            target=lambda m=m: results.append(
                python(
                    "import os, sys, time; print('uid', os.getuid()); time.sleep(3)",
                    m,
                    confinement=confinement,
                )
            )
        )
        for m in markers
    ]
    for thread in threads:
        thread.start()
    seen = {}
    deadline = time.monotonic() + 20
    while len(seen) < 2 and time.monotonic() < deadline:
        for marker in markers:
            if marker not in seen and (found := _seen(marker)):
                seen[marker] = found
        time.sleep(0.05)
    for thread in threads:
        thread.join()
    assert [r.outcome for r in results] == [PASSED, PASSED], results
    assert len(seen) == 2, seen
    (uid_a, cgroup_a), (uid_b, cgroup_b) = seen.values()
    assert uid_a != uid_b and cgroup_a != cgroup_b, seen
    assert "/smrweb-sandbox/slot-" in cgroup_a and "/smrweb-sandbox/slot-" in cgroup_b, seen
    base = confinement.hierarchy().memory_base
    for cgroup in (cgroup_a, cgroup_b):  # removed afterwards
        assert not (base / cgroup.rsplit("/", 1)[1]).exists()


def test_a_host_without_cgroups_cannot_verify_safely(tmp_path):
    """Not a cgroup filesystem at all, and (on this kind of host) a real cgroup2 mount whose memory and pids
    controllers are held by cgroup v1: nothing runs, and the detail says what is missing."""
    marker = tmp_path / "ran"
    (tmp_path / "memory").mkdir()
    (tmp_path / "pids").mkdir()
    roots = [str(tmp_path)]
    unified = Path("/sys/fs/cgroup/unified")
    if (unified / "cgroup.controllers").exists() and not (unified / "cgroup.controllers").read_text().split():
        roots.append(str(unified))
    for root in roots:
        result = run_validator(
            ["touch", str(marker)], b"", artifact_name="a", confinement=Confinement(cgroup_root=root)
        )
        assert result.outcome == CANNOT_VERIFY, result
        assert result.detail.startswith("cannot verify safely: "), result
        assert "memory" in result.detail and "pids" in result.detail, result
        assert not marker.exists()


def test_check_deploy_says_validators_cannot_be_confined_safely(tmp_path):
    from django.core.checks import run_checks

    # The deployment checks as `check --deploy` runs them (called directly: the command would also stop on
    # other checks' errors, such as async.E001 once a browser test has set DJANGO_ALLOW_ASYNC_UNSAFE).
    with override_settings(SMRWEB_SANDBOX_CGROUP_ROOT=str(tmp_path)):
        issues = run_checks(include_deployment_checks=True)
    [said] = [f"{issue.msg} {issue.hint}" for issue in issues if issue.id == "smrweb.W003"]
    assert "Validators cannot be confined safely on this machine" in said, said
    assert f"no cgroup v2 mounted at {tmp_path}" in said


WORKER = textwrap.dedent("""
    import sys
    from smrweb.core.sandbox import Confinement, run_validator
    print("started", flush=True)
    run_validator(["sleep", sys.argv[1]], b"", artifact_name="a", timeout=120, confinement=Confinement())
""")


def test_a_killed_workers_slot_is_freed_and_its_cgroup_swept(tmp_path):
    """Old #12 with slots: SIGKILL of the worker kills the validator (die-with-parent), the kernel drops
    the slot's lock, and the cgroup the worker could not remove goes when a worker starts."""
    from django.conf import settings

    sleep_for = f"97.{os.getpid()}"
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, sleep_for], stdout=subprocess.PIPE, cwd=settings.BASE_DIR
    )
    assert worker.stdout.readline().strip() == b"started"
    deadline = time.monotonic() + 20
    while not (seen := _seen(f"sleep {sleep_for}")):
        assert time.monotonic() < deadline, "the validator never started"
        time.sleep(0.05)
    uid, cgroup = seen
    slot = int(cgroup.rsplit("-", 1)[1])
    assert uid == Confinement().uid_base + slot
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    deadline = time.monotonic() + 10
    while _seen(f"sleep {sleep_for}"):
        assert time.monotonic() < deadline, "the validator outlived its worker"
        time.sleep(0.1)
    group = Confinement().hierarchy().group(f"slot-{slot}")
    assert group.exists()  # the dead worker could not clean up
    assert str(group.memory) in sandbox.remove_stale_cgroups(Confinement())
    assert not group.exists()
