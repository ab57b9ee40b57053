"""What an ONNX model is, read from its bytes for the submission page: inputs and outputs, opsets,
parameter count, operator histogram; and a structural diff of two such summaries.

The bytes are parsed as a protobuf and walked, nothing more: no external data file is ever opened (a
tensor that refers to one is reported as a problem), no graph is checked, optimized or executed. Models
over MAX_BYTES are refused, and so are models past MAX_NODES nodes, MAX_INITIALIZERS initializers or
MAX_DEPTH levels of subgraphs (`OnnxTooLarge`): top-level counts are read from the wire before parsing, so
a model of millions of empty nodes is refused without building them (red-team N2). Whatever the bytes
are, the only exception is `OnnxSummaryError`, whose message can be shown as it is.

Uploaded models are summarized out of the web process: `python onnx_summary.py` (this file, run on its
own: it needs only the standard library and `onnx`) reads a model on stdin and writes one JSON object,
and `sources/summaries.py` runs it on a worker under memory and time limits.

Parameters are counted as the Dogfight validator (smrweb/validators/onnx_policy.py) counts them: the
elements of every initializer, in subgraphs too (a sparse one by its stored values), plus the tensors
embedded in `Constant` nodes.

Pure module: no Django, no models; needs the `onnx` package (imported when first used).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from typing import Any

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_INITIALIZERS",
    "MAX_NODES",
    "VERSION",
    "OnnxSummaryError",
    "OnnxTooLarge",
    "compare",
    "diff_summaries",
    "diff_tensors",
    "io_text",
    "summarize",
]

VERSION = 3  # of what `summarize` and `compare` return: stored ones of another version are computed again
MAX_BYTES = 64 * 1024 * 1024  # weights make a model large, and parse cheaply: nodes are what cost
# Far past real models (a transformer export has some thousands of nodes), far below a bomb: the
# review's 8 MB model held 4 M empty nodes, which took 0.7 s and 640 MB to parse and 17 s to walk.
MAX_NODES = 200_000  # in all graphs together
MAX_INITIALIZERS = 200_000  # in all graphs together, sparse ones included
MAX_DEPTH = 16  # subgraphs in subgraphs (If, Loop, Scan bodies)
MAX_FIELDS = 1_000_000  # entries of the model and of its main graph read on the wire before parsing
# Weights (issue 33 P1-A): each tensor is listed with a digest of its values; two models' tensors of the
# same name and shape are compared element by element (`compare`), on a worker under the same limits.
MAX_TENSORS = 10_000  # listed per model; past it the weights are not compared ("too large to compare")
MAX_COMPARED_ELEMENTS = 32 * 1024 * 1024  # read by one comparison: a MAX_BYTES model of float32 is 16 M
CHUNK = 1 << 20  # elements compared at a time: float64 working copies stay small
TOP_TENSORS = 50  # changed tensors kept per comparison (largest change first)
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


class OnnxTooLarge(OnnxSummaryError):
    """The model may be fine but is past a limit (bytes, nodes, initializers, depth)."""


def summarize(data: bytes, *, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """The summary of a serialized ONNX model (JSON-serializable):

    `size_bytes`, `ir_version`, `producer` ("name version"), `opsets` {domain: version} ("ai.onnx" for the
    default domain), `inputs` and `outputs` [{name, type, shape}] (type e.g. "float32"; shape a list of
    ints, symbolic dimensions as their names, unknown ones as None; None for an unknown rank; weights
    that older IRs list as inputs are left out), `parameters`, `nodes` (in subgraphs too), `operators`
    {op_type: count} by count (descending) then name (other domains' operators as "domain.Op"),
    `tensors` (the weights, `tensor_entries`; None past MAX_TENSORS, `tensors_omitted` says why) and
    `problems`: what could not be read (external data, unknown element types…).
    """
    model, onnx = _parse(data, max_bytes)
    try:
        return _summary(model, onnx, len(data))
    except (OnnxSummaryError, MemoryError):
        raise
    except Exception as exc:  # a message the walk did not expect: still one error type for callers
        raise OnnxSummaryError(
            f"the model could not be read: {type(exc).__name__}: {_one_line(exc)}"
        ) from exc


def _parse(data: bytes, max_bytes: int):
    """(ModelProto, the onnx module) for the bytes, after the size and wire checks."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise OnnxSummaryError(f"expected the model's bytes, got {type(data).__name__}")
    size = len(data)
    if size > max_bytes:
        raise OnnxTooLarge(
            f"the model is {_size_text(size)}; only models up to {_size_text(max_bytes)} are summarized"
        )
    if size == 0:
        raise OnnxSummaryError("not an ONNX model: the file is empty")
    try:
        import onnx
    except ImportError as exc:  # a dependency: only a broken installation gets here
        raise OnnxSummaryError("cannot read ONNX models here: the `onnx` package is not installed") from exc
    _precheck(memoryview(data))
    try:
        model = onnx.ModelProto()
        model.ParseFromString(bytes(data))  # parsing only: external data stays where it is
    except MemoryError:
        raise  # a limit of the process, not a fault of the bytes: the caller reports it
    except Exception as exc:  # DecodeError, and whatever else the protobuf runtime raises on garbage
        if "alloc failed" in str(exc).lower():  # upb's arena, out of address space: the same limit
            raise MemoryError(str(exc)) from exc
        raise OnnxSummaryError(
            f"not an ONNX model: the bytes are not a valid ONNX protobuf ({_one_line(exc)})"
        ) from exc
    if not model.HasField("graph"):
        raise OnnxSummaryError("not an ONNX model: there is no graph in it")
    _check_counts(model.graph)
    return model, onnx


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
    weights = list(_weights(model))
    if len(weights) > MAX_TENSORS:
        summary["tensors"] = None
        summary["tensors_omitted"] = f"more than {MAX_TENSORS:,} tensors of weights"
    else:
        summary["tensors"] = [_tensor_entry(key, tensor, sparse, onnx) for key, tensor, sparse in weights]
    return summary


def _graphs(graph):
    """The graph and every subgraph in its nodes' attributes (If, Loop, Scan bodies), depth first."""
    return (sub for _, sub in _graph_paths(graph))


def _graph_paths(graph, prefix: str = "", depth: int = 0):
    """(prefix, graph) for the graph and its subgraphs: a subgraph's prefix names the node and attribute
    it sits in ("loop.body/"), so its tensors' names do not collide with the main graph's."""
    if depth > MAX_DEPTH:
        raise OnnxTooLarge(
            f"subgraphs are nested more than {MAX_DEPTH} deep; only models up to that are summarized"
        )
    yield prefix, graph
    for node in graph.node:
        for attr in node.attribute:
            where = f"{prefix}{node.name or node.op_type}.{attr.name}"
            if attr.HasField("g"):
                yield from _graph_paths(attr.g, f"{where}/", depth + 1)
            for i, sub in enumerate(attr.graphs):
                yield from _graph_paths(sub, f"{where}[{i}]/", depth + 1)


def _check_counts(graph) -> None:
    """Nodes and initializers of every graph against the limits, before anything walks them node by node
    (`len` of a repeated field is free; the walk stops at the first graph past a limit)."""
    nodes = initializers = 0
    for sub in _graphs(graph):
        nodes += len(sub.node)
        initializers += len(sub.initializer) + len(sub.sparse_initializer)
        _refuse_counts(nodes, initializers)


def _refuse_counts(nodes: int, initializers: int) -> None:
    if nodes > MAX_NODES:
        raise OnnxTooLarge(f"more than {MAX_NODES:,} nodes; only models up to that are summarized")
    if initializers > MAX_INITIALIZERS:
        raise OnnxTooLarge(
            f"more than {MAX_INITIALIZERS:,} initializers; only models up to that are summarized"
        )


# Protobuf field numbers of onnx.proto: ModelProto.graph, GraphProto.node / initializer / sparse_initializer.
_MODEL_GRAPH, _GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER = 7, 1, 5, 15


def _precheck(data: memoryview) -> None:
    """The main graph's nodes and initializers counted on the wire, before parsing: parsing builds every
    node (~150 bytes of memory for each 2-byte empty one), so a bomb is refused here, after at most
    MAX_NODES + MAX_INITIALIZERS steps. Bytes that are not well-formed are left to the parser to refuse."""
    nodes = initializers = fields = 0
    try:
        for field, start, end in _fields(data, 0, len(data)):
            fields += 1
            if field != _MODEL_GRAPH or end is None:
                continue
            for inner, _, _ in _fields(data, start, end):  # a repeated graph field merges: counts add up
                fields += 1
                if fields > MAX_FIELDS:
                    raise OnnxTooLarge(
                        f"more than {MAX_FIELDS:,} entries in the model's graph; only models up to that "
                        "are summarized"
                    )
                if inner == _GRAPH_NODE:
                    nodes += 1
                elif inner in (_GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER):
                    initializers += 1
                else:
                    continue
                _refuse_counts(nodes, initializers)
    except _Malformed:
        return


class _Malformed(Exception):
    pass


def _varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: memoryview, pos: int, end: int):
    """(field number, start, end) of each field of the message in data[pos:end]; start/end delimit a
    length-delimited field's payload (end is None for the other wire types)."""
    while pos < end:
        key, pos = _varint(data, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(data, pos, end)
            yield field, pos, None
        elif wire == 2:
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                raise _Malformed
            yield field, pos, pos + length
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            if pos > end:
                raise _Malformed
            yield field, pos, None
        else:  # groups (3, 4) are not in onnx.proto; anything else is not protobuf
            raise _Malformed


def _weights(model):
    """(name, TensorProto, sparse) for every tensor of weights, as `parameter_count` counts them:
    initializers, sparse ones (the values; dense shape), and `Constant` nodes' tensors (by their output's
    name); a subgraph's names carry its prefix."""
    for prefix, graph in _graph_paths(model.graph):
        for tensor in graph.initializer:
            yield prefix + tensor.name, tensor, False
        for sparse in graph.sparse_initializer:
            yield prefix + sparse.values.name, sparse, True
        for node in graph.node:
            if node.op_type != "Constant" or node.domain not in ("", DEFAULT_DOMAIN) or not node.output:
                continue
            for a in node.attribute:
                if a.name == "value":
                    yield prefix + node.output[0], a.t, False
                elif a.name == "sparse_value":
                    yield prefix + node.output[0], a.sparse_tensor, True


def _tensor_entry(name: str, tensor, sparse: bool, onnx) -> dict[str, Any]:
    """{name, dtype, shape, elements, sha256} of a tensor of weights (and `sparse` for a sparse one, whose
    elements are its stored values and whose digest covers its indices too); sha256 of the values'
    little-endian bytes, the same whether they are stored as raw_data or in a typed field; "" for values
    in an external file (never read)."""
    values = tensor.values if sparse else tensor
    digest = _digest(values, onnx)
    if sparse and digest:
        digest = hashlib.sha256(f"{digest}:{_digest(tensor.indices, onnx)}".encode()).hexdigest()
    entry = {
        "name": name,
        "dtype": _elem_name(values.data_type, onnx),
        "shape": list(tensor.dims),
        "elements": math.prod(values.dims),
        "sha256": digest,
    }
    if sparse:
        entry["sparse"] = True
    return entry


def _external(tensor, onnx) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data) > 0


