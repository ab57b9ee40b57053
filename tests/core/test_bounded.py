"""core/bounded.py: a program on untrusted bytes is ended at its memory, CPU or wall-clock limit, and the
answer says which (red-team N2: the ONNX summary runs under it on a worker). Real subprocesses."""

from __future__ import annotations

import sys

from smrweb.core import bounded

MiB = 1024**2


def run(code: str, stdin: bytes = b"", **limits):
    options = {"memory_bytes": 512 * MiB, "cpu_seconds": 10, "wall_seconds": 20.0, **limits}
    return bounded.run_bounded([sys.executable, "-I", "-c", code], stdin, **options)


def test_a_program_within_its_limits_answers():
    done = run("import sys; sys.stdout.write(sys.stdin.read().upper())", b"model")
    assert done.ok and done.stdout == b"MODEL" and done.limit == ""


def test_memory_past_the_cap_ends_the_program_and_says_so():
    done = run("x = bytearray(2 * 1024**3)", memory_bytes=256 * MiB)
    assert done.limit == bounded.MEMORY and not done.ok and "MemoryError" in done.stderr


def test_cpu_time_past_the_cap_ends_the_program():
    done = run("while True: pass", cpu_seconds=1)
    assert done.limit == bounded.CPU and done.seconds < 10


def test_the_wall_clock_ends_a_program_that_only_waits():
    done = run("import time; time.sleep(60)", wall_seconds=1.0)
    assert done.limit == bounded.WALL and done.seconds < 10


def test_the_program_writes_no_files(tmp_path):
    done = run(f"with open({str(tmp_path / 'out')!r}, 'w') as f: f.write('x' * 10)")
    assert not done.ok and "File too large" in done.stderr and not (tmp_path / "out").read_text()
