"""The Dogfight validator (smrweb/validators/onnx_policy.py) on real ONNX models, run the way a verification
runs it: the preset's command, in the bubblewrap sandbox with the configured limits, on the model's bytes."""

from __future__ import annotations

import pytest
from django.conf import settings
from onnx import TensorProto, helper
from onnx.external_data_helper import set_external_data

from smrweb.core import sandbox
from smrweb.sources import verification
from smrweb.sources.preflight import VALIDATORS_DIR
from smrweb.tracking.services import scenarios
from tests.onnx_models import FLOAT, INT64, ints, io, mlp_parameters, model, policy, weights

COMMAND = next(p for p in scenarios.read_presets() if p["key"] == "onnx-arena-dogfight")["validator_command"]
ARTIFACT = "/sandbox/artifact/submission/policy.onnx"


def validate(
    onnx_model, *options: str, confinement: sandbox.Confinement | None = None
) -> sandbox.SandboxResult:
    """The preset's validator command (`options` before the artifact) on the model, confined as the
    verification task confines it."""
    data = onnx_model if isinstance(onnx_model, bytes) else onnx_model.SerializeToString()
    confinement = confinement or verification.confinement()
    assert confinement is not None  # the tests run the real sandbox
    return sandbox.run_validator(
        [*COMMAND[:-1], *options, COMMAND[-1]],
        data,
        artifact_name="submission/policy.onnx",
        timeout=settings.SMRWEB_VALIDATOR_TIMEOUT_SECONDS,
        extra_placeholders={"validators": str(VALIDATORS_DIR)},
        confinement=confinement,
    )


def lines(result: sandbox.SandboxResult) -> list[str]:
    return result.output_tail.splitlines()


def assert_invalid(result: sandbox.SandboxResult, message: str) -> None:
    assert (result.outcome, result.exit_code) == (sandbox.FAILED, 1), result
    assert any(line.startswith("FAIL  ") and message in line for line in lines(result)), result.output_tail
    assert lines(result)[-1] == f"invalid: {ARTIFACT}"


def slow_policy(matmuls: int, size: int = 1500):
    """No weights to speak of, lots of work: the observation expanded to size×size, squared `matmuls`
    times (Tanh keeps it finite), and a [1,3] corner of it returned."""
    nodes = [
        helper.make_node("Transpose", ["obs"], ["column"], perm=[1, 0]),
        helper.make_node("Expand", ["column", "wide"], ["columns"]),
        helper.make_node("Expand", ["obs", "tall"], ["rows"]),
        helper.make_node("MatMul", ["rows", "columns"], ["m0"]),
    ]
    for k in range(matmuls):
        nodes += [
            helper.make_node("MatMul", [f"m{k}", f"m{k}"], [f"p{k}"]),
            helper.make_node("Tanh", [f"p{k}"], [f"m{k + 1}"]),
        ]
    nodes.append(helper.make_node("Slice", [f"m{matmuls}", "start", "end"], ["action"]))
    shapes = [ints("wide", 224, size), ints("tall", size, 224), ints("start", 0, 0), ints("end", 1, 3)]
    return model(nodes, shapes)


def test_a_small_policy_passes_every_check_inside_the_sandbox():
    result = validate(policy(32))
    assert (result.outcome, result.exit_code) == (sandbox.PASSED, 0), result
    out = lines(result)
    assert out[:5] == [
        f"PASS  {mlp_parameters(32):,} parameters (< 250,000)",
        "PASS  input `obs` element type is float32",
        "PASS  input `obs` shape is [1, 224]",
        "PASS  output `action` element type is float32",
        "PASS  output `action` shape is [1, 3]",
    ]
    assert out[5].startswith("PASS  onnxruntime 1.") and " loads the model (" in out[5]
    assert out[6] == "PASS  output `action` is float32[1, 3] on all 8 random inputs"
    assert out[7].startswith("PASS  output `action` is finite on all 8 random inputs (seed 17: zeros,")
    assert out[8].startswith("PASS  8 runs in ") and "limits: 1 s a run, 5 s in all" in out[8]
    assert out[9:] == [f"valid: {ARTIFACT}"]  # nothing else: no onnxruntime warnings, no OpenBLAS noise
    assert result.duration_s < 10


def test_the_policy_needs_no_threads_so_a_tight_process_limit_cannot_break_it():
    """RLIMIT_NPROC counts threads: OpenBLAS starting one per core would kill `import numpy` (SIGINT) on a
    worker with more cores than the limit. With a limit of 1 no thread can start at all."""
    tight = verification.confinement()
    result = validate(policy(16), confinement=sandbox.Confinement(**{**tight.__dict__, "processes": 1}))
    assert (result.outcome, result.exit_code) == (sandbox.PASSED, 0), result
    assert "OpenBLAS" not in result.output_tail