def _digest(tensor, onnx) -> str:
    if _external(tensor, onnx):
        return ""
    if tensor.raw_data:
        return hashlib.sha256(tensor.raw_data).hexdigest()
    digest = hashlib.sha256()
    if tensor.data_type == onnx.TensorProto.STRING:
        for value in tensor.string_data:
            digest.update(len(value).to_bytes(8, "little") + value)
        return digest.hexdigest()
    try:
        array = _array(tensor)
    except Exception:  # a typed field numpy_helper cannot read: the tensor's own bytes, name aside
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        copy.name = ""
        digest.update(copy.SerializeToString(deterministic=True))
        return digest.hexdigest()
    digest.update(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    return digest.hexdigest()


def _array(tensor):
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor).reshape(-1)


def diff_tensors(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The weights of two summaries compared by name, shape, type and digest: `added` and `removed`
    (names), `reshaped` [{name, old, new}] (shape or type changed, as "float32[224, 32]"), `changed` (names
    of tensors of the same shape and type whose values differ), `same` (how many are equal), and
    `omitted`: why the weights cannot be compared (a summary did not list them), else ""."""
    if old.get("tensors") is None or new.get("tensors") is None:
        why = old.get("tensors_omitted") or new.get("tensors_omitted") or "a summary does not list them"
        return {"added": [], "removed": [], "reshaped": [], "changed": [], "same": 0, "omitted": why}
    before = {t["name"]: t for t in old["tensors"]}
    after = {t["name"]: t for t in new["tensors"]}
    result: dict[str, Any] = {
        "added": [n for n in after if n not in before],
        "removed": [n for n in before if n not in after],
        "reshaped": [],
        "changed": [],
        "same": 0,
        "omitted": "",
    }
    for name, a in before.items():
        b = after.get(name)
        if b is None:
            continue
        if (a["shape"], a["dtype"], a.get("sparse")) != (b["shape"], b["dtype"], b.get("sparse")):
            result["reshaped"].append({"name": name, "old": _tensor_text(a), "new": _tensor_text(b)})
        elif a["sha256"] != b["sha256"] or not a["sha256"]:  # no digest (external data): not known equal
            result["changed"].append(name)
        else:
            result["same"] += 1
    return result


def _tensor_text(entry: dict[str, Any]) -> str:
    return f"{'sparse ' if entry.get('sparse') else ''}{entry['dtype']}{entry['shape']}"


def compare(old_data: bytes, new_data: bytes, *, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """Two models' weights compared element by element: every tensor of the same name, type and shape
    in both (dense, values stored in the model) is read, and the answer says how many `tensors_compared`
    and `elements_compared`, how many of them changed (`tensors_changed`, `elements_changed`: elements
    whose values differ; NaN equals NaN), the `max_abs_change` and `mean_abs_change` (over every element
    compared, unchanged ones as 0) of the finite changes, `nonfinite_changes` (changes to or from
    inf/NaN), and `tensors`: the TOP_TENSORS changed tensors with the largest change
    [{name, dtype, shape, elements, changed, max_abs_change, mean_abs_change}]. Strings are counted, not
    measured; sparse tensors and values in external files are `not_compared` (names).

    Raises OnnxTooLarge past MAX_TENSORS tensors or MAX_COMPARED_ELEMENTS elements, OnnxSummaryError for
    bytes that are not a model."""
    old_model, onnx = _parse(old_data, max_bytes)
    del old_data
    new_model, _ = _parse(new_data, max_bytes)
    del new_data
    sides = []
    for model in (old_model, new_model):
        weights = {name: (tensor, sparse) for name, tensor, sparse in _weights(model)}
        if len(weights) > MAX_TENSORS:
            raise OnnxTooLarge(
                f"more than {MAX_TENSORS:,} tensors of weights; only models up to that are compared"
            )
        sides.append(weights)
    before, after = sides
    totals = {"tensors": 0, "elements": 0, "changed_tensors": 0, "changed": 0, "nonfinite": 0}
    largest, total_abs = 0.0, 0.0
    rows, not_compared = [], []
    for name, (a, sparse) in before.items():
        if name not in after:
            continue
        b, other_sparse = after[name]
        if sparse or other_sparse or _external(a, onnx) or _external(b, onnx):
            not_compared.append(name)
            continue
        if (list(a.dims), a.data_type) != (list(b.dims), b.data_type):
            continue  # reshaped: said by `diff_tensors`
        elements = math.prod(a.dims)
        totals["tensors"] += 1
        totals["elements"] += elements
        if totals["elements"] > MAX_COMPARED_ELEMENTS:
            raise OnnxTooLarge(
                f"more than {MAX_COMPARED_ELEMENTS:,} elements of weights to compare; only models up to "
                "that are compared"
            )
        if a.raw_data and a.raw_data == b.raw_data:
            continue
        row = _compare_tensor(a, b, onnx)
        if not row["changed"]:
            continue
        totals["changed_tensors"] += 1
        totals["changed"] += row["changed"]
        totals["nonfinite"] += row.pop("nonfinite")
        largest = max(largest, row["max_abs_change"] or 0.0)
        total_abs += row.pop("sum_abs")
        rows.append(
            {
                "name": name,
                "dtype": _elem_name(a.data_type, onnx),
                "shape": list(a.dims),
                "elements": elements,
            }
            | row
        )
    rows.sort(key=lambda r: (-(r["max_abs_change"] or 0.0), -r["changed"], r["name"]))
    return {
        "tensors_compared": totals["tensors"],
        "tensors_changed": totals["changed_tensors"],
        "elements_compared": totals["elements"],
        "elements_changed": totals["changed"],
        "max_abs_change": largest,
        "mean_abs_change": total_abs / totals["elements"] if totals["elements"] else 0.0,
        "nonfinite_changes": totals["nonfinite"],
        "tensors": rows[:TOP_TENSORS],
        "not_compared": not_compared[:TOP_TENSORS],
    }


def _compare_tensor(a, b, onnx) -> dict[str, Any]:
    """{changed, max_abs_change, mean_abs_change, sum_abs, nonfinite} of two tensors of one shape and type,
    read CHUNK elements at a time (max/mean None for strings)."""
    import numpy as np

    if a.data_type == onnx.TensorProto.STRING:
        changed = sum(x != y for x, y in zip(a.string_data, b.string_data, strict=False))
        return {
            "changed": changed,
            "max_abs_change": None,
            "mean_abs_change": None,
            "sum_abs": 0.0,
            "nonfinite": 0,
        }
    x, y = _array(a), _array(b)
    complex_ = np.iscomplexobj(x)
    wide = np.complex128 if complex_ else np.float64
    changed = nonfinite = 0
    largest = total = 0.0
    with np.errstate(all="ignore"):
        for start in range(0, x.size, CHUNK):
            p = x[start : start + CHUNK].astype(wide)
            q = y[start : start + CHUNK].astype(wide)
            differs = (p != q) & ~(np.isnan(p) & np.isnan(q))
            changed += int(np.count_nonzero(differs))
            change = np.abs(p - q)
            finite = np.isfinite(change)
            nonfinite += int(np.count_nonzero(differs & ~finite))
            change = change[finite & differs]
            if change.size:
                largest = max(largest, float(change.max()))
                total += float(change.sum())
    return {
        "changed": changed,
        "max_abs_change": largest,
        "mean_abs_change": total / x.size if x.size else 0.0,
        "sum_abs": total,
        "nonfinite": nonfinite,
    }


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


def main(argv: list[str] | None = None) -> int:
    """A model's bytes on stdin → one JSON object on stdout: {"summary": …}, {"error": why it is not a
    readable model} or {"too_large": which limit}. With `--compare`, stdin holds two models (the first's
    length as 8 bytes big-endian, the first, the second) and the answer is {"comparison": `compare`'s}.
    Run by `sources/summaries.py` in a limited subprocess; running out of memory there is reported as
    such when Python still can (else the exit status says)."""
    import json
    import sys

    argv = sys.argv[1:] if argv is None else argv
    data = b""
    try:
        data = sys.stdin.buffer.read()
        try:
            if argv == ["--compare"]:
                first = int.from_bytes(data[:8], "big")
                if len(data) < 8 + first:
                    raise OnnxSummaryError("expected two models: the input is cut short")
                old, new = data[8 : 8 + first], data[8 + first :]
                data = b""
                answer: dict[str, Any] = {"comparison": compare(old, new)}
            else:
                answer = {"summary": summarize(data)}
        except OnnxTooLarge as exc:
            answer = {"too_large": str(exc)}
        except OnnxSummaryError as exc:
            answer = {"error": str(exc)}
        out = json.dumps(answer, allow_nan=False)
    except MemoryError:
        del data
        sys.stdout.write('{"limit": "memory"}')
        return 3
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
