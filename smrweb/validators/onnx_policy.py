#!/usr/bin/env python3
"""Validate an ONNX policy for the Dogfight arena: fewer than 250,000 parameters, exactly one input
float32[1,224] and exactly one output float32[1,3]; then run it on random inputs of that shape and check
that every output is finite, float32[1,3], and comes within the time limits.

    python3 onnx_policy.py [--time-limit 1] [--total-time-limit 5] [--max-bytes 67108864] policy.onnx

Exit 0: the model passes. Exit 1: it does not (or the file is missing or unreadable). Exit 2: the check
cannot run here (`onnx`, `onnxruntime` or `numpy` is not installed, bad arguments).

A standalone script on purpose: a sandbox runs it as an argument list with a scrubbed environment, where
smrweb itself is not importable. It needs only the standard library, `onnx`, `onnxruntime` and `numpy`.
Parameters are the elements of every initializer (in subgraphs too; a sparse one counts its stored
values) plus the tensors embedded in `Constant` nodes: weights hidden there are parameters all the same
(`smrweb.core.onnx_summary` counts the same way). The model must be self-contained: one that refers to
external data files is refused, and they are never opened.

The runtime checks start only once the static ones pass: onnxruntime on the CPU, one thread, from the
bytes read here (so no path to resolve external data against), on the 8 seeded DRAWS: zeros, standard
normal, uniform in [-1, 1], and large values (normal × 1,000). A run over the per-run limit is told to
stop (onnxruntime checks between nodes); one that does not stop soon after ends the validation.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

# Before numpy is imported. The sandbox caps processes *and threads* per uid (RLIMIT_NPROC, every
# validator shares uid nobody), and OpenBLAS, loaded with numpy, starts one thread per core at import
# time; when one cannot be created it raises SIGINT. On a worker with more cores than the cap,
# `import numpy` itself would kill the validator. A policy this small needs no BLAS threads.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

MAX_PARAMETERS = 250_000
INPUT_SHAPE, OUTPUT_SHAPE = [1, 224], [1, 3]
MAX_BYTES = 64 * 1024 * 1024
RUN_TIME_LIMIT_S, TOTAL_TIME_LIMIT_S = 1.0, 5.0
LOAD_TIME_LIMIT_S = 30.0  # onnxruntime builds and optimizes the graph; it cannot be told to stop
STOP_GRACE_S = 2.0  # after the terminate flag is set, before giving up on a run
SEED = 17
# (label, draw) in the order they run: 8 inputs.
DRAWS = [
    ("zeros", "zeros"),
    ("normal #1", "normal"),
    ("normal #2", "normal"),
    ("normal #3", "normal"),
    ("uniform #1", "uniform"),
    ("uniform #2", "uniform"),
    ("large #1", "large"),
    ("large #2", "large"),
]
LARGE = 1_000.0


class Usage(argparse.ArgumentParser):
    def error(self, message: str):  # the usual exit 2, said on stdout too so the dashboard shows it
        print(f"CANNOT RUN  {message}")
        super().error(message)


def _shape(value_info) -> list:
    """Dimensions as ints, a symbolic dimension as its name (a string), an unknown one as None."""
    dims = value_info.type.tensor_type.shape.dim
    return [d.dim_param or (d.dim_value if d.dim_value > 0 else None) for d in dims]


def _graphs(graph):
    """The graph and every subgraph in its nodes' attributes (If, Loop, Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from _graphs(attr.g)
            for sub in attr.graphs:
                yield from _graphs(sub)


def parameter_count(model) -> int:
    """Initializers (sparse ones by their stored values) and Constant-node tensors, subgraphs included."""
    count = 0
    for graph in _graphs(model.graph):
        count += sum(math.prod(t.dims) for t in graph.initializer)
        count += sum(math.prod(s.values.dims) for s in graph.sparse_initializer)
        for node in graph.node:
            if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
                continue
            for a in node.attribute:
                if a.name == "value":
                    count += math.prod(a.t.dims)
                elif a.name == "sparse_value":
                    count += math.prod(a.sparse_tensor.values.dims)
                elif a.name in ("value_floats", "value_ints"):
                    count += len(a.floats) + len(a.ints)
    return count


def external_data(model, onnx) -> list[str]:
    """The names of the tensors whose bytes live in files next to the model, with those files."""
    external = onnx.TensorProto.EXTERNAL
    found = []

    def tensors(graph):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        for node in graph.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("sparse_tensor"):
                    yield a.sparse_tensor.values
                    yield a.sparse_tensor.indices

    for graph in _graphs(model.graph):
        for tensor in tensors(graph):
            if tensor.data_location == external or len(tensor.external_data):
                where = next((e.value for e in tensor.external_data if e.key == "location"), "?")
                found.append(f"`{tensor.name or '(unnamed)'}` in `{where}`")
    return found


