"""Red-team finding 4 (and 12): an artifact run by a validator (a staff-made scenario whose validator is
`python3 {artifact}`) tries every escape of the review under the real bubblewrap sandbox, and each is
contained: the worker's environment, other processes, the data directory, the network, process, file,
memory and CPU limits, writes outside the work directory, `setsid`, and the worker's death."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings

from smrweb.core import sandbox
from smrweb.core.sandbox import CANNOT_VERIFY, FAILED, PASSED, Confinement, run_validator

pytestmark = pytest.mark.skipif(
    not Path("/usr/bin/bwrap").exists(), reason="bubblewrap is installed by make test"
)

ESCAPES = r"""
import json, os, socket, subprocess, sys
out = {}
def attempt(name, fn):
    try:
        out[name] = ["ok", repr(fn())[:200]]
    except BaseException as exc:
        out[name] = ["refused", type(exc).__name__]
attempt("parent environ", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read())
attempt("pid 1 environ", lambda: open("/proc/1/environ", "rb").read())
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
attempt("secret key", lambda: open(sys.argv[1], "rb").read())
attempt("database", lambda: open(sys.argv[2], "rb").read(16))
attempt("network", lambda: socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=2))
attempt("write /usr", lambda: open("/usr/pwned", "w"))
attempt("write /etc", lambda: open("/etc/pwned", "w"))
attempt("write /tmp", lambda: open("/tmp/pwned-" + sys.argv[4], "w").write("x"))
out["uid"] = os.getuid()
out["env"] = sorted(os.environ)
out["cwd"] = os.getcwd()
out["artifact"] = sys.argv[0]
subprocess.Popen(["setsid", "sleep", sys.argv[5]])
forks = 0
children = []
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        import time; time.sleep(5); os._exit(0)
    children.append(pid)
    forks += 1
out["forks"] = forks
def big_write():
    with open("big", "wb") as fh:
        for _ in range(1024):
            fh.write(b"x" * (1024 * 1024))
