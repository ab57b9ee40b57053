"""Run logs from a harness, against the live server: `Client.log_lines` (its batch id keeps a retry after
a lost answer to one copy), the `LogHandler` (batches, flush on close, never raising, not feeding
itself), and the `smrweb log` console script (one line, and stdin in batches)."""

from __future__ import annotations

import logging
import subprocess
import time

import pytest

from smrweb.client import Client, LogHandler, Refused
from smrweb.tracking.models import LogLevel, Run, RunLogBatch, RunLogLine
from tests.client.test_cli import env, smrweb  # noqa: F401 - the fixture of a shell harness
from tests.client.test_client import FaultProxy, closed_port

pytestmark = pytest.mark.django_db(transaction=True)


def lines_of(run_id: str) -> list[tuple[int, int, str, str]]:
    return list(
        RunLogLine.objects.filter(run__project__slug="hill", run__external_id=run_id)
        .order_by("seq")
        .values_list("seq", "level", "stream", "text")
    )


@pytest.fixture
def proxy(live_server):
    p = FaultProxy(live_server.url)
    yield p
    p.close()


def test_log_lines_is_kept_once_through_a_lost_answer_and_a_503(proxy, token):
    proxy.inject("/logs", "503", "drop")
    with Client(proxy.url, token, "hill", "r-log", backoff_base=0.05, report_end=False) as client:
        answer = client.log_lines(
            ["first", {"text": "second\nthird", "level": "warning", "ts": 1764700000.5}], stream="stderr"
        )
    # The 503 was not stored; the dropped answer was, and its retry (same batch id) was a repeat.
    assert [s[3] for s in proxy.requests_to("/logs")] == ["503", "drop", ""]
    assert answer["kept"] == 3 and answer["repeat"] is True
    assert lines_of("r-log") == [
        (1, LogLevel.INFO, "stderr", "first"),
        (2, LogLevel.WARNING, "stderr", "second"),
        (3, LogLevel.WARNING, "stderr", "third"),
    ]
    assert RunLogBatch.objects.count() == 1
    assert RunLogLine.objects.get(seq=2).ts.timestamp() == 1764700000.5


def test_log_lines_over_the_request_cap_go_in_several_batches(server_token):
    url, token = server_token
    with Client(url, token, "hill", "r-big", report_end=False) as client:
        answer = client.log_lines([f"l{i}" for i in range(5001)], batch_id="big")
    assert (answer["kept"], answer["first_seq"], answer["last_seq"]) == (5001, 1, 5001)
    assert sorted(RunLogBatch.objects.values_list("batch_id", flat=True)) == ["big.1", "big.2"]


def test_log_lines_refused_raises_with_the_field(server_token):
    url, token = server_token
    with Client(url, token, "hill", "r-bad", report_end=False) as client:
        with pytest.raises(Refused) as refused:
            client.log_lines([{"text": "x", "level": "loud"}])
    assert refused.value.errors[0]["field"] == "lines[0].level"
    assert not RunLogLine.objects.exists()


@pytest.fixture
def server_token(live_server, project, token):
    return live_server.url, token


def test_the_handler_ships_records_in_batches_and_flushes_on_close(server_token):
    url, token = server_token
    client = Client(url, token, "hill", "r-handler", report_end=False)
    handler = LogHandler(client, batch_size=3, flush_interval=60)
    logger = logging.getLogger("harness.worker-3")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    # httpx logs every request at INFO: with the root logger catching it, a handler that shipped its own
    # sending's records would never stop.
    logging.getLogger("httpx").addHandler(handler)
    try:
        logger.info("one")
        logger.warning("two")
        logger.debug("three")  # the third: a full batch goes without waiting for the interval
        deadline = time.monotonic() + 10
        while handler.sent_lines < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert handler.sent_lines == 3
        try:
            raise ValueError("checkpoint failed")
        except ValueError:
            logger.exception("saving step 7")
    finally:
        logger.removeHandler(handler)
        logging.getLogger("httpx").removeHandler(handler)
        client.close()  # flushes its handlers first
    rows = lines_of("r-handler")
    assert [(seq, level, stream) for seq, level, stream, _ in rows[:4]] == [
        (1, LogLevel.INFO, "harness.worker-3"),
        (2, LogLevel.WARNING, "harness.worker-3"),
        (3, LogLevel.DEBUG, "harness.worker-3"),
        (4, LogLevel.ERROR, "harness.worker-3"),
    ]
    texts = [text for *_, text in rows]
    assert texts[:4] == ["one", "two", "three", "saving step 7"]
    assert texts[4] == "Traceback (most recent call last):" and texts[-1] == "ValueError: checkpoint failed"
    assert not any("HTTP Request" in text for text in texts)
    assert (handler.failed_lines, handler.dropped_lines) == (0, 0)
    # Every line of the traceback is a row at the record's level: each counts as a warning or worse.
    assert Run.objects.get(external_id="r-handler").log_warnings == 1 + len(rows[3:]) == 6