@pytest.mark.parametrize(
    "onnx_model, message",
    [
        (policy(1200), f"FAIL  {mlp_parameters(1200):,} parameters, must be fewer than 250,000"),
        (
            # Exactly at the limit is too many.
            policy(
                1,
                tail=[helper.make_node("Add", ["z", "bias"], ["t"])],
                extra=[weights("bias", 250_000 - mlp_parameters(1))],
            ),
            "FAIL  250,000 parameters, must be fewer than 250,000",
        ),
        (
            # Weights hidden in a Constant node count.
            policy(
                32,
                tail=[
                    helper.make_node("Constant", [], ["hidden"], value=weights("c", 500, 500)),
                    helper.make_node("Identity", ["z"], ["t"]),
                ],
            ),
            f"FAIL  {mlp_parameters(32) + 250_000:,} parameters",
        ),
        (
            # And in a subgraph (an If whose branches carry their own initializers).
            policy(
                32,
                tail=[
                    helper.make_node(
                        "Constant", [], ["yes"], value=helper.make_tensor("y", TensorProto.BOOL, [], [True])
                    ),
                    helper.make_node(
                        "If",
                        ["yes"],
                        ["t"],
                        then_branch=helper.make_graph(
                            [helper.make_node("Add", ["z", "big_b"], ["then_t"])],
                            "then",
                            [],
                            [io("then_t", [1, 3])],
                            [weights("big_b", 1, 3), weights("big_w", 600, 500)],
                        ),
                        else_branch=helper.make_graph(
                            [helper.make_node("Identity", ["z"], ["else_t"])],
                            "else",
                            [],
                            [io("else_t", [1, 3])],
                        ),
                    ),
                ],
            ),
            f"FAIL  {mlp_parameters(32) + 1 + 3 + 300_000:,} parameters",
        ),
        (policy(inputs=[io("obs", [1, 225])]), "FAIL  input `obs` shape is [1, 225], expected [1, 224]"),
        (
            policy(inputs=[io("obs", ["batch", 224])]),
            "FAIL  input `obs` shape is ['batch', 224], expected [1, 224]",
        ),
        (policy(outputs=[io("action", [1, 4])]), "FAIL  output `action` shape is [1, 4], expected [1, 3]"),
        (
            policy(outputs=[io("action", [1, 3], INT64)]),
            "FAIL  output `action` element type is 7 (ONNX TensorProto code), expected float32 (1)",
        ),
        (
            policy(inputs=[io("obs", [1, 224]), io("memory", [1, 8])]),
            "FAIL  exactly one input expected, found 2 (obs, memory)",
        ),
        (policy(outputs=[]), "FAIL  exactly one output expected, found 0 (none)"),
    ],
    ids=[
        "wide",
        "at-the-limit",
        "constant-weights",
        "subgraph-weights",
        "input-225",
        "input-batch",
        "output-4",
        "output-int64",
        "two-inputs",
        "no-output",
    ],
)
def test_a_policy_that_breaks_a_static_rule_is_invalid_and_never_run(onnx_model, message):
    result = validate(onnx_model)
    assert_invalid(result, message)
    assert "onnxruntime" not in result.output_tail  # not run


def test_weights_listed_among_the_inputs_are_not_inputs():
    # Older ONNX IR versions list every initializer among the graph inputs too.
    weights_too = [io("w1", [224, 16]), io("b1", [16]), io("w2", [16, 3]), io("b2", [3])]
    legacy = policy(16, inputs=[io("obs", [1, 224]), *weights_too])
    legacy.ir_version = 3
    legacy.opset_import[0].version = 9
    result = validate(legacy)
    assert result.outcome == sandbox.PASSED, result


def test_nan_outputs_are_named_with_the_inputs_that_made_them():
    # sqrt of a pre-activation that is negative for some observations
    result = validate(policy(32, tail=[helper.make_node("Sqrt", ["z"], ["t"])]))
    assert_invalid(result, "non-finite outputs (NaN or inf) from output `action` on ")
    [line] = [line for line in lines(result) if "non-finite" in line]
    assert "(NaN)" in line and " of 8 random inputs: " in line
    assert "PASS  output `action` is float32[1, 3] on all 8 random inputs" in lines(result)


def test_an_infinite_output_fails_too():
    # 1 / sum(obs): the all-zeros observation divides by zero.
    nodes = [
        helper.make_node("ReduceSum", ["obs"], ["total"], keepdims=1),  # [1, 1]
        helper.make_node("Div", ["ones", "total"], ["action"]),
    ]
    ones = helper.make_tensor("ones", FLOAT, [1, 3], [1.0, 1.0, 1.0])
    result = validate(model(nodes, [ones]))
    assert_invalid(
        result, "non-finite outputs (NaN or inf) from output `action` on 1 of 8 random inputs: zeros (inf)"
    )


