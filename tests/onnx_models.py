"""Small ONNX models built with onnx.helper, for the Dogfight validator and the ONNX summary tests."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def weights(name: str, *shape: int, seed: int = 0) -> TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


def ints(name: str, *values: int) -> TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def io(name: str, shape: list, elem: int = FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def model(
    nodes: list[NodeProto],
    initializers: list[TensorProto] = (),
    *,
    inputs: list | None = None,
    outputs: list | None = None,
    opset: int = 17,
    domains: dict[str, int] | None = None,
    producer: str = "smrweb-tests",
) -> ModelProto:
    """A model of `nodes` from `obs` float32[1,224] to `action` float32[1,3] unless told otherwise."""
    graph = helper.make_graph(
        nodes,
        "policy",
        [io("obs", [1, 224])] if inputs is None else inputs,
        [io("action", [1, 3])] if outputs is None else outputs,
        list(initializers),
    )
    opsets = [helper.make_opsetid("", opset)] + [
        helper.make_opsetid(d, v) for d, v in (domains or {}).items()
    ]
    return helper.make_model(graph, opset_imports=opsets, producer_name=producer)


def mlp_nodes(hidden: int = 32, *, out: str = "z") -> tuple[list[NodeProto], list[TensorProto]]:
    """obs → MatMul, Add, Relu → MatMul, Add → `out` [1,3] (hidden·227 + 3 parameters)."""
    nodes = [
        helper.make_node("MatMul", ["obs", "w1"], ["a1"]),
        helper.make_node("Add", ["a1", "b1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["a3"]),
        helper.make_node("Add", ["a3", "b2"], [out]),
    ]
    return nodes, [
        weights("w1", 224, hidden),
        weights("b1", hidden, seed=1),
        weights("w2", hidden, 3, seed=2),
        weights("b2", 3, seed=3),
    ]


def policy(hidden: int = 32, *, tail: list[NodeProto] = (), extra: list[TensorProto] = (), **options):
    """The small valid MLP (Tanh head) from `obs` to `action`; `tail` nodes go between the last Add
    (`z`) and the Tanh, reading `z` and writing `t`."""
    nodes, initializers = mlp_nodes(hidden)
    nodes += list(tail)
    nodes.append(helper.make_node("Tanh", ["t" if tail else "z"], ["action"]))
    return model(nodes, [*initializers, *extra], **options)


def mlp_parameters(hidden: int) -> int:
    return 224 * hidden + hidden + hidden * 3 + 3


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


_HEAD = b"\x08\x08" + b"\x42\x02\x10\x11"  # ir_version 8, opset_import {version 17}


def empty_node_bomb(nodes: int) -> bytes:
    """The red-team's N2 model: ModelProto{ir_version 8, opset 17, graph{node{} × nodes}}, 2 bytes a node."""
    graph = b"\x0a\x00" * nodes
    return _HEAD + b"\x3a" + _varint(len(graph)) + graph


def nested_bomb(nodes: int) -> bytes:
    """One `If` node whose graph attribute holds `nodes` empty nodes: invisible to a count of the main
    graph's nodes on the wire, so only parsing (and its memory) finds them."""
    sub = b"\x0a\x00" * nodes
    attr = b"\x0a\x01x" + b"\x32" + _varint(len(sub)) + sub + b"\xa0\x01\x05"  # name, g, type GRAPH
    node = b"\x2a" + _varint(len(attr)) + attr + b"\x22\x02If"  # attribute, op_type
    graph = b"\x0a" + _varint(len(node)) + node
    return _HEAD + b"\x3a" + _varint(len(graph)) + graph


def many_operators(count: int, *, prefix: str = "Op") -> bytes:
    """A model of `count` nodes, each a distinct operator (red-team N8: summaries too long to diff)."""
    nodes = [helper.make_node(f"{prefix}{i}", [], [f"t{i}"], domain="ai.custom") for i in range(count)]
    return model(nodes, domains={"ai.custom": 1}).SerializeToString()