def test_the_handler_never_raises_and_counts_what_it_could_not_send(project, token):
    client = Client(
        f"http://127.0.0.1:{closed_port()}", token, "hill", "r-down", max_retries=1, backoff_base=0.01,
        report_end=False,
    )  # fmt: skip
    handler = LogHandler(client, batch_size=2, flush_interval=60, max_buffer=3)
    logger = logging.getLogger("harness.down")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for i in range(5):
            logger.error("line %d", i)  # never raises, whatever the server
        handler.flush()
    finally:
        logger.removeHandler(handler)
        handler.close()
        client.close(timeout=0)
    assert handler.failed_lines == 3 and handler.dropped_lines == 2 and handler.sent_lines == 0
    assert "ConnectError" in handler.last_error or "Unreachable" in handler.last_error


def test_cli_log_one_line_and_a_refusal(env):  # noqa: F811
    done = smrweb(env, "log", "shell-log", "checkpoint upload failed: HTTP 503", "--level", "warning")
    assert done.returncode == 0, done.stderr
    assert "1 lines stored" in done.stdout
    assert lines_of("shell-log") == [(1, LogLevel.WARNING, "", "checkpoint upload failed: HTTP 503")]
    again = smrweb(env, "log", "shell-log", "x", "--batch-id", "fixed")
    repeat = smrweb(env, "log", "shell-log", "y", "--batch-id", "fixed")
    assert again.returncode == repeat.returncode == 0 and "already stored" in repeat.stdout
    assert [text for *_, text in lines_of("shell-log")] == ["checkpoint upload failed: HTTP 503", "x"]
    usage = smrweb(env, "log", "shell-log", "x", "--level", "loud")
    assert usage.returncode == 2 and "not a level" in usage.stderr


def test_cli_log_reads_stdin_in_batches_and_tees(env):  # noqa: F811
    text = "".join(f"step {i}\n" for i in range(1, 8)) + "last line without a newline"
    done = subprocess.run(
        [str(smrweb.__globals__["SMRWEB"]), "log", "pipe-run", "-", "--batch-size", "3", "--tee",
         "--stream", "train"],
        input=text, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == text  # --tee: the pipe's output is not lost
    assert "8 lines stored" in done.stderr
    rows = lines_of("pipe-run")
    assert [text for *_, text in rows] == [*(f"step {i}" for i in range(1, 8)), "last line without a newline"]
    assert {stream for _, _, stream, _ in rows} == {"train"}
    assert RunLogBatch.objects.filter(run__external_id="pipe-run").count() == 3


def test_cli_log_stdin_sends_a_partial_batch_after_the_interval(env):  # noqa: F811
    proc = subprocess.Popen(
        [str(smrweb.__globals__["SMRWEB"]), "log", "slow-pipe", "-", "--flush-interval", "0.3"],
        stdin=subprocess.PIPE, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        proc.stdin.write("early line\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 15
        while not lines_of("slow-pipe") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [text for *_, text in lines_of("slow-pipe")] == ["early line"]  # before the pipe closed
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert proc.returncode == 0


def test_cli_log_unreachable_exits_3(env):  # noqa: F811
    env = {**env, "SMRWEB_URL": f"http://127.0.0.1:{closed_port()}", "SMRWEB_RETRIES": "0"}
    down = smrweb(env, "log", "r", "x")
    assert down.returncode == 3 and "unreachable" in down.stderr


def test_the_handler_example_of_the_docs_runs(server_token, tmp_path):
    from tests.client.test_client import _run_doc_python

    done = _run_doc_python("log-handler", server_token, tmp_path, "doc-logs")
    assert done.stdout.split() == ["1", "0"]
    assert lines_of("doc-logs") == [
        (1, LogLevel.WARNING, "trainer", "trainer: step 7: loss went NaN, lowering lr")
    ]