attempt("big write", big_write)
attempt("big allocation", lambda: len(bytearray(3 * 1024 ** 3)))
print("RESULT " + json.dumps(out))
"""


def escape(tmp_path, kind=Confinement, **confine) -> tuple[dict, object]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.2)
    accepted = []

    def accept():
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                accepted.append(listener.accept())
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    tag = f"{os.getpid()}{time.monotonic_ns() % 10**6}"
    sleep_for = f"97.{tag}"
    secret, database = settings.DATA_DIR / "secret_key", Path(settings.DATABASES["default"]["NAME"])
    limits = {"memory_bytes": 1024**3, "file_bytes": 32 * 1024**2, **confine}
    if kind is Confinement:
        limits.setdefault("processes", 32)
    result = run_validator(
        [
            sys.executable,
            "{artifact}",
            str(secret),
            str(database),
            str(listener.getsockname()[1]),
            tag,
            sleep_for,
        ],
        ESCAPES.encode(),
        artifact_name="submission/selftest.py",
        timeout=60,
        confinement=kind(**limits),
    )
    time.sleep(0.5)
    listener.close()
    line = next(line for line in result.output_tail.splitlines() if line.startswith("RESULT "))
    found = json.loads(line[len("RESULT ") :])
    found["connections seen"] = len(accepted)
    found["sleep outlived"] = any(sleep_for in _cmdline(pid) for pid in _pids())
    found["tmp leaked"] = Path(f"/tmp/pwned-{tag}").exists()
    return found, result


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def test_every_escape_of_the_review_is_contained(tmp_path, db):
    assert (settings.DATA_DIR / "secret_key").exists()  # there is something to steal
    found, result = escape(tmp_path)
    assert result.outcome == PASSED, result
    assert found["parent environ"][0] == "refused" and found["pid 1 environ"][0] == "refused"
    assert os.getpid() not in found["pids"] and len(found["pids"]) <= 3  # its own processes only
    assert found["secret key"] == ["refused", "FileNotFoundError"]
    assert found["database"] == ["refused", "FileNotFoundError"]
    assert found["network"][0] == "refused" and found["connections seen"] == 0
    assert found["write /usr"][0] == "refused" and found["write /etc"][0] == "refused"
    assert found["write /tmp"][0] == "ok" and not found["tmp leaked"]  # a private /tmp
    base = Confinement().uid_base
    assert base <= found["uid"] < base + Confinement().slots  # a slot's own uid (N4), not a shared one
    assert set(found["env"]) <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONNOUSERSITE",
        "PYTHONUNBUFFERED",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "PWD",
    }  # PWD: /sandbox, set by bwrap; one BLAS thread (the per-uid thread cap)
    assert found["cwd"] == "/sandbox" and found["artifact"] == "/sandbox/artifact/submission/selftest.py"
    assert found["forks"] < 32  # RLIMIT_NPROC
    assert found["big write"] == ["refused", "OSError"]  # RLIMIT_FSIZE: EFBIG
    assert found["big allocation"] == ["refused", "MemoryError"]  # RLIMIT_AS
    assert not found["sleep outlived"]  # `setsid sleep` died with the sandbox
    assert str(tmp_path) not in result.output_tail and "smrweb-validate-" not in result.output_tail


def test_the_personal_sandbox_of_smrweb_rescore_contains_them_too(tmp_path, db):
    """`smrweb rescore` run by someone who is not root (PersonalConfinement): no uid or cgroup of its own,
    but the same namespaces, read-only root, private /tmp and limits per process."""
    found, result = escape(tmp_path, kind=sandbox.PersonalConfinement)
    assert result.outcome == PASSED, result
    # One uid inside: its parents' environments can be read, and they are the scrubbed one.
    for parent in ("parent environ", "pid 1 environ"):
        said = found[parent][1]
        assert "PATH=" in said and not any(leak in said for leak in ("SECRET", "DATABASE", "DJANGO", "TOKEN"))
    assert os.getpid() not in found["pids"]  # a PID namespace of its own
    assert found["secret key"] == ["refused", "FileNotFoundError"]
    assert found["database"] == ["refused", "FileNotFoundError"]
    assert found["network"][0] == "refused" and found["connections seen"] == 0
    assert found["write /usr"][0] == "refused" and found["write /etc"][0] == "refused"
    assert found["write /tmp"][0] == "ok" and not found["tmp leaked"]
    assert found["cwd"] == "/sandbox" and found["artifact"] == "/sandbox/artifact/submission/selftest.py"
    assert found["big write"] == ["refused", "OSError"]  # RLIMIT_FSIZE
    assert found["big allocation"] == ["refused", "MemoryError"]  # RLIMIT_AS
    assert not found["sleep outlived"]  # the PID namespace ends with the validator
    assert str(tmp_path) not in result.output_tail and "smrweb-validate-" not in result.output_tail


def test_a_cpu_loop_is_stopped_by_its_cpu_limit():
    result = run_validator(
        [sys.executable, "-c", "while True: pass"],
        b"",
        artifact_name="a",
        timeout=60,
        confinement=Confinement(cpu_seconds=1),
    )
    assert result.outcome == FAILED and result.detail in (
        "killed by signal SIGXCPU",
        "killed by signal SIGKILL",
    ), result


def test_the_shipped_validator_runs_confined(tmp_path):
    validators = Path(settings.BASE_DIR) / "smrweb" / "validators"
    good = b"class Optimizer:\n    def step(self):\n        return 0\n"
    result = run_validator(
        [sys.executable, "{validators}/optimizer_py.py", "{artifact}"],
        good,
        artifact_name="submission/optimizer.py",
        extra_placeholders={"validators": str(validators)},
        confinement=Confinement(readonly=(str(validators),)),
    )
    assert result.outcome in (PASSED, FAILED) and "could not start" not in result.detail, result
    assert "No such file" not in result.output_tail and "Permission denied" not in result.output_tail


def test_without_bubblewrap_nothing_runs_and_it_says_so():
    marker = Path(f"/tmp/smrweb-unconfined-{os.getpid()}")
    result = run_validator(
        ["touch", str(marker)], b"", artifact_name="a", confinement=Confinement(bwrap="/nonexistent/bwrap")
    )
    assert result.outcome == CANNOT_VERIFY and "bubblewrap (`bwrap`) is not installed" in result.detail
    assert not marker.exists()


WORKER = textwrap.dedent("""
    import sys
    from smrweb.core.sandbox import Confinement, run_validator
    print("started", flush=True)
    run_validator(["sleep", sys.argv[1]], b"", artifact_name="a", timeout=120, confinement=Confinement())
