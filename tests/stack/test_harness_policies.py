"""The demo harness's ONNX policies (stack/harness.py `onnx_policy`): mostly valid, a few invalid in
distinct ways, each verdict given by the Dogfight validator in the sandbox as the demo's worker gives it."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from smrweb.core import sandbox
from smrweb.core.onnx_summary import summarize
from smrweb.stack import harness
from tests.validators.test_onnx_policy import validate

REASONS = {
    "wide": "FAIL  273,603 parameters, must be fewer than 250,000",
    "wrong-shape": "FAIL  output `action` shape is [1, 4], expected [1, 3]",
    "nan": "FAIL  non-finite outputs (NaN or inf) from output `action` on ",
    "reshaped": "FAIL  output `action` is not float32[1, 3] at run time, though the model declares it: "
    "float32[3, 1] on 8 of 8 random inputs",
}


def test_most_policies_are_valid_and_each_flaw_turns_up():
    rng = random.Random(3)
    counts = Counter()
    for _ in range(400):
        flaw = rng.choices(list(harness.POLICY_FLAWS), weights=list(harness.POLICY_FLAWS.values()))[0]
        counts[flaw] += 1
    assert counts[""] > 280 and all(counts[flaw] > 5 for flaw in REASONS)
    assert set(harness.POLICY_FLAWS) == {"", *REASONS}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_good_policy_is_small_and_verifies(seed):
    data = harness.onnx_policy(random.Random(seed), "")
    summary = summarize(data)
    assert len(data) < 50_000 and summary["parameters"] < 12_000
    assert summary["operators"] == {"Add": 2, "MatMul": 2, "Relu": 1, "Tanh": 1}
    result = validate(data)
    assert (result.outcome, result.exit_code) == (sandbox.PASSED, 0), result.output_tail


@pytest.mark.parametrize("flaw", sorted(REASONS))
@pytest.mark.parametrize("seed", [1, 2])
def test_each_flawed_policy_is_refused_for_its_own_reason(flaw, seed):
    data = harness.onnx_policy(random.Random(seed), flaw)
    assert len(data) < (1_200_000 if flaw == "wide" else 50_000)
    result = validate(data)
    assert (result.outcome, result.exit_code) == (sandbox.FAILED, 1), result.output_tail
    fails = [line for line in result.output_tail.splitlines() if line.startswith("FAIL  ")]
    assert len(fails) == 1 and fails[0].startswith(REASONS[flaw]), result.output_tail


def test_the_same_seed_gives_the_same_policy():
    assert harness.onnx_policy(random.Random(9)) == harness.onnx_policy(random.Random(9))
    with pytest.raises(ValueError, match="unknown policy flaw"):
        harness.onnx_policy(random.Random(9), "slow")