def test_an_output_that_is_not_the_declared_shape_at_run_time_is_invalid():
    reshaped = policy(
        32, tail=[helper.make_node("Reshape", ["z", "column"], ["t"])], extra=[ints("column", 3, 1)]
    )
    result = validate(reshaped)
    assert "PASS  output `action` shape is [1, 3]" in lines(result)  # what it declares
    assert_invalid(
        result,
        "output `action` is not float32[1, 3] at run time, though the model declares it: float32[3, 1] "
        "on 8 of 8",
    )


def test_a_model_onnxruntime_cannot_load_is_invalid():
    custom = model(
        [helper.make_node("Frobnicate", ["obs"], ["action"], domain="example.custom")],
        domains={"example.custom": 1},
    )
    result = validate(custom)
    assert_invalid(result, "cannot load the model: ")
    assert "Frobnicate" in result.output_tail


def test_a_run_that_fails_is_invalid_with_the_reason():
    # A fixed Reshape the [1,3] output cannot take.
    bad = policy(8, tail=[helper.make_node("Reshape", ["z", "shape"], ["t"])], extra=[ints("shape", 2, 2)])
    result = validate(bad)
    assert_invalid(result, "onnxruntime failed on input zeros: ")


def test_a_slow_policy_is_stopped_at_the_time_limit():
    result = validate(slow_policy(12), "--time-limit", "0.2")
    assert_invalid(result, "FAIL  too slow: the run on input zeros was stopped after 0.")
    assert "over the limit of 0.2 s a run" in result.output_tail
    assert result.duration_s < 5


def test_the_total_time_limit_counts_every_run():
    result = validate(slow_policy(12), "--time-limit", "10", "--total-time-limit", "0.3")
    assert_invalid(result, "over the limit of 0.3 s for all 8 runs")


def test_a_node_that_does_not_stop_when_told_ends_the_validation():
    """onnxruntime checks the terminate flag between nodes only: one MatMul of an 8000×8960 tile of the
    observation by its transpose (~1.15 TFLOP, 7 s on a 2026 EPYC core; an eighth of it took 0.7 s, under
    the limit and its grace) runs on until the validator gives up on it. Its tensors fit the sandbox's
    memory (~0.8 GB). The limit leaves the nodes before it (a 287 MB tile and its transpose) time to finish
    on a loaded machine (with 0.5 s, CI once saw them outlive it: the flag stopped the run before MatMul)."""
    nodes = [
        helper.make_node("Tile", ["obs", "repeats"], ["tile"]),
        helper.make_node("Transpose", ["tile"], ["tile_t"], perm=[1, 0]),
        helper.make_node("MatMul", ["tile", "tile_t"], ["square"]),
        helper.make_node("Slice", ["square", "start", "end"], ["action"]),
    ]
    one_big_node = model(nodes, [ints("repeats", 8000, 40), ints("start", 0, 0), ints("end", 1, 3)])
    result = validate(one_big_node, "--time-limit", "1.5")
    assert_invalid(result, "FAIL  too slow: the run on input zeros took longer than 1.5 s and did not stop")
    assert 2.5 < result.duration_s < 10


def test_a_model_referring_to_external_data_is_refused_without_opening_it():
    external = policy(16)
    for tensor in external.graph.initializer:
        set_external_data(tensor, location="../../../etc/passwd")
        tensor.data_location = TensorProto.EXTERNAL
        tensor.ClearField("raw_data")
    result = validate(external)
    assert_invalid(result, "FAIL  refers to external data (`w1` in `../../../etc/passwd`")
    assert "onnxruntime" not in result.output_tail and "root:" not in result.output_tail


@pytest.mark.parametrize(
    "data, message",
    [
        (b"not a model at all", "is not a valid ONNX model"),
        (policy(16).SerializeToString()[:5000], "is not a valid ONNX model"),  # truncated
        (
            model([helper.make_node("Relu", ["nowhere"], ["action"])]).SerializeToString(),
            "is not a valid ONNX model: ValidationError: Nodes in a graph must be topologically sorted",
        ),
    ],
)
def test_bytes_that_are_not_a_model_are_invalid(data, message):
    result = validate(data)
    assert (result.outcome, result.exit_code) == (sandbox.FAILED, 1), result
    assert result.output_tail.startswith(f"FAIL  {ARTIFACT} {message}")


def test_bad_arguments_cannot_run():
    result = validate(policy(16), "--time-limit", "0")
    assert (result.outcome, result.exit_code) == (sandbox.CANNOT_VERIFY, 2), result
    assert "CANNOT RUN  limits must be positive" in result.output_tail
