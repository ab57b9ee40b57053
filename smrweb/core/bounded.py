"""Run a program on untrusted bytes under hard limits: its address space (RLIMIT_AS), its CPU time
(RLIMIT_CPU) and the wall clock, no files written, no core dumps; killed with its process group at the
wall-clock limit. The answer says which limit, if any, ended it.

For parsers of uploaded bytes (the ONNX summary, `sources/summaries.py`): a limit of the process, not a
sandbox — the program is our own code, what is untrusted is its input. Validators, which are not our
code, run under `core.sandbox`.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from dataclasses import dataclass

MEMORY = "memory"
CPU = "cpu"
WALL = "wall"
EXIT_OUT_OF_MEMORY = 3  # what a program that caught MemoryError exits with (by convention here)
_OUT_OF_MEMORY_SIGNALS = (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS)  # a C allocation that failed
_STDERR_TAIL = 2000


@dataclass
class Bounded:
    returncode: int
    stdout: bytes
    stderr: str  # its tail
    limit: str = ""  # MEMORY | CPU | WALL when one ended the program
    seconds: float = 0.0  # of wall clock

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.limit


def run_bounded(
    argv: list[str],
    stdin: bytes,
    *,
    memory_bytes: int,
    cpu_seconds: int,
    wall_seconds: float,
    env: dict[str, str] | None = None,
) -> Bounded:
    """`argv` with `stdin` as its input, under the limits; never raises for what the program does."""
    import time

    def limit() -> None:  # in the child, before exec
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))  # SIGXCPU, then SIGKILL
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    started = time.monotonic()
    children_cpu = _children_cpu()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=limit,  # noqa: PLW1509 - a worker process, no threads to race the fork
        start_new_session=True,  # its own process group: killed whole
        close_fds=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(stdin, timeout=wall_seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:  # an exception of ours (KeyboardInterrupt, a soft time limit)
            _kill_group(proc.pid)
            proc.wait()
    code = proc.returncode
    if timed_out:
        hit = WALL
    elif code == -signal.SIGXCPU or code == -signal.SIGKILL and _children_cpu() - children_cpu >= cpu_seconds:
        hit = CPU  # RLIMIT_CPU's soft, then hard limit
    elif code == -signal.SIGKILL:
        hit = MEMORY  # killed by no one here with CPU time to spare: the kernel's out-of-memory killer
    elif code == EXIT_OUT_OF_MEMORY or -code in _OUT_OF_MEMORY_SIGNALS or code and b"MemoryError" in err:
        hit = MEMORY  # reported, a failed C allocation, or Python's uncaught MemoryError
    else:
        hit = ""
    tail = err.decode("utf-8", "replace")[-_STDERR_TAIL:]
    return Bounded(code, out, tail, hit, time.monotonic() - started)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # of children waited for: this one, once done
    return usage.ru_utime + usage.ru_stime
