"""`smrweb` console script: report scores, metrics, agent turns, state changes and artifacts from a shell,
add lines to a run's log, and re-score a submission's signed bundle (`smrweb rescore`, smrweb/rescore.py).

    smrweb log run-42 "checkpoint upload failed" --level warning
    python train.py 2>&1 | smrweb log run-42 - --tee
    smrweb report score 0.83 --artifact submission.py
    smrweb report metric loss 0.12 --step 3
    smrweb report state failed --reason "validator timed out"
    smrweb rescore smrweb-bundle-hill-42.tar.gz --server https://smrweb.example.org
    trap report_end EXIT    # a shell harness reports its end however it exits (`smrweb report state -h`)

Connection settings come from options or the environment: SMRWEB_URL, SMRWEB_TOKEN, SMRWEB_PROJECT,
SMRWEB_RUN. Exit codes: 0 stored (or already stored), 1 refused (the server's field errors are
printed), 2 usage error, 3 server unreachable after the retries.

Event ids (so that re-running a command is safe; docs/integrations.md#cli-smrweb-report):

- metric, score, turn: ``cli-`` + the first 32 hex digits of the SHA-256 of the canonical JSON of
  [kind, project, run, the event's fields] — for a score with ``--artifact`` the fields hold the file's
  sha256 (and its name in the run). Re-running the same command is a duplicate, whenever and however
  often: the same value of a metric at the same step is one point, the same score for the same bytes
  (commit, harness, experiment, details) is one submission, an actor's turn number counts once.
  To report an identical result again as a separate submission, give it its own ``--id``.
- state: a state change is a compare-and-set. The command first reads the run: when the run is already
  in that state with that failure, it is a no-op ("already"). Otherwise the id also hashes the state
  and ``last_progress_at`` the run had when the command read it, so a run that returns to a state it
  had before (executing → reviewing → executing) records every transition, while a retry of a change
  that did land finds the run already in that state.
- ``--id`` replaces the derived id (any text of 1–200 characters); then nothing is read first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import textwrap
from typing import Any

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3

STATES = (
    "queued",
    "planning",
    "running",
    "executing",
    "reviewing",
    "blocked",
    "paused",
    "finalizing",
    "done",
    "failed",
    "stopped",
    "canceled",
    "abandoned",
)

# How a shell harness reports its end whatever happens (docs/integrations.md#cli-smrweb-report).
END_TRAP_EXAMPLE = """\
report_end() {                        # runs when the script exits, however it exits
  status=$?
  trap - EXIT TERM
  if [ "$status" -eq 0 ]; then
    smrweb report state done --retries 1 --timeout 5
  elif [ "$status" -eq 143 ]; then
    smrweb report state failed --family signal --reason SIGTERM --retries 1 --timeout 5
  else
    smrweb report state failed --family exit --reason "exit status $status" --retries 1 --timeout 5
  fi
  exit "$status"
}
trap report_end EXIT
trap 'kill -TERM "$child" 2>/dev/null; exit 143' TERM
smrweb report state running
python train.py & child=$!            # in the background: a TERM is handled at once, not after it
wait "$child"
"""


class _Usage(Exception):
    pass


def derived_id(kind: str, project: str, run: str, fields: dict[str, Any]) -> str:
    """The CLI's deterministic event id: `cli-` + 32 hex digits of SHA-256 over the canonical JSON."""
    canonical = json.dumps(
        [kind, project, run, fields], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return "cli-" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if not 1 <= value <= LOG_BATCH_MAX:
        raise argparse.ArgumentTypeError(f"must be 1 to {LOG_BATCH_MAX}, not {value}")
    return value


LOG_LEVELS = ("debug", "info", "warning", "warn", "error", "critical", "fatal")
LOG_BATCH_MAX = 5000


def _level(text: str) -> str:
    """A log level as the server takes it (checked here, so a pipe is not refused batch after batch)."""
    name = text.strip().lower()
    if name in LOG_LEVELS or (name.isdigit() and 1 <= int(name) <= 50):
        return name
    raise argparse.ArgumentTypeError(f"not a level: {text!r} (one of {', '.join(LOG_LEVELS)} or 1-50)")


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smrweb",
        description="smrweb command line: report results of a shell-based harness to an smrweb server, and "
        "re-score a submission's signed bundle.",
        epilog="Run `smrweb report --help` for the report commands, `smrweb rescore --help` for re-scoring.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    conn = argparse.ArgumentParser(add_help=False)
    g = _connection(conn)
    g.add_argument("--run", "-r", default=os.environ.get("SMRWEB_RUN"), help="run id [SMRWEB_RUN]")
    e = conn.add_argument_group("event")
    e.add_argument("--id", dest="event_id", help="event id (idempotency key) instead of the derived one")
    e.add_argument("--ts", help="event time, ISO 8601 (default: when the server receives it)")
    _log_parser(sub)
    _build_report(sub, conn)
    from smrweb import rescore

    rescore.add_parser(sub)
    return parser


def _log_parser(sub) -> None:
    conn = argparse.ArgumentParser(add_help=False)
    _connection(conn)
    p = sub.add_parser(
        "log",
        parents=[conn],
        help="add lines to a run's log (one line, or every line of stdin)",
        description="Add lines to a run's log (the run is created if the project has not heard of it). "
        "With TEXT `-`, every line of stdin is sent, in batches of --batch-size lines or every "
        "--flush-interval seconds, whichever comes first; a batch that cannot be sent is counted and "
        "reported at the end, the reading goes on. Exit codes: 0 sent, 1 refused, 2 usage, 3 unreachable.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  smrweb log run-42 'checkpoint upload failed: HTTP 503' --level warning\n"
        "  python train.py 2>&1 | smrweb log run-42 - --tee --stream train",
    )
    p.add_argument("log_run", metavar="RUN", help="the run id")
    p.add_argument("text", metavar="TEXT", help="the line (newlines split it), or - to read stdin")
    p.add_argument(
        "--level", "-l", type=_level, default="info", help="debug, info, warning, error, critical or 1-50"
    )
    p.add_argument("--stream", default="", help="the lines' stream, e.g. stderr or worker-3")
    p.add_argument("--batch-id", help="the batch's id (retrying with it is a no-op); default: a new one")
    p.add_argument("--batch-size", type=_positive_int, default=500, help="stdin: lines a batch (max 5000)")
    p.add_argument(
        "--flush-interval", type=_finite_float, default=2.0, help="stdin: seconds before a partial batch goes"
    )
    p.add_argument("--tee", action="store_true", help="stdin: also copy every line to stdout")


def _connection(parser: argparse.ArgumentParser):
    g = parser.add_argument_group("connection (default: environment variables)")
    g.add_argument("--url", default=os.environ.get("SMRWEB_URL"), help="server URL [SMRWEB_URL]")
    g.add_argument("--token", default=os.environ.get("SMRWEB_TOKEN"), help="project API token [SMRWEB_TOKEN]")
    g.add_argument(
        "--project", "-p", default=os.environ.get("SMRWEB_PROJECT"), help="project slug [SMRWEB_PROJECT]"
    )
    g.add_argument(
        "--retries",
        type=_non_negative_int,
        default=int(os.environ.get("SMRWEB_RETRIES", "4")),
        help="retries on 429/5xx/timeouts/connection errors, with backoff [SMRWEB_RETRIES, 4]",
    )
    g.add_argument("--timeout", type=_finite_float, default=10.0, help="seconds per request (default 10)")
    return g


def _build_report(sub, conn) -> None:
    report = sub.add_parser(
        "report",
        help="report a score, metric, agent turn, state change or artifact",
        description="Report one event to a run (the run is created on its first event). Re-running the same "
        "command is a no-op: event ids are derived from the input (see --id). Exit codes: 0 stored "
        "or already stored, 1 refused (field errors printed), 2 usage, 3 server unreachable.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  smrweb report score 0.83 --artifact submission.py --commit $(git rev-parse HEAD)\n"
        "  smrweb report metric loss 0.12 --step 3\n"
        "  smrweb report turn 7 --tokens-in 1200 --tokens-out 300 --cost-usd 0.004 --model gpt-x\n"
        "  smrweb report state failed --reason 'validator timed out' --family timeout\n"
        "  smrweb report artifact logs/run.log --kind log",
    )
    what = report.add_subparsers(dest="kind", metavar="KIND", required=True)

    p = what.add_parser(
        "score",
        parents=[conn],
        help="a scored submission, optionally with its artifact",
        description="Report a score. With --artifact the file is uploaded first and the score "
        "is linked to it by sha256.",
    )
    p.add_argument("score", type=_finite_float)
    p.add_argument("--artifact", metavar="PATH", help="a local file to upload and link to the score")
    p.add_argument("--artifact-name", metavar="NAME", help="its path in the run (default: the file name)")
    p.add_argument(
        "--artifact-ref", metavar="REF", help="link an artifact already uploaded (sha256 or path in the run)"
    )
    p.add_argument(
        "--kind",
        dest="artifact_kind",
        default="file",
        choices=["file", "python_source", "onnx_model", "archive", "log", "other"],
        help="artifact kind",
    )
    p.add_argument("--commit", default="", help="git commit of the submission")
    p.add_argument("--harness-id", default="", help="the harness's own id for this submission")
    p.add_argument("--experiment", help="external id of the experiment (created on first sight)")
    p.add_argument("--metric", help="what the score measures (kept in details.metric)")
    p.add_argument("--details", type=_json_object, help="JSON object of extra details")

    p = what.add_parser("metric", parents=[conn], help="one point of a metric series")
    p.add_argument("key")
    p.add_argument("value", type=_finite_float)
    p.add_argument("--step", type=_non_negative_int, default=0, help="step (default 0)")

    p = what.add_parser("turn", parents=[conn], help="one agent turn (tokens, cost, model)")
    p.add_argument("turn", type=_non_negative_int)
    p.add_argument("--tokens-in", type=_non_negative_int, required=True)
    p.add_argument("--tokens-out", type=_non_negative_int, required=True)
    p.add_argument("--tokens-cached-in", type=_non_negative_int, help="of --tokens-in, read from the cache")
    p.add_argument(
        "--tokens-cache-write", type=_non_negative_int, help="of --tokens-in, written to the cache"
    )
    p.add_argument("--tokens-reasoning", type=_non_negative_int, help="of --tokens-out, reasoning")
    p.add_argument("--cost-usd", type=_finite_float, help="default: priced by the server's price table")
    p.add_argument("--model")
    p.add_argument("--actor", default="driver", help="default: driver")
    p.add_argument("--parent-actor")
    p.add_argument(
        "--turn-kind",
        choices=["driver_inference", "child_work"],
        help="default: driver_inference without --parent-actor, child_work with it",
    )
    p.add_argument("--tool-call", action="append", dest="tool_calls", metavar="NAME", help="repeatable")
    p.add_argument("--duration-ms", type=_non_negative_int)

    p = what.add_parser(
        "state",
        parents=[conn],
        help="a state change of the run",
        description=textwrap.fill(
            f"Set the run's state: {', '.join(STATES)}. A no-op when the run is already "
            "in that state with that failure. A run that never reports its end stays live (then stalled) "
            "until a reviewer closes it as abandoned: report it from an EXIT trap, so a crash, an error exit "
            "and a SIGTERM are each recorded (done, failed with the exit status, failed with SIGTERM; the "
            "script still exits with its own status, 143 after a SIGTERM). --retries and --timeout bound "
            "how long the report may hold the exit when the server is down.",
            78,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="report the run's end from a shell harness (bash):\n\n" + END_TRAP_EXAMPLE,
    )
    p.add_argument("state", help="the new state")
    p.add_argument("--reason", default="", help="failure detail (for failed, stopped, …)")
    p.add_argument("--family", default="", help="failure family, e.g. timeout, budget, crash")
    p.add_argument("--source", default="", help="who detected the failure")

    p = what.add_parser("artifact", parents=[conn], help="upload a file to the run (prints its sha256)")
    p.add_argument("path")
    p.add_argument("--name", help="its path in the run (default: the file name)")
    p.add_argument(
        "--kind",
        dest="artifact_kind",
        default="file",
        choices=["file", "python_source", "onnx_model", "archive", "log", "other"],
    )
    p.add_argument("--commit", default="")


def _event(args) -> dict[str, Any]:
    """The event the command reports, without its id."""
    if args.kind == "metric":
        event: dict[str, Any] = {"type": "metric", "key": args.key, "value": args.value, "step": args.step}
    elif args.kind == "score":
        event = {"type": "score", "score": args.score}
        for name in ("commit", "harness_id", "experiment"):
            if getattr(args, name):
                event[name] = getattr(args, name)
        details = dict(args.details or {})
        if args.metric:
            details["metric"] = args.metric
        if details:
            event["details"] = details
        if args.artifact_ref:
            event["artifact"] = args.artifact_ref
    elif args.kind == "turn":
        event = {
            "type": "agent.turn",
            "turn": args.turn,
            "actor": args.actor,
            "tokens_in": args.tokens_in,
            "tokens_out": args.tokens_out,
        }
        for name, value in (
            ("tokens_cached_in", args.tokens_cached_in),
            ("tokens_cache_write", args.tokens_cache_write),
            ("tokens_reasoning", args.tokens_reasoning),
            ("cost_usd", args.cost_usd),
            ("model", args.model),
            ("parent_actor", args.parent_actor),
            ("kind", args.turn_kind),
            ("tool_calls", args.tool_calls),
            ("duration_ms", args.duration_ms),
        ):
            if value is not None:
                event[name] = value
    else:  # state
        event = {"type": "state", "state": args.state}
        failure = {
            k: v for k, v in (("family", args.family), ("detail", args.reason), ("source", args.source)) if v
        }
        if failure:
            event["failure"] = failure
    if args.ts:
        event["ts"] = args.ts
    return event


def _same_failure(run: dict[str, Any], event: dict[str, Any]) -> bool:
    have = run.get("failure") or {}
    want = event.get("failure") or {}
    return all(have.get(k, "") == want.get(k, "") for k in ("family", "detail", "source"))


def _require(args, *names: str) -> None:
    missing = [f"--{n} (SMRWEB_{n.upper()})" for n in names if not getattr(args, n)]
    if missing:
        raise _Usage("missing " + ", ".join(missing))


def _client(args, run: str | None, **options):
    """The client the commands share: the connection flags, retries and timeout as given."""
    from smrweb.client import Client

    return Client(
        args.url,
        args.token,
        args.project,
        run,
        max_retries=args.retries,
        timeout=args.timeout,
        backoff_max=10.0,
        **options,
    )


def report(args) -> int:
    from smrweb.client import sha256_of

    _require(args, "url", "token", "project", "run")
    if getattr(args, "artifact", None) and getattr(args, "artifact_ref", None):
        raise _Usage("give --artifact or --artifact-ref, not both")
    path = args.path if args.kind == "artifact" else getattr(args, "artifact", None)
    if path is not None and not os.path.isfile(path):
        raise _Usage(f"no such file: {path}")

    client = _client(args, args.run)
    try:
        if args.kind == "artifact":
            digest = client.upload_artifact(path, args.name, kind=args.artifact_kind, commit=args.commit)
            print(f"artifact {args.name or os.path.basename(path)} stored: sha256 {digest}")
            return EXIT_OK
        event = _event(args)
        digest = None
        if path is not None:
            digest = sha256_of(path)
            event["artifact"] = digest
        event_id = args.event_id
        if event_id is None:
            fields = dict(event)
            if path is not None:
                fields["artifact_name"] = args.artifact_name or os.path.basename(path)
            if args.kind == "state":
                run = client.get_run()
                if run is not None and run.get("state") == event["state"] and _same_failure(run, event):
                    print(f"state {event['state']}: already (run {args.run}); nothing sent")
                    return EXIT_OK
                fields["_prior"] = [run.get("state"), run.get("last_progress_at")] if run else None
            event_id = derived_id(event["type"], args.project, args.run, fields)
        event["id"] = event_id
        if digest is not None:
            # The bytes first: a refused upload leaves no score behind. The server links the score to
            # the artifact by its sha256.
            client.upload_artifact(
                path,
                args.artifact_name,
                kind=args.artifact_kind,
                commit=event.get("commit", ""),
                sha256=digest,
            )
        answer = client.send([event])
    finally:
        client.close(timeout=0)
    what = f"metric {args.key}" if args.kind == "metric" else args.kind
    status = "stored" if answer.get("accepted") else "already stored (duplicate)"
    print(
        f"{what} {status}: run {args.run}, id {event_id}" + (f", artifact sha256 {digest}" if digest else "")
    )
    return EXIT_OK


def send_log(args) -> int:
    """`smrweb log RUN TEXT` (one batch) or `smrweb log RUN -` (stdin, batch after batch)."""
    import queue
    import threading
    import time
    import uuid

    from smrweb.client import Refused, Unreachable

    _require(args, "url", "token", "project")
    client = _client(args, args.log_run, report_end=False)
    try:
        if args.text != "-":
            answer = client.log_lines(
                [{"text": args.text, "level": args.level}], batch_id=args.batch_id, stream=args.stream
            )
            print(_log_summary(args.log_run, answer["kept"], answer["dropped"], repeat=answer["repeat"]))
            return EXIT_OK

        lines: queue.Queue[str | None] = queue.Queue(maxsize=args.batch_size * 4)

        def read() -> None:  # a thread, so a quiet pipe still sends what it has every --flush-interval
            stdin = open(sys.stdin.fileno(), encoding="utf-8", errors="replace", newline="", closefd=False)
            for line in stdin:
                if args.tee:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                lines.put(line.rstrip("\r\n"))
            lines.put(None)

        threading.Thread(target=read, name="smrweb-log-stdin", daemon=True).start()
        base = args.batch_id or f"cli-{uuid.uuid4().hex}"
        kept = dropped = failed = batches = 0
        code, eof = EXIT_OK, False
        while not eof:
            batch: list[dict[str, Any]] = []
            deadline = None
            while len(batch) < args.batch_size:
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    line = lines.get(timeout=timeout)
                except queue.Empty:
                    break
                if line is None:
                    eof = True
                    break
                batch.append({"text": line, "level": args.level})
                deadline = deadline or time.monotonic() + args.flush_interval
            if not batch:
                continue
            batches += 1
            try:
                answer = client.log_lines(batch, batch_id=f"{base}-{batches}", stream=args.stream)
            except (Refused, Unreachable) as exc:  # counted; the pipe is read on, not blocked
                failed += len(batch)
                code = EXIT_REFUSED if isinstance(exc, Refused) else EXIT_UNREACHABLE
                print(f"smrweb: {len(batch)} log lines not stored: {exc}", file=sys.stderr)
                continue
            kept, dropped = kept + answer["kept"], dropped + answer["dropped"]
        summary = _log_summary(args.log_run, kept, dropped, repeat=False)
        print(summary + (f"; {failed} lines NOT stored" if failed else ""), file=sys.stderr)
        return code
    finally:
        client.close(timeout=0)


def _log_summary(run: str, kept: int, dropped: int, *, repeat: bool) -> str:
    if repeat:
        return f"log: batch already stored (run {run}); nothing sent again"
    return f"log: {kept} lines stored (run {run})" + (f", {dropped} over the run's cap" if dropped else "")


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on a usage error, 0 on --help
    if args.command == "rescore":
        raise SystemExit(_rescore(parser, args))
    from smrweb.client import Refused, SmrwebError, Unreachable

    try:
        code = send_log(args) if args.command == "log" else report(args)
    except _Usage as exc:
        parser.print_usage(sys.stderr)
        print(f"smrweb: error: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except Refused as exc:
        print(f"smrweb: refused: {exc}", file=sys.stderr)
        code = EXIT_REFUSED
    except Unreachable as exc:
        print(f"smrweb: server unreachable: {exc}", file=sys.stderr)
        code = EXIT_UNREACHABLE
    except SmrwebError as exc:
        print(f"smrweb: {exc}", file=sys.stderr)
        code = EXIT_REFUSED
    raise SystemExit(code)


def _rescore(parser: argparse.ArgumentParser, args) -> int:
    """`smrweb rescore`; its own exit codes (smrweb/rescore.py): 0 holds, 1 does not hold, 2 usage,
    3 key server unreachable, 4 bundle refused, 5 cannot re-score here."""
    from smrweb import rescore

    try:
        return rescore.rescore(args)
    except rescore.Usage as exc:
        parser.print_usage(sys.stderr)
        print(f"smrweb: error: {exc}", file=sys.stderr)
        return rescore.EXIT_USAGE
    except rescore.Unreachable as exc:
        print(f"smrweb: key server unreachable: {exc}", file=sys.stderr)
        return rescore.EXIT_UNREACHABLE


if __name__ == "__main__":
    main()
