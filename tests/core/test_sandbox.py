"""The validator sandbox's mechanics: outcomes, time limit, output cap, missing binaries, escaping
artifact names, the scrubbed environment and clean-up. Real subprocesses, no database. These run the
command directly (`confinement=None`, so a test can use its own scripts and see the processes from
outside); the same mechanics under bubblewrap, and containment itself, are
tests/core/test_sandbox_escapes.py."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import sys
import tempfile
import textwrap
import time
import tracemalloc
from pathlib import Path, PurePosixPath

import pytest

from smrweb.core import sandbox
from smrweb.core.sandbox import SandboxResult, run_validator, safe_artifact_path

PY = sys.executable


def py(code: str, *args: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code), *args]


def run(command, artifact: bytes | io.IOBase = b"", name: str = "artifact.bin", **kwargs) -> SandboxResult:
    return run_validator(command, artifact, artifact_name=name, **{"confinement": None, **kwargs})


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def is_running(pid: int) -> bool:
    """Alive and not a zombie (a killed grandchild may wait, defunct, for its new parent to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_until_dead(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not is_running(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def sandbox_parent(tmp_path, monkeypatch):
    """Sandboxes are created (and anything escaping from them would land) inside this test's tmp_path."""
    parent = tmp_path / "outer" / "inner" / "tmp"
    parent.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    return parent


# --- outcomes ---------------------------------------------------------------------------------


def test_exit_0_passes_and_the_validator_reads_the_artifact():
    command = py("import sys; print(open(sys.argv[1], 'rb').read().decode())", "{artifact}")
    result = run(command, b"hello onnx")
    assert result == SandboxResult("passed", 0, "hello onnx\n", result.duration_s, "exited 0")
    assert result.duration_s >= 0


def test_exit_1_fails_and_keeps_stdout_and_stderr_in_order():
    result = run(
        py("""
        import sys
        print("checking", flush=True)
        print("bad opset", file=sys.stderr, flush=True)
        sys.exit(1)
    """)
    )
    assert (result.outcome, result.exit_code, result.detail) == ("failed", 1, "exited 1")
    assert result.output_tail == "checking\nbad opset\n"


def test_other_non_zero_exits_fail():
    result = run(py("raise SystemExit(3)"))
    assert (result.outcome, result.exit_code, result.detail) == ("failed", 3, "exited 3")


def test_exit_2_means_cannot_verify():
    result = run(py("import sys; print('onnx is not installed'); sys.exit(2)"))
    assert (result.outcome, result.exit_code) == ("cannot_verify", 2)
    assert "could not check" in result.detail
    assert result.output_tail == "onnx is not installed\n"


def test_a_wrapper_whose_tool_is_missing_exits_127_and_cannot_verify():
    result = run(["sh", "-c", "smrweb-no-such-tool-xyz {artifact}"])
    assert (result.outcome, result.exit_code) == ("cannot_verify", 127)


def test_a_python_validator_that_does_not_exist_cannot_verify(tmp_path):
    result = run(["python3", str(tmp_path / "missing_validator.py"), "{artifact}"])  # python exits 2
    assert result.outcome == "cannot_verify"


def test_death_by_a_signal_fails():
    result = run(py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert (result.outcome, result.exit_code, result.detail) == ("failed", -9, "killed by signal SIGKILL")


# --- command shape ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "detail"),
    [
        (None, "no command configured"),
        ([], "no command configured"),
        ([""], "no command configured"),
        ("onnxcheck {artifact}", "command must be an argument list, not a shell string"),
        ({"cmd": "x"}, "command must be an argument list"),
        (["onnxcheck", 3], "command must be an argument list of strings"),
        (["onnxcheck", "a\x00b"], "command must not contain NUL characters"),
    ],
)
def test_a_command_that_is_not_an_argument_list_cannot_verify(command, detail, sandbox_parent):
    result = run(command)
    assert result == SandboxResult("cannot_verify", None, "", 0.0, detail)
    assert not any(sandbox_parent.iterdir())  # refused before a sandbox was made


def test_a_missing_binary_cannot_verify():
    result = run(["smrweb-no-such-validator-xyz", "{artifact}"])
    assert result == SandboxResult(
        "cannot_verify", None, "", 0.0, "`smrweb-no-such-validator-xyz` is not installed on this worker"
    )


def test_a_file_without_execute_permission_cannot_verify(tmp_path):
    script = tmp_path / "check.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    result = run([str(script)])
    assert result.outcome == "cannot_verify"
    assert result.detail == f"`{script}` is not executable on this worker"


def test_a_script_whose_interpreter_is_missing_says_so(tmp_path):
    script = tmp_path / "check"
    script.write_text("#!/nonexistent/bin/onnxpython\n")
    script.chmod(0o755)
    result = run([str(script)])
    assert result.outcome == "cannot_verify"
    assert "interpreter" in result.detail


def test_shell_metacharacters_are_passed_literally(tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"$(touch {marker}); touch {marker} && `touch {marker}` | cat > {marker} *"
    result = run(["echo", hostile])
    assert result.outcome == "passed"
    assert result.output_tail == hostile + "\n"
    assert not marker.exists()


def test_placeholders_are_replaced_inside_arguments_in_one_pass(tmp_path):
    result = run(
        py(
            "import sys; print('\\n'.join(sys.argv[1:]))",
            "--model={artifact}",
            "{workdir}",
            "{validators}/check.py",
            "{unknown}",
            '{"json": {python}}',
        ),
        name="x{workdir}y.onnx",
        extra_placeholders={"validators": "/srv/validators"},
    )
    model, workdir, validator, unknown, json_arg = result.output_tail.splitlines()
    assert model == f"--model={workdir}/artifact/x{{workdir}}y.onnx"  # the name's {workdir} stays literal
    assert Path(workdir).is_absolute()
    assert validator == "/srv/validators/check.py"
    assert unknown == "{unknown}"
    assert json_arg == f'{{"json": {PY}}}'


@pytest.mark.parametrize("extra", [{"artifact": "x"}, {"not a name": "x"}, {"ok": "a\x00b"}])
def test_bad_extra_placeholders_are_a_programming_error(extra):
    with pytest.raises(ValueError):
        run(["true"], extra_placeholders=extra)


# --- time limit -------------------------------------------------------------------------------


def test_a_timeout_kills_the_validator_and_its_grandchildren(monkeypatch):
    monkeypatch.setattr(sandbox, "KILL_GRACE_S", 0.5)
    # Both ignore SIGTERM (SIG_IGN is inherited across exec), so only the SIGKILL to the group ends them.
    command = py("""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(["sleep", "600"])
        print(child.pid, flush=True)
        time.sleep(600)
    """)
    started = time.monotonic()
    result = run(command, timeout=1)
    assert (result.outcome, result.exit_code) == ("timed_out", None)
    assert result.detail == "killed after 1 s (the time limit)"
    assert time.monotonic() - started < 15
    grandchild = int(result.output_tail.split()[0])
    assert wait_until_dead(grandchild), f"grandchild {grandchild} survived the timeout"


def test_a_process_left_behind_by_a_finished_validator_is_killed():
    result = run(["sh", "-c", "sleep 600 & echo $!"])
    assert result.outcome == "passed"
    assert result.duration_s < 10  # did not wait for the background sleep to release the pipe
    assert wait_until_dead(int(result.output_tail))


def test_a_process_that_left_the_group_does_not_hang_the_sandbox(monkeypatch):
    monkeypatch.setattr(sandbox, "DRAIN_S", 0.3)
    result = run(
        py("""
        import subprocess
        p = subprocess.Popen(["sleep", "600"], start_new_session=True)
        print(p.pid, flush=True)
    """)
    )
    escaped = int(result.output_tail)
    try:
        assert result.outcome == "passed"
        assert result.duration_s < 10
    finally:
        os.kill(escaped, signal.SIGKILL)  # documented limitation: setsid escapes the group kill


# --- output -----------------------------------------------------------------------------------


def test_huge_output_is_capped_to_its_tail_without_holding_it_in_memory():
    cap = 16_000
    mib = 1024 * 1024
    command = py(f"""
        import sys
        line = b"x" * ({mib} - 1) + b"\\n"
        for _ in range(50):
            sys.stdout.buffer.write(line)
        sys.stdout.buffer.write(b"END\\n")
    """)
    tracemalloc.start()
    try:
        result = run(command, output_cap=cap, timeout=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.outcome == "passed"
    assert peak < 4 * mib, f"peak {peak} bytes for 50 MiB of output"
    output = result.output_tail
    assert len(output) <= cap
    assert output.startswith("[… ") and output.endswith("x\nEND\n")
    marker, body = output.split("\n", 1)
    cut = int(marker.removeprefix("[… ").removesuffix(" bytes cut …]"))
    assert cut + len(body) == 50 * mib + 4


def test_output_under_the_cap_is_kept_whole():
    result = run(py("print('a' * 99)"), output_cap=100)
    assert result.output_tail == "a" * 99 + "\n"


def test_a_cut_never_starts_in_the_middle_of_a_character():
    result = run(py("print('é' * 5000)"), output_cap=101)
    assert len(result.output_tail) <= 101
    body = result.output_tail.split("\n", 1)[1]
    assert body.strip("\n") and set(body.strip("\n")) == {"é"}


def test_nul_bytes_in_the_output_are_replaced():
    result = run(py(r"import sys; sys.stdout.buffer.write(b'a\x00b\xff\n')"))
    assert result.output_tail == "a\ufffdb\ufffd\n"


def test_progress_reports_the_latest_line_at_most_every_half_second():
    lines = []
    result = run(
        py("""
        import time
        for i in range(6):
            print(f"step {i}")
            time.sleep(0.25)
    """),
        on_progress=lines.append,
    )
    assert result.outcome == "passed"
    assert 1 <= len(lines) <= 5  # 1.5 s of output: throttled, not once per line
    assert all(line.startswith("step ") for line in lines)
    assert len(set(lines)) == len(lines)


def test_a_failing_progress_callback_does_not_fail_the_verification():
    def broken(line):
        raise RuntimeError("database is gone")

    result = run(py("import time; print('working', flush=True); time.sleep(0.3)"), on_progress=broken)
    assert result.outcome == "passed"


# --- environment ------------------------------------------------------------------------------


def test_the_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "hunter2-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://u:hunter2-db@h/d")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2-aws")
    monkeypatch.setenv("SMR_API_KEY", "hunter2-smr")
    result = run(["env"])
    env = dict(line.split("=", 1) for line in result.output_tail.splitlines())
    assert set(env) == {
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
    }
    assert env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert "hunter2" not in result.output_tail
    assert env["HOME"] == env["TMPDIR"]
    assert env["LC_ALL"] == "C.UTF-8"
    assert env["PATH"].endswith("/usr/local/bin:/usr/bin:/bin")


def test_python3_is_the_workers_interpreter_and_runs_in_the_workdir():
    result = run(["python3", "-c", "import os, sys; print(sys.prefix); print(os.getcwd())", "{workdir}"])
    prefix, cwd = result.output_tail.splitlines()
    assert prefix == sys.prefix
    assert Path(cwd).name.startswith("smrweb-validate-")


# --- artifact placement -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("submission/policy.onnx", "submission/policy.onnx"),
        ("../../escape.txt", "escape.txt"),
        ("/etc/passwd", "etc/passwd"),
        ("a/../../b", "a/b"),
        ("..", "artifact"),
        ("", "artifact"),
        ("\x00", "_"),
        ("a\x00b/../c", "a_b/c"),
        ("..\\..\\win\\model.bin", "win/model.bin"),
        ("./././x", "x"),
        ("  ", "artifact"),
        ("-rf", "-rf"),
    ],
)
def test_safe_artifact_path_removes_every_way_out(name, expected):
    assert safe_artifact_path(name) == PurePosixPath(expected)


def test_safe_artifact_path_bounds_long_and_deep_names():
    long = safe_artifact_path("n" * 1000 + ".onnx")
    assert len(str(long).encode()) <= 255 and str(long).endswith(".onnx")
    deep = safe_artifact_path("/".join(f"d{i}" for i in range(100)) + "/model.onnx")
    assert len(deep.parts) == 8 and deep.name == "model.onnx"
    assert len(str(safe_artifact_path("é" * 300)).encode()) <= 255


@pytest.mark.parametrize(
    "name",
    [
        "../../escape.txt",
        "/etc/passwd",
        "a/../../b",
        "..",
        "\x00",
        "../../../../../../../../../../../../tmp/escape",
        "..\\..\\escape",
    ],
)
def test_escaping_artifact_names_stay_inside_the_sandbox(name, sandbox_parent, tmp_path):
    before = files_under(tmp_path)
    result = run(
        py(
            """
        import os, sys
        artifact, workdir = sys.argv[1:]
        print(os.path.realpath(artifact).startswith(os.path.realpath(workdir) + os.sep))
        print(open(artifact, "rb").read().decode())
    """,
            "{artifact}",
            "{workdir}",
        ),
        b"payload",
        name=name,
    )
    assert result.output_tail == "True\npayload\n", result
    assert files_under(tmp_path) == before  # nothing written outside, and the sandbox itself is gone


def test_a_large_artifact_is_streamed_from_a_file_object(tmp_path):
    source = tmp_path / "big.onnx"
    block = os.urandom(1024 * 1024)
    with open(source, "wb") as out:
        out.writelines(block for _ in range(32))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    tracemalloc.start()
    try:
        with open(source, "rb") as artifact:
            result = run(
                py(
                    """
                import hashlib, sys
                h = hashlib.sha256()
                with open(sys.argv[1], "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                print(h.hexdigest())
            """,
                    "{artifact}",
                ),
                artifact,
                name="submission/big.onnx",
            )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.output_tail == digest + "\n"
    assert peak < 8 * 1024 * 1024  # copied in chunks, never read whole


# --- clean-up ---------------------------------------------------------------------------------


def test_the_sandbox_is_removed_afterwards_even_if_the_validator_locks_it(sandbox_parent):
    lock = "mkdir -p locked/deep && touch locked/deep/f && chmod 000 locked/deep locked; pwd"
    result = run(["sh", "-c", lock])
    assert result.outcome == "passed"
    assert not Path(result.output_tail.strip()).exists()
    assert not any(sandbox_parent.iterdir())


def test_the_sandbox_is_removed_after_a_timeout(sandbox_parent):
    result = run(["sh", "-c", "pwd; exec sleep 600"], timeout=0.5)
    assert result.outcome == "timed_out"
    assert not Path(result.output_tail.strip()).exists()
    assert not any(sandbox_parent.iterdir())


def test_the_sandbox_is_removed_when_reading_the_artifact_fails(sandbox_parent):
    class FailingStorage(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, buffer):
            raise OSError("connection reset by storage")

    with pytest.raises(OSError, match="connection reset"):
        run(["true"], FailingStorage())
    assert not any(sandbox_parent.iterdir())


def test_a_symlink_planted_by_the_validator_is_not_followed_on_clean_up(tmp_path, sandbox_parent):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    outside.chmod(0o755)
    result = run(["ln", "-s", str(outside), "{workdir}/link"])
    assert result.outcome == "passed"
    assert (outside / "keep.txt").read_text() == "keep"
    assert oct(outside.stat().st_mode & 0o777) == oct(0o755)
    assert not any(sandbox_parent.iterdir())
