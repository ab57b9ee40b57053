"""The installed `smrweb` console script against a live server: a score with its artifact, metrics,
turns and state changes stored; a re-run (and a retry after a lost answer) is a no-op; refusals exit 1
with the field error, usage errors 2, an unreachable server 3; and the shell example of
docs/integrations.md#cli-smrweb-report."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from smrweb.cli import END_TRAP_EXAMPLE, derived_id
from smrweb.tracking.models import AgentTurn, Artifact, MetricPoint, Run, StateChange, Submission
from tests.client.test_client import FaultProxy, closed_port, doc_block
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SMRWEB = Path(sys.executable).parent / "smrweb"  # the console script of [project.scripts]


@pytest.fixture
def env(live_server, project, token):
    """The environment of a shell harness pointed at the live server."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith("SMRWEB_") and k != "DJANGO_SETTINGS_MODULE"
    }
    return {
        **base,
        "SMRWEB_URL": live_server.url,
        "SMRWEB_TOKEN": token,
        "SMRWEB_PROJECT": "hill",
        "SMRWEB_RUN": "shell-1",
        "SMRWEB_RETRIES": "2",
        "PATH": f"{SMRWEB.parent}:{base.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),  # this checkout's smrweb, whatever the installed copy points at
    }


def smrweb(env, *args, cwd=None) -> subprocess.CompletedProcess:
    assert SMRWEB.exists(), f"no console script at {SMRWEB}"
    return subprocess.run(
        [str(SMRWEB), *args], check=False, env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def run_of(external_id: str = "shell-1") -> Run:
    return Run.objects.get(project__slug="hill", external_id=external_id)


def test_score_with_artifact_is_linked_and_a_rerun_is_a_no_op(env, tmp_path):
    sub_file = tmp_path / "optimizer.py"
    sub_file.write_text("def step(x):\n    return x\n")
    digest = hashlib.sha256(sub_file.read_bytes()).hexdigest()
    args = [
        "report",
        "score",
        "0.83",
        "--artifact",
        str(sub_file),
        "--artifact-name",
        "submission/optimizer.py",
        "--commit",
        "abc123",
        "--metric",
        "accuracy",
        "--details",
        '{"seed": 7}',
    ]
    first = smrweb(env, *args)
    assert first.returncode == 0, first.stderr
    assert "score stored" in first.stdout and digest in first.stdout
    sub = Submission.objects.get(run=run_of())
    assert sub.score == 0.83 and sub.commit == "abc123" and sub.details == {"seed": 7, "metric": "accuracy"}
    assert sub.artifact is not None and sub.artifact.blob.sha256 == digest
    assert sub.artifact.path == "submission/optimizer.py" and sub.artifact_ref == digest
    assert sub.event_id.startswith("cli-") and sub.event_id in first.stdout

    again = smrweb(env, *args)
    assert again.returncode == 0, again.stderr
    assert "already stored (duplicate)" in again.stdout
    assert Submission.objects.filter(run=run_of()).count() == 1
    assert Artifact.objects.filter(run=run_of()).count() == 1

    # The same score with other bytes is another submission; so is the same one under its own --id.
    sub_file.write_text("def step(x):\n    return 2 * x\n")
    assert smrweb(env, *args).returncode == 0
    assert smrweb(env, *args, "--id", "eval-2").returncode == 0
    assert Submission.objects.filter(run=run_of()).count() == 3
    assert Submission.objects.filter(run=run_of(), event_id="eval-2").exists()


def test_metric_turn_and_artifact(env, tmp_path):
    assert smrweb(env, "report", "metric", "loss", "0.12", "--step", "3").returncode == 0
    assert (
        smrweb(
            env, "report", "metric", "loss", "0.10", "--step", "4", "--ts", "2026-03-01T10:00:00Z"
        ).returncode
        == 0
    )
    done = smrweb(
        env,
        "report",
        "turn",
        "1",
        "--tokens-in",
        "1200",
        "--tokens-out",
        "300",
        "--cost-usd",
        "0.004",
        "--model",
        "gpt-x",
        "--tool-call",
        "bash",
        "--tool-call",
        "edit",
        "--duration-ms",
        "2100",
    )
    assert done.returncode == 0, done.stderr
    log_file = tmp_path / "run.log"
    log_file.write_text("line\n")
    up = smrweb(env, "report", "artifact", str(log_file), "--name", "logs/run.log", "--kind", "log")
    assert up.returncode == 0, up.stderr
    assert hashlib.sha256(b"line\n").hexdigest() in up.stdout

    run = run_of()
    points = dict(MetricPoint.objects.filter(run=run).values_list("step", "value"))
    assert points == {3: 0.12, 4: 0.10}
    assert MetricPoint.objects.get(run=run, step=4).ts.isoformat() == "2026-03-01T10:00:00+00:00"
    turn = AgentTurn.objects.get(run=run)
    assert (turn.turn, turn.tokens_in, turn.model, turn.tool_calls, turn.duration_ms) == (
        1,
        1200,
        "gpt-x",
        ["bash", "edit"],
        2100,
    )
    assert str(run.cost_usd) == "0.004000"
    assert Artifact.objects.get(run=run).kind == "log"
    # No --cost-usd: the server prices it, cached and reasoning parts at their own prices (gpt-4o: input
    # 2.50, cached 1.25, output 10 per 1M).
    priced = smrweb(
        env,
        *("report", "turn", "2", "--tokens-in", "1000000", "--tokens-out", "100000", "--model", "gpt-4o"),
        *("--tokens-cached-in", "400000", "--tokens-reasoning", "50000"),
    )
    assert priced.returncode == 0, priced.stderr
    second = AgentTurn.objects.get(run=run, turn=2)
    assert (second.tokens_cached_in, second.tokens_reasoning, second.cost_origin) == (
        400_000,
        50_000,
        "computed",
    )
    assert second.cost_usd == Decimal("3.000000")  # 600k × 2.50 + 400k × 1.25 + 100k × 10
    # The id is the documented hash of the input.
    event = {"type": "metric", "key": "loss", "value": 0.12, "step": 3}
    assert MetricPoint.objects.filter(
        run=run, event_id=derived_id("metric", "hill", "shell-1", event)
    ).exists()


def test_state_changes_are_compare_and_set(env):
    for state in ("executing", "reviewing", "executing"):
        done = smrweb(env, "report", "state", state)
        assert done.returncode == 0, done.stderr
    assert run_of().state == "executing"
    assert StateChange.objects.filter(run=run_of()).count() == 3  # a return to a state is recorded

    again = smrweb(env, "report", "state", "executing")
    assert again.returncode == 0 and "already" in again.stdout
    failed = ["report", "state", "failed", "--reason", "validator timed out", "--family", "timeout"]
    assert smrweb(env, *failed).returncode == 0
    assert "already" in smrweb(env, *failed).stdout
    run = run_of()
    assert StateChange.objects.filter(run=run).count() == 4
    assert (run.state, run.failure_family, run.failure_detail) == ("failed", "timeout", "validator timed out")


@pytest.mark.parametrize(
    "args",
    [
        ["report", "metric", "loss", "0.5", "--step", "1"],
        ["report", "score", "0.9", "--commit", "c9"],
        ["report", "state", "running"],
        ["report", "turn", "4", "--tokens-in", "10", "--tokens-out", "1"],
    ],
)
def test_a_shell_retry_after_a_lost_answer_is_a_no_op(env, live_server, args):
    """The server stores the event but the answer is lost (the proxy drops it, no retries left): exit 3.
    The shell retries the same command: the event is not stored twice."""
    proxy = FaultProxy(live_server.url)
    try:
        proxy.inject("/events", "drop")
        lost = smrweb({**env, "SMRWEB_URL": proxy.url}, *args, "--retries", "0")
    finally:
        proxy.close()
    assert lost.returncode == 3, lost.stderr
    assert "unreachable" in lost.stderr
    retry = smrweb(env, *args)
    assert retry.returncode == 0, retry.stderr
    assert "duplicate" in retry.stdout or "already" in retry.stdout
    run = run_of()
    model = {"metric": MetricPoint, "score": Submission, "state": StateChange, "turn": AgentTurn}[args[1]]
    assert model.objects.filter(run=run).count() == 1


def test_the_cli_retries_a_503_itself(env, live_server):
    proxy = FaultProxy(live_server.url)
    try:
        proxy.inject("/events", "503", "drop")
        done = smrweb({**env, "SMRWEB_URL": proxy.url}, "report", "metric", "acc", "0.7")
    finally:
        proxy.close()
    assert done.returncode == 0, done.stderr
    assert "duplicate" in done.stdout  # the dropped attempt had stored it
    assert MetricPoint.objects.filter(run=run_of(), key="acc").count() == 1


def test_refused_input_exits_1_with_the_field_error(env):
    done = smrweb(env, "report", "state", "finished")
    assert done.returncode == 1
    assert "event 0 state:" in done.stderr and "'running'" in done.stderr
    assert not Run.objects.filter(external_id="shell-1").exists()

    bad_token = smrweb({**env, "SMRWEB_TOKEN": "smr_wrong"}, "report", "metric", "loss", "1")
    assert bad_token.returncode == 1 and "401" in bad_token.stderr


def test_usage_errors_exit_2(env, tmp_path):
    no_run = {k: v for k, v in env.items() if k != "SMRWEB_RUN"}
    done = smrweb(no_run, "report", "metric", "loss", "1")
    assert done.returncode == 2 and "--run (SMRWEB_RUN)" in done.stderr
    assert smrweb(env, "report", "metric", "loss", "nan").returncode == 2
    assert smrweb(env, "report", "score", "0.5", "--artifact", str(tmp_path / "missing.py")).returncode == 2
    assert smrweb(env, "report", "bogus").returncode == 2
    assert smrweb(env).returncode == 2
    assert not Run.objects.exists()
    helped = smrweb(env, "report", "--help")
    assert (
        helped.returncode == 0
        and "Exit codes" in helped.stdout
        and "smrweb report score 0.83" in helped.stdout
    )


def test_an_unreachable_server_exits_3(env):
    done = smrweb(
        {**env, "SMRWEB_URL": f"http://127.0.0.1:{closed_port()}"}, "report", "score", "0.5", "--retries", "1"
    )
    assert done.returncode == 3
    assert "server unreachable" in done.stderr and "ConnectError" in done.stderr


def test_docs_shell_example(env, tmp_path):
    lang, code = doc_block("cli-example")
    assert lang == "bash"
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "optimizer.py").write_text("print('x')\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "run.log").write_text("ok\n")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        check=False,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("metric loss already stored (duplicate)")
    run = Run.objects.get(project__slug="hill", external_id__startswith="nightly-")
    assert run.state == "done"
    assert StateChange.objects.filter(run=run).count() == 2
    assert AgentTurn.objects.filter(run=run).count() == 1
    assert MetricPoint.objects.filter(run=run).count() == 1
    sub = Submission.objects.get(run=run)
    assert sub.artifact.blob.sha256 == hashlib.sha256(b"print('x')\n").hexdigest()
    assert Artifact.objects.filter(run=run).count() == 2


# --- a shell harness's end (docs/integrations.md, `smrweb report state -h`) ---------------------------


def test_the_docs_trap_is_the_one_in_the_cli_help(env):
    assert doc_block("cli-trap") == ("bash", END_TRAP_EXAMPLE.rstrip("\n"))
    shown = smrweb(env, "report", "state", "-h")
    assert shown.returncode == 0 and END_TRAP_EXAMPLE.rstrip("\n") in shown.stdout


TRAIN = {
    "ok": "print('trained')\n",
    "error": "raise SystemExit(3)\n",
    # Runs until it is terminated; says it started (and its pid) first.
    "term": "import os, pathlib, time\n"
    "pathlib.Path('started').write_text(str(os.getpid()))\n"
    "time.sleep(60)\n",
}


@pytest.mark.parametrize("case", ["ok", "error", "term"])
def test_the_docs_trap_reports_how_the_script_ended(env, tmp_path, case):
    _, code = doc_block("cli-trap")
    (tmp_path / "train.py").write_text(TRAIN[case])
    script = subprocess.Popen(
        ["bash", "-c", code], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if case == "term":
        wait_for(lambda: (tmp_path / "started").exists(), timeout=30)
        script.send_signal(signal.SIGTERM)
    out, err = script.communicate(timeout=120)
    run = run_of()
    changes = list(StateChange.objects.filter(run=run).order_by("ts").values_list("state", flat=True))
    if case == "ok":
        assert script.returncode == 0, err
        assert changes == ["running", "done"] and run.state == "done"
    elif case == "error":
        assert script.returncode == 3, err
        assert (run.state, run.failure_family, run.failure_detail) == ("failed", "exit", "exit status 3")
    else:
        assert script.returncode == 143, err
        assert (run.state, run.failure_family, run.failure_detail) == ("failed", "signal", "SIGTERM")
        pid = int((tmp_path / "started").read_text())

        def gone() -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_for(gone, timeout=10)  # the trap passed the TERM on to the work