""")


def test_a_killed_worker_takes_its_validator_along_and_the_next_one_removes_its_work_directory(tmp_path):
    """Finding 12: SIGKILL of the process running a validator left the validator running (parent 1)
    and its work directory on disk."""
    sleep_for = f"98.{os.getpid()}"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, sleep_for], env=env, stdout=subprocess.PIPE, cwd=settings.BASE_DIR
    )
    assert worker.stdout.readline().strip() == b"started"
    running = (
        f"sleep {sleep_for}"  # the validator (and its bwrap), not the worker, whose argv holds sleep_for too
    )
    # Killed once the validator itself runs: by then every bubblewrap on the way has set its death signal.
    # (A worker killed in the milliseconds before the first one has is left to the next slot holder, which
    # kills what is left in the slot's cgroup.)
    deadline = time.monotonic() + 20
    while not any(_cmdline(pid).startswith(f"{running} ") for pid in _pids()):
        assert time.monotonic() < deadline, "the validator never started"
        time.sleep(0.1)
    workdirs = list(tmp_path.glob("smrweb-validate-*"))
    assert len(workdirs) == 1 and f"-{worker.pid}-" in workdirs[0].name
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    deadline = time.monotonic() + 30  # generous: a loaded CI machine (two suites side by side) reaps slowly
    while any(running in _cmdline(pid) for pid in _pids()):
        assert time.monotonic() < deadline, "the validator outlived its worker"
        time.sleep(0.1)
    assert sandbox.remove_stale_workdirs(str(tmp_path)) == [str(workdirs[0])]
    assert not workdirs[0].exists()
    live = tmp_path / f"smrweb-validate-{os.getpid()}-x"  # a running worker's directory is kept
    live.mkdir()
    assert sandbox.remove_stale_workdirs(str(tmp_path)) == [] and live.exists()


def test_a_silent_validator_still_sends_a_heartbeat(monkeypatch):
    monkeypatch.setattr(sandbox, "HEARTBEAT_S", 0.6)
    beats = []
    run_validator(["sleep", "2"], b"", artifact_name="a", confinement=None, on_progress=beats.append)
    assert beats and set(beats) == {""}


REPORT = b"""import os, sys
print("uid", os.getuid(), "cwd", os.getcwd(), "artifact", sys.argv[0])
try:
    print("parent env", open(f"/proc/{os.getppid()}/environ", "rb").read()[:40])
except OSError as exc:
    print("parent env refused:", type(exc).__name__)
"""


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_reviews_exec_scenario_through_the_real_worker(bob, project, celery_worker):
    """The review's reproduction: a scenario whose validator runs the artifact, verified by a worker.
    The output the project's token can read shows the jail, not the worker (no temp paths, no env)."""
    from tests.sources.test_submission_loop import scored_with_artifact

    project.scenario.validator_command = ["python3", "{artifact}"]
    project.scenario.save()
    sub = scored_with_artifact(project, REPORT)
    from smrweb.tasks import verify_submission
    from smrweb.tracking.models import Submission
    from smrweb.tracking.services import submissions as lifecycle
    from tests.conftest import wait_for

    lifecycle.request_verification(sub, by=bob)
    verify_submission.delay(sub.pk)
    wait_for(lambda: Submission.objects.get(pk=sub.pk).status == "verified", timeout=60)
    sub.refresh_from_db()
    output = sub.verification_output
    assert re.search(r"uid 600\d\d cwd /sandbox artifact /sandbox/artifact/submission/optimizer.py", output)
    assert "parent env refused: PermissionError" in output
    assert "smrweb-validate-" not in output and "SECRET" not in output


def test_a_copy_delivered_while_the_validator_runs_does_not_run_it_twice(bob, project):
    """Finding 12: the stale-action sweep re-queued a silent verification that was still running. The
    running one holds a claim its heartbeat renews; a second copy skips."""
    from django.core.cache import cache

    from smrweb.core.cachekeys import verifying as _running_key
    from smrweb.tasks import verify_submission
    from smrweb.tracking.models import Submission
    from smrweb.tracking.services import submissions as lifecycle
    from tests.sources.test_submission_loop import scored_with_artifact

    sub = scored_with_artifact(project, b"ok")
    lifecycle.request_verification(sub, by=bob)
    cache.add(_running_key(sub.pk), "running", timeout=60)  # what the first copy holds while it runs
    assert verify_submission(sub.pk) == "skipped: a validator for it is running on a worker"
    assert Submission.objects.get(pk=sub.pk).status == "verifying"
    cache.delete(_running_key(sub.pk))  # its worker died: the claim lapses, the next copy runs
    assert verify_submission(sub.pk) == "cannot_verify"  # the generic scenario has no validator
