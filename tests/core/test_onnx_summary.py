"""The ONNX summary (core/onnx_summary.py): what a model is, read from its bytes without running or
checking it, one error type for anything that is not a model, and the structural diff of two."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data

from smrweb.core.onnx_summary import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    OnnxSummaryError,
    OnnxTooLarge,
    compare,
    diff_summaries,
    diff_tensors,
    io_text,
    summarize,
)
from smrweb.sources.preflight import VALIDATORS_DIR
from tests.onnx_models import ints, io, mlp_parameters, model, policy, weights


def test_a_small_policy_is_summarized_with_real_values():
    data = policy(32).SerializeToString()
    summary = summarize(data)
    tensors = summary.pop("tensors")
    assert summary == {
        "size_bytes": len(data),
        "ir_version": summary["ir_version"],
        "producer": "smrweb-tests",
        "opsets": {"ai.onnx": 17},
        "inputs": [{"name": "obs", "type": "float32", "shape": [1, 224]}],
        "outputs": [{"name": "action", "type": "float32", "shape": [1, 3]}],
        "parameters": 7_299,
        "nodes": 6,
        "operators": {"Add": 2, "MatMul": 2, "Relu": 1, "Tanh": 1},
        "problems": [],
    }
    # The weights, each with a digest of its values' bytes.
    m = policy(32)
    assert tensors == [
        {
            "name": t.name,
            "dtype": "float32",
            "shape": list(t.dims),
            "elements": numpy_helper.to_array(t).size,
            "sha256": hashlib.sha256(numpy_helper.to_array(t).astype("<f4").tobytes()).hexdigest(),
        }
        for t in m.graph.initializer
    ]
    assert [t["name"] for t in tensors] == ["w1", "b1", "w2", "b2"] and tensors[0]["shape"] == [224, 32]
    assert summary["ir_version"] >= 8 and mlp_parameters(32) == 7_299
    assert list(summary["operators"]) == ["Add", "MatMul", "Relu", "Tanh"]  # by count, then name
    assert json.loads(json.dumps(summary)) == summary  # storable as it is


def test_symbolic_and_unknown_dimensions_and_other_types():
    nodes = [
        helper.make_node("Identity", ["obs"], ["action"]),
        helper.make_node("Cast", ["obs"], ["mask"], to=TensorProto.BOOL),
    ]
    unknown_dim = helper.make_tensor_value_info("scores", TensorProto.FLOAT16, [None, "n"])
    no_shape = helper.make_tensor_value_info("extra", TensorProto.INT64, None)
    m = model(
        nodes + [helper.make_node("Constant", [], ["scores"], value=weights("s", 2, 2))],
        inputs=[io("obs", ["batch", 224])],
        outputs=[io("action", ["batch", 224]), io("mask", ["batch", 224], TensorProto.BOOL), unknown_dim],
        domains={"com.microsoft": 1},
    )
    m.graph.output.append(no_shape)
    summary = summarize(m.SerializeToString())
    assert summary["inputs"] == [{"name": "obs", "type": "float32", "shape": ["batch", 224]}]
    assert summary["outputs"] == [
        {"name": "action", "type": "float32", "shape": ["batch", 224]},
        {"name": "mask", "type": "bool", "shape": ["batch", 224]},
        {"name": "scores", "type": "float16", "shape": [None, "n"]},
        {"name": "extra", "type": "int64", "shape": None},
    ]
    assert [io_text(o) for o in summary["outputs"]] == [
        "float32[batch, 224]",
        "bool[batch, 224]",
        "float16[?, n]",
        "int64",
    ]
    assert summary["opsets"] == {"ai.onnx": 17, "com.microsoft": 1}
    assert summary["parameters"] == 4  # the Constant's 2×2


def test_weights_in_constant_nodes_and_subgraphs_count_as_parameters_like_the_validator_counts_them(tmp_path):
    branch = helper.make_graph(
        [helper.make_node("Add", ["z", "bias"], ["then_t"])],
        "then",
        [],
        [io("then_t", [1, 3])],
        [weights("bias", 1, 3), weights("hidden", 100, 10)],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["z"], ["else_t"])], "else", [], [io("else_t", [1, 3])]
    )
    m = policy(
        32,
        tail=[
            helper.make_node("Constant", [], ["c"], value=weights("c", 50, 40)),
            helper.make_node("Constant", [], ["floats"], value_floats=[1.0, 2.0, 3.0]),
            helper.make_node(
                "Constant", [], ["yes"], value=helper.make_tensor("y", TensorProto.BOOL, [], [True])
            ),
            helper.make_node("If", ["yes"], ["t"], then_branch=branch, else_branch=other),
        ],
    )
    summary = summarize(m.SerializeToString())
    assert summary["parameters"] == mlp_parameters(32) + 2_000 + 3 + 1 + 3 + 1_000
    assert summary["nodes"] == 6 + 4 + 2  # the subgraphs' nodes too
    assert summary["operators"] == {
        "Constant": 3,
        "Add": 3,
        "MatMul": 2,
        "Identity": 1,
        "If": 1,
        "Relu": 1,
        "Tanh": 1,
    }
    # The validator reports the same count.
    path = tmp_path / "policy.onnx"
    path.write_bytes(m.SerializeToString())
    done = subprocess.run(
        [sys.executable, str(VALIDATORS_DIR / "onnx_policy.py"), str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert f"PASS  {summary['parameters']:,} parameters (< 250,000)" in done.stdout


def test_external_data_is_a_problem_and_never_opened(tmp_path, monkeypatch):
    m = policy(16)
    secret = tmp_path / "weights.bin"
    secret.write_bytes(b"\x00" * 100_000)
    for tensor in m.graph.initializer[:2]:
        set_external_data(tensor, location=str(secret))
        tensor.data_location = TensorProto.EXTERNAL
        tensor.ClearField("raw_data")
    monkeypatch.chdir(tmp_path)
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    summary = summarize(m.SerializeToString())
    assert opened == []
    assert summary["problems"] == [
        f"tensor `w1` refers to external data in `{secret}` (not read)",
        f"tensor `b1` refers to external data in `{secret}` (not read)",
    ]
    assert summary["parameters"] == mlp_parameters(16)  # dims are in the model, the bytes are not needed


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "not an ONNX model: the file is empty"),
        (b"\xff" * 64, "not an ONNX model: the bytes are not a valid ONNX protobuf ("),
        (b"PK\x03\x04 a zip file, not a model", "not an ONNX model: the bytes are not a valid ONNX protobuf"),
        (b"\x08\x07", "not an ONNX model: there is no graph in it"),  # ir_version 7, and nothing else
        ("a string", "expected the model's bytes, got str"),
    ],
)
def test_garbage_raises_only_the_summary_error(data, message):
    with pytest.raises(OnnxSummaryError) as raised:
        summarize(data)
    assert str(raised.value).startswith(message)


def test_a_truncated_model_is_refused():
    data = policy(32).SerializeToString()
    for cut in (len(data) // 2, len(data) - 1, 3):
        with pytest.raises(OnnxSummaryError, match="not an ONNX model"):
            summarize(data[:cut])


def test_random_bytes_never_raise_anything_else():
    import random

    rng = random.Random(5)
    valid = policy(4).SerializeToString()
    for _ in range(300):
        if rng.random() < 0.5:
            data = rng.randbytes(rng.randint(1, 400))
        else:  # a real model with a few bytes flipped
            data = bytearray(valid)
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            summary = summarize(bytes(data))
        except OnnxSummaryError:
            continue
        assert isinstance(summary["parameters"], int) and isinstance(summary["problems"], list)


def test_models_over_the_size_cap_are_refused_before_parsing():
    assert MAX_BYTES == 64 * 1024 * 1024
    data = policy(32).SerializeToString()
    with pytest.raises(OnnxSummaryError) as raised:
        summarize(data, max_bytes=1000)
    assert (
        str(raised.value) == f"the model is {len(data):,} bytes; only models up to 1,000 bytes are summarized"
    )
    with pytest.raises(OnnxSummaryError, match=r"the model is 64\.0 MiB; only models up to 64\.0 MiB"):
        summarize(b"\x00" * (MAX_BYTES + 1))


def test_a_summary_diffs_as_empty_against_itself():
    summary = summarize(policy(32).SerializeToString())
    assert diff_summaries(summary, summary) == []
    assert diff_summaries(summary, summarize(policy(32).SerializeToString())) == []


def test_the_diff_names_every_structural_change():
    old = summarize(policy(32).SerializeToString())
    wider = policy(
        64,
        tail=[helper.make_node("Reshape", ["z", "shape"], ["t"])],
        extra=[ints("shape", 1, 3)],
        inputs=[io("obs", ["batch", 224]), io("memory", [1, 8])],
        outputs=[io("action", [1, 4])],
        opset=18,
        domains={"com.microsoft": 1},
    )
    new = summarize(wider.SerializeToString())
    rows = diff_summaries(old, new)
    assert rows == [
        {"field": "inputs[obs].shape", "old": [1, 224], "new": ["batch", 224], "change": "changed"},
        {"field": "inputs[memory]", "old": None, "new": "float32[1, 8]", "change": "added"},
        {"field": "outputs[action].shape", "old": [1, 3], "new": [1, 4], "change": "changed"},
        {"field": "opsets[ai.onnx]", "old": 17, "new": 18, "change": "changed"},
        {"field": "opsets[com.microsoft]", "old": None, "new": 1, "change": "added"},
        {"field": "parameters", "old": 7_299, "new": mlp_parameters(64) + 2, "change": "changed"},
        {"field": "nodes", "old": 6, "new": 7, "change": "changed"},
        {"field": "operators[Reshape]", "old": None, "new": 1, "change": "added"},
    ]
    back = diff_summaries(new, old)
    assert {"field": "inputs[memory]", "old": "float32[1, 8]", "new": None, "change": "removed"} in back
    assert {"field": "operators[Reshape]", "old": 1, "new": None, "change": "removed"} in back


def test_the_diff_sees_types_producers_and_operator_counts():
    old = summarize(policy(8).SerializeToString())
    changed = policy(8, tail=[helper.make_node("Relu", ["z"], ["t"])], producer="other-tool")
    changed.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    new = summarize(changed.SerializeToString())
    assert diff_summaries(old, new) == [
        {"field": "outputs[action].type", "old": "float32", "new": "float64", "change": "changed"},
        {"field": "producer", "old": "smrweb-tests", "new": "other-tool", "change": "changed"},
        {"field": "nodes", "old": 6, "new": 7, "change": "changed"},
        {"field": "operators[Relu]", "old": 1, "new": 2, "change": "changed"},
    ]


# --- red-team N2: a model of millions of nodes is refused before it is built --------------------------


def test_the_review_bomb_is_refused_on_the_wire_before_parsing():
    from tests.onnx_models import empty_node_bomb

    with pytest.raises(OnnxTooLarge, match=r"more than 200,000 nodes"):
        summarize(empty_node_bomb(2_500_000))  # 5 MB: the old code built 2.5 M nodes and walked them


def test_nodes_past_the_limit_in_a_subgraph_are_refused_after_parsing_without_a_walk():
    from tests.onnx_models import nested_bomb

    assert summarize(nested_bomb(1000))["nodes"] == 1001
    with pytest.raises(OnnxTooLarge, match=r"more than 200,000 nodes"):
        summarize(nested_bomb(MAX_NODES + 1))


def test_initializers_and_subgraph_depth_have_limits_too(monkeypatch):
    from smrweb.core import onnx_summary

    monkeypatch.setattr(onnx_summary, "MAX_INITIALIZERS", 3)
    with pytest.raises(OnnxTooLarge, match=r"more than 3 initializers"):
        summarize(policy(4).SerializeToString())  # four initializers
    body = model([helper.make_node("Identity", ["obs"], ["action"])])
    for _ in range(MAX_DEPTH + 1):  # If(then = the previous graph) around and around
        body = model(
            [helper.make_node("If", ["c"], ["action"], then_branch=body.graph, else_branch=body.graph)]
        )
    with pytest.raises(OnnxTooLarge, match=rf"nested more than {MAX_DEPTH} deep"):
        summarize(body.SerializeToString())


def test_the_summary_program_answers_one_json_object_on_stdout():
    from smrweb.core import onnx_summary
    from tests.onnx_models import empty_node_bomb

    def run(data: bytes) -> dict:
        done = subprocess.run(
            [sys.executable, "-I", onnx_summary.__file__], input=data, capture_output=True, check=True
        )
        return json.loads(done.stdout)

    assert run(policy(8).SerializeToString())["summary"]["parameters"] == mlp_parameters(8)
    assert run(b"not a model")["error"].startswith("not an ONNX model")
    assert "200,000 nodes" in run(empty_node_bomb(MAX_NODES + 1))["too_large"]


# --- weights (issue 33 P1-A): listed with digests, compared element by element ----------------------


def retrained(m, name: str, change) -> None:
    """Replace the initializer `name` of `m` by `change(values)`."""
    tensor = next(t for t in m.graph.initializer if t.name == name)
    tensor.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(tensor).copy()), name))


def test_a_digest_is_of_the_values_whether_stored_raw_or_typed():
    values = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    raw = model([helper.make_node("Identity", ["obs"], ["action"])], [numpy_helper.from_array(values, "w")])
    typed = model(
        [helper.make_node("Identity", ["obs"], ["action"])],
        [helper.make_tensor("w", TensorProto.FLOAT, [2, 3], values.reshape(-1).tolist())],
    )
    assert not typed.graph.initializer[0].raw_data  # float_data
    a, b = summarize(raw.SerializeToString()), summarize(typed.SerializeToString())
    assert a["tensors"] == b["tensors"]
    assert a["tensors"][0]["sha256"] == hashlib.sha256(values.tobytes()).hexdigest()
    assert diff_tensors(a, b)["changed"] == []


def test_constant_nodes_and_subgraphs_tensors_are_listed_under_their_own_names():
    branch = helper.make_graph(
        [helper.make_node("Add", ["z", "w1"], ["then_t"])],
        "then",
        [],
        [io("then_t", [1, 3])],
        [weights("w1", 1, 3)],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["z"], ["else_t"])], "else", [], [io("else_t", [1, 3])]
    )
    m = policy(
        4,
        tail=[
            helper.make_node("Constant", [], ["c"], value=weights("c", 5, 4)),
            helper.make_node(
                "Constant", [], ["yes"], value=helper.make_tensor("y", TensorProto.BOOL, [], [True])
            ),
            helper.make_node("If", ["yes"], ["t"], name="gate", then_branch=branch, else_branch=other),
        ],
    )
    names = [t["name"] for t in summarize(m.SerializeToString())["tensors"]]
    assert names == ["w1", "b1", "w2", "b2", "c", "yes", "gate.then_branch/w1"]


def test_the_tensor_diff_names_added_removed_reshaped_and_changed():
    old = policy(8)
    new = policy(8, extra=[weights("extra", 3)])
    retrained(new, "w2", lambda v: v + 1)
    retrained(new, "b1", lambda v: np.concatenate([v, v]))  # 8 → 16: reshaped
    new.graph.initializer.remove(next(t for t in new.graph.initializer if t.name == "b2"))
    found = diff_tensors(summarize(old.SerializeToString()), summarize(new.SerializeToString()))
    assert found == {
        "added": ["extra"],
        "removed": ["b2"],
        "reshaped": [{"name": "b1", "old": "float32[8]", "new": "float32[16]"}],
        "changed": ["w2"],
        "same": 1,
        "omitted": "",
    }


def test_compare_gives_true_counts_and_max_and_mean_absolute_change():
    old, new = policy(32), policy(32)
    rng = np.random.default_rng(5)
    retrained(
        new, "w1", lambda v: v + rng.normal(0, 0.01, v.shape).astype(np.float32) * (rng.random(v.shape) < 0.3)
    )
    retrained(new, "b2", lambda v: v * np.float32(-2))
    a = {t.name: numpy_helper.to_array(t) for t in old.graph.initializer}
    b = {t.name: numpy_helper.to_array(t) for t in new.graph.initializer}
    change = {n: np.abs(a[n].astype(np.float64) - b[n].astype(np.float64)) for n in a}
    elements = sum(v.size for v in a.values())

    figures = compare(old.SerializeToString(), new.SerializeToString())
    assert figures["tensors_compared"] == 4 and figures["tensors_changed"] == 2
    assert figures["elements_compared"] == elements == mlp_parameters(32)
    assert figures["elements_changed"] == sum(int(np.count_nonzero(a[n] != b[n])) for n in a)
    assert figures["max_abs_change"] == pytest.approx(max(c.max() for c in change.values()), rel=1e-12)
    assert figures["mean_abs_change"] == pytest.approx(
        sum(c.sum() for c in change.values()) / elements, rel=1e-9
    )
    rows = {r["name"]: r for r in figures["tensors"]}
    assert set(rows) == {"w1", "b2"}
    assert rows["w1"]["changed"] == int(np.count_nonzero(a["w1"] != b["w1"])) > 1000
    assert rows["w1"]["mean_abs_change"] == pytest.approx(change["w1"].mean(), rel=1e-9)
    assert rows["b2"] == {
        "name": "b2",
        "dtype": "float32",
        "shape": [3],
        "elements": 3,
        "changed": 3,
        "max_abs_change": pytest.approx(change["b2"].max()),
        "mean_abs_change": pytest.approx(change["b2"].mean()),
    }
    assert figures["tensors"][0]["name"] == max(rows, key=lambda n: change[n].max())  # largest first
    assert json.loads(json.dumps(figures, allow_nan=False)) == figures


def test_compare_counts_nan_as_equal_and_keeps_inf_out_of_the_figures():
    old, new = policy(4), policy(4)
    retrained(old, "b2", lambda v: np.array([np.nan, 1.0, 2.0], dtype=np.float32))
    retrained(new, "b2", lambda v: np.array([np.nan, np.inf, 2.5], dtype=np.float32))
    figures = compare(old.SerializeToString(), new.SerializeToString())
    assert figures["elements_changed"] == 2 and figures["nonfinite_changes"] == 1
    assert figures["max_abs_change"] == 0.5


def test_compare_has_limits_of_tensors_and_elements(monkeypatch):
    from smrweb.core import onnx_summary

    old, new = policy(8).SerializeToString(), policy(8, extra=[weights("x", 2)]).SerializeToString()
    monkeypatch.setattr(onnx_summary, "MAX_COMPARED_ELEMENTS", 1000)
    with pytest.raises(OnnxTooLarge, match=r"more than 1,000 elements of weights to compare"):
        compare(old, new)
    monkeypatch.setattr(onnx_summary, "MAX_TENSORS", 4)
    with pytest.raises(OnnxTooLarge, match=r"more than 4 tensors"):
        compare(old, new)
    summary = summarize(new)
    assert summary["tensors"] is None and summary["tensors_omitted"] == "more than 4 tensors of weights"
    assert diff_tensors(summarize(old), summary)["omitted"] == "more than 4 tensors of weights"


def test_the_summary_program_compares_two_models_on_stdin():
    from smrweb.core import onnx_summary

    old, new = policy(8), policy(8)
    retrained(new, "b1", lambda v: v + np.float32(0.5))
    a, b = old.SerializeToString(), new.SerializeToString()
    done = subprocess.run(
        [sys.executable, "-I", onnx_summary.__file__, "--compare"],
        input=len(a).to_bytes(8, "big") + a + b,
        capture_output=True,
        check=True,
    )
    figures = json.loads(done.stdout)["comparison"]
    assert figures["elements_changed"] == 8 and figures["max_abs_change"] == pytest.approx(0.5)
    cut = subprocess.run(
        [sys.executable, "-I", onnx_summary.__file__, "--compare"],
        input=(10**6).to_bytes(8, "big") + a,
        capture_output=True,
        check=True,
    )
    assert json.loads(cut.stdout) == {"error": "expected two models: the input is cut short"}
