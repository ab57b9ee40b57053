"""What an ONNX model is, read from its bytes for the submission page: inputs and outputs, opsets,
parameter count, operator histogram; and a structural diff of two such summaries.

The bytes are parsed as a protobuf and walked, nothing more: no external data file is ever opened (a
tensor that refers to one is reported as a problem), no graph is checked, optimized or executed. Models
over MAX_BYTES are refused. Whatever the bytes are, the only exception is `OnnxSummaryError`, whose
message can be shown as it is.

Parameters are counted as the Dogfight validator (smrweb/validators/onnx_policy.py) counts them: the
elements of every initializer, in subgraphs too (a sparse one by its stored values), plus the tensors
embedded in `Constant` nodes.

Pure module: no Django, no models; needs the `onnx` package (imported when first used).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

__all__ = ["MAX_BYTES", "OnnxSummaryError", "diff_summaries", "io_text", "summarize"]

MAX_BYTES = 64 * 1024 * 1024
DEFAULT_DOMAIN = "ai.onnx"  # what the empty domain means in opset imports and on nodes

# TensorProto.DataType names as numpy spells them (the rest: the lower-cased ONNX name).
_TYPE_NAMES = {
    "FLOAT": "float32",
    "DOUBLE": "float64",
    "FLOAT16": "float16",
    "BFLOAT16": "bfloat16",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "BOOL": "bool",
    "STRING": "string",
    "COMPLEX64": "complex64",
    "COMPLEX128": "complex128",
}


class OnnxSummaryError(Exception):
    """The bytes cannot be summarized; the message says why, in words a reviewer can read."""


def summarize(data: bytes, *, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """The summary of a serialized ONNX model (JSON-serializable):

    `size_bytes`, `ir_version`, `producer` ("name version"), `opsets` {domain: version} ("ai.onnx" for the
    default domain), `inputs` and `outputs` [{name, type, shape}] (type e.g. "float32"; shape a list of
    ints, symbolic dimensions as their names, unknown ones as None; None for an unknown rank; weights
    that older IRs list as inputs are left out), `parameters`, `nodes` (in subgraphs too), `operators`
    {op_type: count} by count (descending) then name (other domains' operators as "domain.Op"), and
    `problems`: what could not be read (external data, unknown element types…).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise OnnxSummaryError(f"expected the model's bytes, got {type(data).__name__}")
    size = len(data)
    if size > max_bytes:
        raise OnnxSummaryError(
            f"the model is {_size_text(size)}; only models up to {_size_text(max_bytes)} are summarized"
        )
    if size == 0:
        raise OnnxSummaryError("not an ONNX model: the file is empty")
    try:
        import onnx
    except ImportError as exc:  # a dependency: only a broken installation gets here
        raise OnnxSummaryError("cannot read ONNX models here: the `onnx` package is not installed") from exc
    try:
        model = onnx.ModelProto()
        model.ParseFromString(bytes(data))  # parsing only: external data stays where it is
    except Exception as exc:  # DecodeError, and whatever else the protobuf runtime raises on garbage
        raise OnnxSummaryError(
            f"not an ONNX model: the bytes are not a valid ONNX protobuf ({_one_line(exc)})"
        ) from exc
    if not model.HasField("graph"):
        raise OnnxSummaryError("not an ONNX model: there is no graph in it")
    try:
        return _summary(model, onnx, size)
    except Exception as exc:  # a message the walk did not expect: still one error type for callers
        raise OnnxSummaryError(
            f"the model could not be read: {type(exc).__name__}: {_one_line(exc)}"
        ) from exc


def _summary(model, onnx, size: int) -> dict[str, Any]:
    problems: list[str] = []
    graph = model.graph
    weights = {t.name for t in graph.initializer}
    operators: Counter[str] = Counter()
    nodes = 0
    for sub in _graphs(graph):
        for node in sub.node:
            nodes += 1
            domain = node.domain if node.domain not in ("", DEFAULT_DOMAIN) else ""
            operators[f"{domain}.{node.op_type}" if domain else node.op_type] += 1
    problems += _external_data(model, onnx)
    if not model.ir_version:
        problems.append("the IR version is not set")
    if not model.opset_import:
        problems.append("no opset is imported")
    summary = {
        "size_bytes": size,
        "ir_version": model.ir_version,
        "producer": " ".join(p for p in (model.producer_name, model.producer_version) if p),
        "opsets": {
            (o.domain or DEFAULT_DOMAIN): o.version
            for o in sorted(model.opset_import, key=lambda o: o.domain)
        },
        "inputs": [_value(v, onnx, problems) for v in graph.input if v.name not in weights],
        "outputs": [_value(v, onnx, problems) for v in graph.output],
        "parameters": parameter_count(model),
        "nodes": nodes,
        "operators": dict(sorted(operators.items(), key=lambda item: (-item[1], item[0]))),
        "problems": problems,
    }
    return summary


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
    """Initializers (sparse ones by their stored values) and Constant-node tensors, subgraphs included:
    the validator's rule."""
    count = 0
    for graph in _graphs(model.graph):
        count += sum(math.prod(t.dims) for t in graph.initializer)
        count += sum(math.prod(s.values.dims) for s in graph.sparse_initializer)
        for node in graph.node:
            if node.op_type != "Constant" or node.domain not in ("", DEFAULT_DOMAIN):
                continue
            for a in node.attribute:
                if a.name == "value":
                    count += math.prod(a.t.dims)
                elif a.name == "sparse_value":
                    count += math.prod(a.sparse_tensor.values.dims)
                elif a.name in ("value_floats", "value_ints"):
                    count += len(a.floats) + len(a.ints)
    return count


def _external_data(model, onnx) -> list[str]:
    """A problem for each tensor whose bytes live in a file next to the model (never opened)."""
    external = onnx.TensorProto.EXTERNAL
    found = []

    def tensors(graph):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield from (sparse.values, sparse.indices)
        for node in graph.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("sparse_tensor"):
                    yield from (a.sparse_tensor.values, a.sparse_tensor.indices)

    for graph in _graphs(model.graph):
        for tensor in tensors(graph):
            if tensor.data_location == external or len(tensor.external_data):
                where = next(
                    (e.value for e in tensor.external_data if e.key == "location"), "an unnamed file"
                )
                found.append(
                    f"tensor `{tensor.name or '(unnamed)'}` refers to external data in `{where}` (not read)"
                )
    return found


def _value(value_info, onnx, problems: list[str]) -> dict[str, Any]:
    type_name, shape = _type(value_info.type, onnx, problems, value_info.name)
    return {"name": value_info.name, "type": type_name, "shape": shape}


def _type(tp, onnx, problems: list[str], name: str, depth: int = 0) -> tuple[str, list | None]:
    """(type name, shape) of a TypeProto: "float32" and its dims for tensors, "sequence<float32>"…"""
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tensor = getattr(tp, kind)
        elem = _elem_name(tensor.elem_type, onnx)
        if elem.startswith("unknown"):
            problems.append(f"`{name}` has an element type ONNX does not know ({tensor.elem_type})")
        shape = [_dim(d) for d in tensor.shape.dim] if tensor.HasField("shape") else None
        return ("sparse " if kind == "sparse_tensor_type" else "") + elem, shape
    if depth > 8:
        return "…", None
    if kind == "sequence_type":
        return f"sequence<{_type(tp.sequence_type.elem_type, onnx, problems, name, depth + 1)[0]}>", None
    if kind == "optional_type":
        return f"optional<{_type(tp.optional_type.elem_type, onnx, problems, name, depth + 1)[0]}>", None
    if kind == "map_type":
        key = _elem_name(tp.map_type.key_type, onnx)
        return f"map<{key}, {_type(tp.map_type.value_type, onnx, problems, name, depth + 1)[0]}>", None
    problems.append(f"`{name}` has no type")
    return "unknown", None


def _elem_name(code: int, onnx) -> str:
    if code == 0:
        return "undefined"
    try:
        name = onnx.TensorProto.DataType.Name(code)
    except ValueError:
        return f"unknown ({code})"
    return _TYPE_NAMES.get(name, name.lower())


def _dim(dim) -> int | str | None:
    which = dim.WhichOneof("value")
    if which == "dim_value":
        return dim.dim_value
    if which == "dim_param":
        return dim.dim_param
    return None


def io_text(entry: dict[str, Any]) -> str:
    """An input or output of a summary as one string: `float32[1, 224]`, `float32[batch, 224]`,
    `float32[?]` for an unknown dimension, `float32` for an unknown rank."""
    shape = entry.get("shape")
    if shape is None:
        return entry["type"]
    return f"{entry['type']}[{', '.join('?' if d is None else str(d) for d in shape)}]"


def diff_summaries(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """What changed from `old` to `new`, as rows {field, old, new, change} with change one of "changed",
    "added", "removed" (the missing side is None); no rows when the structure is the same.

    Fields: `inputs[name]` / `outputs[name]` (the whole value as `io_text`, when it appears or goes),
    `inputs[name].type`, `inputs[name].shape` (lists), `opsets[domain]`, `ir_version`, `producer`,
    `parameters`, `nodes`, and `operators[op]` (counts). Inputs and outputs are matched by name, so a
    renamed one is a removal and an addition.
    """
    rows: list[dict[str, Any]] = []

    def row(field: str, before: Any, after: Any) -> None:
        if before == after:
            return
        change = "added" if before is None else "removed" if after is None else "changed"
        rows.append({"field": field, "old": before, "new": after, "change": change})

    for side in ("inputs", "outputs"):
        before = {v["name"]: v for v in old.get(side, [])}
        after = {v["name"]: v for v in new.get(side, [])}
        for name in [*before, *(n for n in after if n not in before)]:
            if name not in after or name not in before:
                row(f"{side}[{name}]", _io(before.get(name)), _io(after.get(name)))
                continue
            for key in ("type", "shape"):
                row(f"{side}[{name}].{key}", before[name].get(key), after[name].get(key))
    before, after = old.get("opsets", {}), new.get("opsets", {})
    for domain in sorted({*before, *after}):
        row(f"opsets[{domain}]", before.get(domain), after.get(domain))
    for key in ("ir_version", "producer", "parameters", "nodes"):
        row(key, old.get(key), new.get(key))
    before, after = old.get("operators", {}), new.get("operators", {})
    for op in sorted({*before, *after}):
        row(f"operators[{op}]", before.get(op), after.get(op))
    return rows


def _io(entry: dict[str, Any] | None) -> str | None:
    return None if entry is None else io_text(entry)


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _size_text(size: int) -> str:
    return f"{size / 1024**2:,.1f} MiB" if size >= 1024**2 else f"{size:,} bytes"