def _check_io(kind: str, values: list, expected: list[int], float_type: int) -> list[tuple[bool, str]]:
    if len(values) != 1:
        names = ", ".join(v.name for v in values) or "none"
        return [(False, f"exactly one {kind} expected, found {len(values)} ({names})")]
    value = values[0]
    elem, shape = value.type.tensor_type.elem_type, _shape(value)
    name = f"{kind} `{value.name}`"
    return [
        (
            elem == float_type,
            f"{name} element type is float32"
            if elem == float_type
            else f"{name} element type is {elem} (ONNX TensorProto code), expected float32 (1)",
        ),
        (
            shape == expected,
            f"{name} shape is {shape}" + ("" if shape == expected else f", expected {expected}"),
        ),
    ]


def check(model, onnx) -> list[tuple[bool, str]]:
    """(ok, message) for every static rule, in the order they are reported."""
    graph = model.graph
    params = parameter_count(model)
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]  # older IRs list weights as inputs too
    float_type = onnx.TensorProto.FLOAT
    small = params < MAX_PARAMETERS
    return [
        (
            small,
            f"{params:,} parameters"
            + (f" (< {MAX_PARAMETERS:,})" if small else f", must be fewer than {MAX_PARAMETERS:,}"),
        ),
        *_check_io("input", inputs, INPUT_SHAPE, float_type),
        *_check_io("output", list(graph.output), OUTPUT_SHAPE, float_type),
    ]


# --- running the policy --------------------------------------------------------------------------


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def draws(np, shape: list[int], seed: int = SEED) -> list[tuple[str, object]]:
    """The labelled float32 inputs the policy runs on, the same for every model."""
    rng = np.random.default_rng(seed)
    made = {
        "zeros": lambda: np.zeros(shape),
        "normal": lambda: rng.standard_normal(shape),
        "uniform": lambda: rng.uniform(-1.0, 1.0, shape),
        "large": lambda: rng.standard_normal(shape) * LARGE,
    }
    return [(label, made[kind]().astype(np.float32)) for label, kind in DRAWS]


class Watchdog:
    """Sets `options.terminate` when a run outlives its limit (onnxruntime releases the GIL while it
    runs, and checks the flag between nodes); if the run still has not returned STOP_GRACE_S later, says
    so and exits 1. Without a thread to spare (RLIMIT_NPROC), runs are only timed afterwards."""

    def __init__(self, options, limit: float, what: str, path: str):
        import threading

        self.done = threading.Event()
        self.fired = False
        self.options, self.limit, self.what, self.path = options, limit, what, path
        try:
            threading.Thread(target=self._watch, daemon=True).start()
        except RuntimeError:  # can't start new thread
            pass

    def _watch(self) -> None:
        if self.done.wait(self.limit):
            return
        self.fired = True
        if self.options is not None:
            self.options.terminate = True
            if self.done.wait(STOP_GRACE_S):
                return
        print(f"FAIL  too slow: {self.what} took longer than {self.limit:g} s and did not stop")
        print(f"invalid: {self.path}")
        sys.stdout.flush()
        os._exit(1)  # the main thread is inside onnxruntime: only leaving the process ends it

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()


