#!/usr/bin/env python3
"""Validate an ONNX policy for the Dogfight arena: fewer than 250,000 parameters, exactly one input
float32[1,224] and exactly one output float32[1,3].

    python3 onnx_policy.py path/to/policy.onnx

Exit 0: the model passes. Exit 1: it does not (or the file is missing or unreadable). Exit 2: the check
cannot run here (the `onnx` package is not installed, bad arguments).

A standalone script on purpose: a sandbox runs it as an argument list with a scrubbed environment, where
smrweb itself is not importable. It needs only the standard library and `onnx`, and never executes the
model. Parameters are the elements of the graph's initializers plus any tensors embedded in `Constant`
nodes (weights hidden there are parameters all the same).
"""

from __future__ import annotations

import math
import sys

MAX_PARAMETERS = 250_000
INPUT_SHAPE, OUTPUT_SHAPE = [1, 224], [1, 3]


def _shape(value_info) -> list:
    """Dimensions as ints, a symbolic dimension as its name (a string), an unknown one as None."""
    dims = value_info.type.tensor_type.shape.dim
    return [d.dim_param or (d.dim_value if d.dim_value > 0 else None) for d in dims]


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
    """(ok, message) for every rule, in the order they are reported."""
    graph = model.graph
    params = sum(math.prod(t.dims) for t in graph.initializer)
    params += sum(
        math.prod(a.t.dims)
        for n in graph.node
        if n.op_type == "Constant"
        for a in n.attribute
        if a.name == "value"
    )
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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: onnx_policy.py MODEL.onnx", file=sys.stderr)
        return 2
    path = argv[0]
    try:
        import onnx
    except ImportError:
        print(
            "CANNOT RUN  python package `onnx` is not installed for this interpreter "
            f"({sys.executable}); install it with `pip install onnx`."
        )
        return 2
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model)
    except FileNotFoundError:
        print(f"FAIL  {path}: no such file")
        return 1
    except Exception as exc:  # noqa: BLE001 — any parse or checker error means the model is not valid
        print(f"FAIL  {path} is not a valid ONNX model: {type(exc).__name__}: {exc}")
        return 1
    results = check(model, onnx)
    for ok, message in results:
        print(f"{'PASS' if ok else 'FAIL'}  {message}")
    passed = all(ok for ok, _ in results)
    print(f"{'valid' if passed else 'invalid'}: {path}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
