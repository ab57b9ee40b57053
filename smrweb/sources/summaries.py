"""Blob summaries computed on a worker (red-team N2): the bytes of an uploaded ONNX model are parsed by
`core/onnx_summary.py` run as its own program, under a memory cap (RLIMIT_AS), a CPU-time cap and a
wall-clock timeout (`core.bounded`), with none of the worker's environment. Whatever it does — a
bomb of millions of nodes, a crash of the protobuf runtime — the worker records one of done, unreadable
(why) or too large (which limit), once per digest (`tracking.services.summaries`), and pages show it.
Two models' weights are compared the same way (`--compare`, both models on stdin), once per pair.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from django.conf import settings

from smrweb.core import bounded, onnx_summary
from smrweb.tracking import services
from smrweb.tracking.errors import ArtifactBytesMissing
from smrweb.tracking.models import SummaryStatus
from smrweb.tracking.services import summaries as stored
from smrweb.tracking.services.artifacts import open_blob

log = logging.getLogger(__name__)

SCRIPT = Path(onnx_summary.__file__)  # runs standalone: the standard library and `onnx` only
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    # numpy (imported by onnx) maps a buffer per BLAS thread: one thread keeps the address space small.
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def summarize(summary_id: int) -> str:
    """Compute a claimed summary (`smrweb.tasks.summarize_blob`); its status, or "skipped" when it is
    done already or another worker has it."""
    row = services.start_summary(summary_id)
    if row is None:
        return "skipped"
    if row.kind == stored.ONNX:
        status, result, reason = read_onnx(row.blob)
    elif row.kind == stored.ONNX_WEIGHTS and row.other is not None:
        status, result, reason = compare_onnx(row.blob, row.other)
    else:
        raise ValueError(f"no summariser of kind {row.kind!r}")
    services.record_summary(row.pk, status, result=result, reason=reason)
    return status


def read_onnx(blob) -> tuple[str, dict | None, str]:
    """(status, result, reason) for a blob's bytes read as an ONNX model, under the limits."""
    data = _read(blob)
    if isinstance(data, tuple):
        return data
    return _run([], data, "summary", f"ONNX summary of blob {blob.sha256}")


def compare_onnx(blob, other) -> tuple[str, dict | None, str]:
    """(status, result, reason) for two blobs' weights compared element by element, under the same limits
    as one summary (`onnx_summary.compare`)."""
    first = _read(blob)
    if isinstance(first, tuple):
        return first
    second = _read(other)
    if isinstance(second, tuple):
        return second
    data = len(first).to_bytes(8, "big") + first + second
    del first, second
    return _run(["--compare"], data, "comparison", f"ONNX weights of blobs {blob.sha256}/{other.sha256}")


def _read(blob) -> bytes | tuple[str, dict | None, str]:
    """The blob's bytes, or the (status, result, reason) that says why they are not read."""
    cap = onnx_summary.MAX_BYTES
    if blob.size > cap:
        return (
            SummaryStatus.TOO_LARGE,
            {"limit": "bytes"},
            f"the model is {blob.size:,} bytes; only models up to {cap:,} bytes are summarized",
        )
    try:
        with open_blob(blob) as handle:
            return handle.read(cap + 1)
    except ArtifactBytesMissing as exc:
        return SummaryStatus.UNREADABLE, None, exc.message


def _run(options: list[str], data: bytes, key: str, what: str) -> tuple[str, dict | None, str]:
    memory = settings.SMRWEB_SUMMARY_MEMORY_BYTES
    cpu, wall = settings.SMRWEB_SUMMARY_CPU_SECONDS, settings.SMRWEB_SUMMARY_WALL_SECONDS
    run = bounded.run_bounded(
        [sys.executable, "-I", str(SCRIPT), *options],
        data,
        memory_bytes=memory,
        cpu_seconds=cpu,
        wall_seconds=wall,
        env=_ENV,
    )
    spent = {"limit": run.limit, "seconds": round(run.seconds, 2), "exit": run.returncode}
    if run.limit:
        why = {
            bounded.MEMORY: f"reading it needs more than {memory / 1024**2:,.0f} MiB of memory",
            bounded.CPU: f"reading it takes more than {cpu} s of CPU time",
            bounded.WALL: f"reading it takes more than {wall:g} s",
        }[run.limit]
        log.warning("%s stopped at its %s limit", what, run.limit)
        return SummaryStatus.TOO_LARGE, spent, why
    try:
        answer = json.loads(run.stdout) if run.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        log.error("%s failed (exit %s): %s", what, run.returncode, run.stderr)
        return SummaryStatus.UNREADABLE, spent, f"the summary program failed (exit status {run.returncode})"
    if key in answer:
        return SummaryStatus.DONE, answer[key], ""
    if "too_large" in answer:
        return SummaryStatus.TOO_LARGE, {**spent, "limit": "checks"}, answer["too_large"]
    return SummaryStatus.UNREADABLE, None, str(answer.get("error", "unreadable"))