def load_session(data: bytes, ort, path: str):
    """(session or None, (ok, message)): the model in onnxruntime, CPU only, one thread."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: a shape warning would repeat what the FAIL line says
    start = time.perf_counter()
    try:
        with Watchdog(None, LOAD_TIME_LIMIT_S, "loading the model in onnxruntime", path):
            # From bytes, not the path: onnxruntime has no directory to look for external data in.
            session = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 — whatever onnxruntime refuses, the policy cannot run
        return None, (False, f"onnxruntime {ort.__version__} cannot load the model: {_one_line(exc)}")
    took = time.perf_counter() - start
    return session, (True, f"onnxruntime {ort.__version__} loads the model ({took:.3f} s)")


def run_policy(
    session, feed: str, fetch: str, ort, np, *, run_limit: float, total_limit: float, path: str
) -> list[tuple[bool, str]]:
    """(ok, message) for running the policy on every draw: input `feed`, output `fetch`."""
    inputs = draws(np, INPUT_SHAPE)
    wrong_shape, not_finite, durations = [], [], []
    for label, value in inputs:
        limit = min(run_limit, total_limit - sum(durations))
        options = ort.RunOptions()
        options.log_severity_level = 3
        start = time.perf_counter()
        try:
            with Watchdog(options, limit, f"the run on input {label}", path) as watchdog:
                [result] = session.run([fetch], {feed: value}, options)
            error = None
        except Exception as exc:  # noqa: BLE001
            error = exc
        took = time.perf_counter() - start
        durations.append(took)
        if watchdog.fired or took > limit:
            how = "was stopped after" if watchdog.fired else "took"
            over = (
                f"the limit of {run_limit:g} s a run"
                if limit == run_limit
                else f"the limit of {total_limit:g} s for all {len(inputs)} runs "
                f"({sum(durations):.3f} s so far)"
            )
            return [(False, f"too slow: the run on input {label} {how} {took:.3f} s, over {over}")]
        if error is not None:
            return [(False, f"onnxruntime failed on input {label}: {_one_line(error)}")]
        shape = list(getattr(result, "shape", ()))
        dtype = str(getattr(result, "dtype", type(result).__name__))
        if shape != OUTPUT_SHAPE or dtype != "float32":
            wrong_shape.append(f"{dtype}{shape}")
        elif not np.isfinite(result).all():
            kinds = [kind for kind, test in (("NaN", np.isnan), ("inf", np.isinf)) if test(result).any()]
            not_finite.append(f"{label} ({' and '.join(kinds)})")
    count, name = len(inputs), f"output `{fetch}`"
    return [
        (
            not wrong_shape,
            f"{name} is float32{OUTPUT_SHAPE} on all {count} random inputs"
            if not wrong_shape
            else f"{name} is not float32{OUTPUT_SHAPE} at run time, though the model declares it: "
            f"{' or '.join(dict.fromkeys(wrong_shape))} on {len(wrong_shape)} of {count} random inputs",
        ),
        (
            not not_finite,
            f"{name} is finite on all {count} random inputs (seed {SEED}: zeros, normal, uniform in "
            f"[-1, 1], normal × {LARGE:,g})"
            if not not_finite
            else f"non-finite outputs (NaN or inf) from {name} on {len(not_finite)} of {count} random "
            f"inputs: {', '.join(not_finite[:4])}",
        ),
        (
            True,
            f"{count} runs in {sum(durations):.3f} s (slowest {max(durations):.4f} s; "
            f"limits: {run_limit:g} s a run, {total_limit:g} s in all)",
        ),
    ]


def report(results: list[tuple[bool, str]]) -> list[tuple[bool, str]]:
    for ok, message in results:
        print(f"{'PASS' if ok else 'FAIL'}  {message}", flush=True)
    return results


def main(argv: list[str]) -> int:
    parser = Usage(prog="onnx_policy.py", description="Validate an ONNX policy for the Dogfight arena.")
    parser.add_argument("model")
    parser.add_argument("--time-limit", type=float, default=RUN_TIME_LIMIT_S, help="seconds a run")
    parser.add_argument("--total-time-limit", type=float, default=TOTAL_TIME_LIMIT_S, help="for all runs")
    parser.add_argument("--max-bytes", type=int, default=MAX_BYTES)
    args = parser.parse_args(argv)
    if args.time_limit <= 0 or args.total_time_limit <= 0 or args.max_bytes <= 0:
        parser.error("limits must be positive")
    path = args.model
    for module in ("numpy", "onnx", "onnxruntime"):  # onnx needs numpy: name numpy when it is missing
        try:
            __import__(module)
        except ImportError:
            print(
                f"CANNOT RUN  python package `{module}` is not installed for this interpreter "
                f"({sys.executable}); install it with `pip install {module}`."
            )
            return 2
    import numpy as np
    import onnx
    import onnxruntime as ort

    try:
        with open(path, "rb") as fh:
            data = fh.read(args.max_bytes + 1)
    except FileNotFoundError:
        print(f"FAIL  {path}: no such file")
        return 1
    except OSError as exc:
        print(f"FAIL  {path} cannot be read: {exc.strerror or exc}")
        return 1
    if len(data) > args.max_bytes:
        print(f"FAIL  larger than {args.max_bytes:,} bytes")
        print(f"invalid: {path}")
        return 1
    try:
        model = onnx.load_model_from_string(data)  # from bytes: external data is never looked for
        if refs := external_data(model, onnx):
            print(f"FAIL  refers to external data ({', '.join(refs[:3])}): a policy must be one file")
            print(f"invalid: {path}")
            return 1
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 — any parse or checker error means the model is not valid
        print(f"FAIL  {path} is not a valid ONNX model: {type(exc).__name__}: {_one_line(exc)}")
        return 1
    results = report(check(model, onnx))
    if all(ok for ok, _ in results):
        weights = {t.name for t in model.graph.initializer}
        feed = next(i.name for i in model.graph.input if i.name not in weights)
        fetch = model.graph.output[0].name
        del model  # the session works from the bytes
        session, loaded = load_session(data, ort, path)
        results += report([loaded])
        if session is not None:
            limits = {"run_limit": args.time_limit, "total_limit": args.total_time_limit}
            results += report(run_policy(session, feed, fetch, ort, np, **limits, path=path))
    passed = all(ok for ok, _ in results)
    print(f"{'valid' if passed else 'invalid'}: {path}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
