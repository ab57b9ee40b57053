"""smrweb's Python client: push metrics, scores, agent turns, state changes and artifacts from a harness.

Three lines::

    import smrweb.client as smr
    smr.init(project="hill", run="run-42")  # SMRWEB_URL and SMRWEB_TOKEN from the environment
    smr.log_metric("loss", 0.12, step=3)

How it behaves (docs/integrations.md#python-client has the full story):

- **Ids.** Every event gets its id when it is logged: ``<client id>-<n>``, where the client id is a
  random uuid4 (hex) drawn once per `Client` and ``n`` counts the events that client logged (1, 2, …).
  The id travels with the event on every retry, so a batch re-sent after a lost answer is counted by
  the server as a duplicate, never twice. Pass ``id=`` to any ``log_*`` call to choose it yourself (for
  instance to make a restarted harness replay safely).
- **Batching.** Events are queued and sent by a daemon thread in batches of at most ``batch_size``
  events, whenever that many are waiting or ``flush_interval`` seconds have passed since the oldest
  waiting one was logged, whichever comes first.
- **Retries.** 429 (its ``Retry-After`` honoured), 5xx, timeouts and connection errors are retried with
  exponential backoff and jitter, up to ``max_retries`` times, with the same ids. Any other 4xx is
  permanent: the server names the refused events (by index), those are logged and counted in
  ``failed_events`` and the rest of the batch is sent again without them — never a loop. A batch
  that still fails after ``max_retries`` retries is counted in ``failed_events`` too.
- **Exit.** ``flush()`` waits until everything queued is sent; an ``atexit`` hook flushes (at most
  ``exit_timeout`` seconds) when the interpreter exits, and ``close()`` / ``with Client(...)`` do too.
  When the server cannot be reached, retries stop at that deadline: exiting never hangs.
- **The run's end.** ``with Client(...)`` and ``init()`` report how the run ended, once, after every
  event logged before it: ``done`` on a normal exit; ``failed`` on an uncaught exception (failure
  ``{"family": "exception", "detail": "<type>: <message>" + the innermost frames}``) or on SIGTERM
  (``{"family": "signal", "detail": "SIGTERM"}``; the process then exits with status 143, after any
  SIGTERM handler the harness installed earlier has run); ``stopped`` on Ctrl-C. Nothing is added when
  the harness already set a final state itself (``set_state("done")``, ``"failed"``, …), when the client
  has no default run, or with ``report_end=False``. ``init()`` does it through ``sys.excepthook``,
  ``atexit`` and a SIGTERM handler (each chained to the one before it); the ``with`` block through its
  exit (and a SIGTERM handler while it is open). If the server is down then, the report is lost after
  ``exit_timeout`` seconds (logged; counted in ``failed_events``), the process still exits, and the
  run shows as stalled until a reviewer closes it as abandoned.

Only httpx and the standard library: the client runs inside harness processes, not Django.
"""

from __future__ import annotations

import atexit
import contextlib
import email.utils
import hashlib
import json
import logging
import math
import os
import random
import signal
import sys
import threading
import time
import traceback
import uuid
import weakref
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

__all__ = [
    "Client",
    "LogHandler",
    "Refused",
    "SmrwebError",
    "Unreachable",
    "close",
    "flush",
    "get_client",
    "init",
    "log_checkpoint",
    "log_message",
    "log_metric",
    "log_score",
    "log_turn",
    "set_state",
    "upload_artifact",
]

log = logging.getLogger("smrweb.client")

MAX_BATCH = 5000  # the server's limit per request
# The states that end a run (the server's TERMINAL_STATES): a harness that set one has said how it ended.
FINAL_STATES = frozenset({"done", "failed", "stopped", "canceled", "abandoned"})
END_SOURCE = "smrweb.client"  # the failure's `source` when the client reports the end itself
MAX_DETAIL = 20000  # the ingest contract's limit on a failure's detail


class SmrwebError(Exception):
    """A synchronous call (an artifact upload, or the CLI) did not succeed."""


class Refused(SmrwebError):
    """The server refused the request (a 4xx other than 429): retrying would not help."""

    def __init__(self, status: int, body: dict[str, Any]):
        self.status = status
        self.code = body.get("code", "")
        self.message = body.get("message", "")
        self.errors: list[dict[str, Any]] = list(body.get("errors") or [])
        lines = [f"{status} {self.code}: {self.message}".rstrip(": ")]
        lines += [_describe_error(e) for e in self.errors]
        super().__init__("\n".join(lines))


class Unreachable(SmrwebError):
    """No usable answer after every retry: connection errors, timeouts, 429 or 5xx."""


def _describe_error(err: dict[str, Any]) -> str:
    where = []
    if err.get("index") is not None:
        where.append(f"event {err['index']}")
    if err.get("field"):
        where.append(str(err["field"]))
    return f"  {' '.join(where) or 'request'}: {err.get('message', '')}"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _ts(value: datetime | str | float | None) -> str | None:
    """An event timestamp as ISO 8601: datetimes (naive means UTC), POSIX seconds, or text as given."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, UTC).isoformat()
    return str(value)


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, not {value!r}")
    return value


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1024 * 1024), b""):
            digest.update(chunk)
    return digest.hexdigest()


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header (seconds or an HTTP date) in seconds; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass
class _Item:
    run: str
    data: bytes  # the event as JSON, encoded when it was logged (so bad input fails at the call)
    id: str
    logged: float = field(default_factory=time.monotonic)


class Client:
    """A connection to one smrweb project (and by default one run).

    Arguments not given come from the environment: ``SMRWEB_URL`` (the server, e.g.
    ``https://smrweb.example``; a trailing ``/api/v1`` is accepted), ``SMRWEB_TOKEN`` (a project
    token ``smr_…``), ``SMRWEB_PROJECT`` (the project's slug) and ``SMRWEB_RUN`` (the run id).
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        project: str | None = None,
        run: str | None = None,
        *,
        batch_size: int = 1000,
        flush_interval: float = 1.0,
        max_retries: int = 8,
        timeout: float = 10.0,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        exit_timeout: float = 10.0,
        report_end: bool = True,
        transport: httpx.BaseTransport | None = None,
    ):
        base_url = base_url or os.environ.get("SMRWEB_URL")
        token = token or os.environ.get("SMRWEB_TOKEN")
        self.project = project or os.environ.get("SMRWEB_PROJECT")
        self.run = run or os.environ.get("SMRWEB_RUN")
        missing = [
            name
            for name, value in (
                ("base_url (SMRWEB_URL)", base_url),
                ("token (SMRWEB_TOKEN)", token),
                ("project (SMRWEB_PROJECT)", self.project),
            )
            if not value
        ]
        if missing:
            raise ValueError("smrweb client: missing " + ", ".join(missing))
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
        base = base_url.rstrip("/").removesuffix("/api/v1")
        self.base_url = base
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.exit_timeout = exit_timeout
        self.report_end = report_end  # `with` and init() report the run's end (done / failed / stopped)
        self.client_id = uuid.uuid4().hex
        self._http = httpx.Client(
            base_url=f"{base}/api/v1/",
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {token}", "User-Agent": "smrweb-client/1"},
        )
        # Counters (read them, don't write them).
        self.requests = 0  # HTTP requests made for event batches, retries included
        self.batches_sent = 0  # batches the server answered 200
        self.accepted_events = 0  # new events stored
        self.duplicate_events = 0  # events the server already had (e.g. after a lost answer)
        self.failed_events = 0  # events refused (4xx) or given up on after max_retries
        self.last_error: str | None = None

        self._log_batches = 0  # log batches this client named (their ids: <client id>-log-<n>)
        self._log_handlers: weakref.WeakSet[LogHandler] = weakref.WeakSet()  # flushed first by close()
        self._seq = 0
        self._steps: dict[tuple[str, str], int] = {}
        self._queue: deque[_Item] = deque()
        self._in_flight = 0
        self._lock = threading.Lock()
        self._counters_lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the sender waits on it for work
        self._idle = threading.Condition(self._lock)  # flush() waits on it for an empty queue
        self._flush_requested = 0
        self._closed = False
        self._stop = threading.Event()  # set by close() once its flush gave up: retries stop waiting
        # The run's end (see the module docstring): armed by `with` or init(), reported at most once.
        self._end_armed = False
        self._end_reported = False
        self._end_pid = 0
        self._last_state: dict[str, str] = {}  # per run: the last state this client logged
        self._signal: str | None = None  # the signal that ended the process, once one did
        self._prev_sigterm: Any = None
        self._sigterm_installed = False
        self._prev_excepthook: Any = None
        self._thread = threading.Thread(
            target=self._sender, name=f"smrweb-client-{self.client_id[:8]}", daemon=True
        )
        # The sender starts with SIGTERM and SIGINT blocked (a thread inherits its creator's mask):
        # the kernel then delivers them to the main thread, which a signal landing on the sender
        # would leave asleep in time.sleep() or a blocking read until that returned on its own.
        with _signals_blocked(_SIGNALS_FOR_MAIN):
            self._thread.start()
        ref = weakref.ref(self)
        self._atexit = lambda: (c := ref()) is not None and c.close(timeout=c.exit_timeout)
        atexit.register(self._atexit)

    # --- logging ------------------------------------------------------------------------------

    def log_metric(
        self,
        key: str,
        value: float,
        step: int | None = None,
        ts=None,
        *,
        id: str | None = None,
        run: str | None = None,
    ) -> str:
        """One point of the series `key`. Without `step`, the key's previous step + 1 in this client
        (0 for its first point). Returns the event id."""
        _finite("value", value)
        run = self._run(run)
        with self._lock:
            if step is None:
                step = self._steps.get((run, key), -1) + 1
            self._steps[(run, key)] = max(step, self._steps.get((run, key), -1))
        return self._log(run, {"type": "metric", "key": key, "value": value, "step": step}, ts, id)

    def log_score(
        self,
        score: float,
        *,
        artifact: str | os.PathLike | None = None,
        artifact_name: str | None = None,
        artifact_ref: str | None = None,
        metric: str | None = None,
        commit: str = "",
        harness_id: str = "",
        experiment: str | None = None,
        details: dict[str, Any] | None = None,
        ts=None,
        id: str | None = None,
        run: str | None = None,
    ) -> str:
        """A scored submission. `artifact` is a local file: it is uploaded now (synchronously, as
        `artifact_name`, default its file name) and the score is linked to it by its sha256.
        `artifact_ref` names an artifact already uploaded (its sha256, or its path in the run: the
        latest version); the server links it when that artifact arrives, if it has not yet.
        `metric` names what the score measures (kept in `details["metric"]`). Returns the event id."""
        _finite("score", score)
        if artifact is not None and artifact_ref is not None:
            raise ValueError("pass either artifact (a local file) or artifact_ref, not both")
        run = self._run(run)
        details = dict(details or {})
        if metric is not None:
            details["metric"] = metric
        digest = sha256_of(artifact) if artifact is not None else None
        event: dict[str, Any] = {"type": "score", "score": score}
        if digest or artifact_ref:
            event["artifact"] = digest or artifact_ref
        for name, value in (
            ("commit", commit),
            ("harness_id", harness_id),
            ("experiment", experiment),
            ("details", details),
        ):
            if value:
                event[name] = value
        # Queued before the upload: if the upload fails, the score is still kept, and the server
        # links it to the artifact whenever those bytes are uploaded to the run.
        event_id = self._log(run, event, ts, id)
        if artifact is not None:
            self.upload_artifact(artifact, name=artifact_name, commit=commit, run=run, sha256=digest)
        return event_id

    def log_turn(
        self,
        turn: int,
        *,
        tokens_in: int,
        tokens_out: int,
        cost_usd: float | None = None,
        model: str | None = None,
        actor: str = "driver",
        tokens_cached_in: int | None = None,
        tokens_cache_write: int | None = None,
        tokens_reasoning: int | None = None,
        parent_actor: str | None = None,
        kind: str | None = None,
        tool_calls: list | None = None,
        duration_ms: int | None = None,
        prompt: str | list | None = None,
        response: str | list | None = None,
        ts=None,
        id: str | None = None,
        run: str | None = None,
    ) -> str:
        """One agent turn (an actor's turn number counts once, whatever its id). Returns the event id.
        `cost_usd` None: the server prices the turn from its price table by `model` (and the cached,
        cache-write and reasoning parts of the tokens, when given). `prompt` / `response`: text or chat
        messages, stored only when the project captures bodies."""
        event: dict[str, Any] = {
            "type": "agent.turn",
            "turn": turn,
            "actor": actor,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
        }
        if cost_usd is not None:
            event["cost_usd"] = _finite("cost_usd", cost_usd)
        for name, value in (
            ("tokens_cached_in", tokens_cached_in),
            ("tokens_cache_write", tokens_cache_write),
            ("tokens_reasoning", tokens_reasoning),
            ("model", model),
            ("parent_actor", parent_actor),
            ("kind", kind),
            ("tool_calls", tool_calls),
            ("duration_ms", duration_ms),
            ("prompt", prompt),
            ("response", response),
        ):
            if value is not None:
                event[name] = value
        return self._log(self._run(run), event, ts, id)

    def set_state(
        self,
        state: str,
        failure: str | dict[str, str] | None = None,
        *,
        ts=None,
        id: str | None = None,
        run: str | None = None,
    ) -> str:
        """The run's state (queued, planning, running, …, done, failed, stopped, canceled, abandoned).
        `failure` is a text (its detail) or a dict with `family`, `detail`, `source`. The event's time is
        the time of this call, so the latest call wins however the batches travel. A final state (done,
        failed, stopped, canceled, abandoned) is the run's end: `with` and init() add none of their own
        after it. Returns the event id."""
        event: dict[str, Any] = {"type": "state", "state": state}
        if failure is not None:
            event["failure"] = {"detail": failure} if isinstance(failure, str) else dict(failure)
        return self._log(self._run(run), event, ts if ts is not None else _now_iso(), id)

    def log_message(
        self,
        body: str,
        *,
        topic: str = "",
        target: str = "",
        mode: str = "",
        ts=None,
        id: str | None = None,
        run: str | None = None,
    ) -> str:
        event = {"type": "message", "body": body, "topic": topic, "target": target, "mode": mode}
        return self._log(self._run(run), event, ts, id)

    def log_checkpoint(
        self,
        checkpoint_id: str,
        *,
        label: str = "",
        commit: str = "",
        restorable: bool = True,
        failure_reason: str = "",
        ts=None,
        run: str | None = None,
    ) -> str:
        """A checkpoint; its id is its identity (a replay is a duplicate)."""
        event = {
            "type": "checkpoint",
            "label": label,
            "commit": commit,
            "restorable": restorable,
            "failure_reason": failure_reason,
        }
        return self._log(self._run(run), event, ts, checkpoint_id)

    def log_event(self, event: dict[str, Any], *, run: str | None = None) -> str:
        """Any event of the push contract (docs/api.md), as a dict with its `type`; an id is added
        when it has none. Returns the event id."""
        event = dict(event)
        return self._log(self._run(run), event, event.pop("ts", None), event.pop("id", None))

    # --- artifacts (synchronous) ---------------------------------------------------------------

    def upload_artifact(
        self,
        path: str | os.PathLike,
        name: str | None = None,
        *,
        kind: str = "file",
        commit: str = "",
        run: str | None = None,
        sha256: str | None = None,
    ) -> str:
        """Upload a file to the run now; return its sha256 once the server has stored exactly those
        bytes (it verifies the digest sent; the answer's digest is checked too). Retried like batches;
        raises `Refused` (4xx) or `Unreachable` (no answer after the retries)."""
        run = self._run(run)
        path = Path(path)
        digest = sha256 or sha256_of(path)
        data = {"path": name or path.name, "kind": kind, "sha256": digest}
        if commit:
            data["commit"] = commit

        def send() -> httpx.Response:
            with path.open("rb") as fh:
                return self._http.post(
                    self._run_url(run, "artifacts"),
                    data=data,
                    files={"file": (path.name, fh, "application/octet-stream")},
                )

        response = self._with_retries(send, what=f"upload of {path}")
        if response.status_code not in (200, 201):
            raise Refused(response.status_code, _json(response))
        stored = _json(response).get("sha256", "")
        if stored.lower() != digest.lower():
            raise SmrwebError(f"the server stored {stored!r} for {path}, whose sha256 is {digest}")
        return digest

    # --- synchronous calls ------------------------------------------------------------------------

    def send(self, events: list[dict[str, Any]], *, run: str | None = None) -> dict[str, Any]:
        """Post `events` now, bypassing the queue, with the same retries; return the server's answer
        (`{"run", "accepted", "duplicates"}`). Events keep the ids they carry (none: the server keys
        them by content). Raises `Refused` (4xx, with the server's field errors) or `Unreachable`."""
        body = json.dumps(events, allow_nan=False, separators=(",", ":")).encode()
        run = self._run(run)
        response = self._with_retries(
            lambda: self._http.post(
                self._run_url(run, "events"), content=body, headers={"Content-Type": "application/json"}
            ),
            what=f"batch of {len(events)} events",
        )
        if response.status_code != 200:
            raise Refused(response.status_code, _json(response))
        return _json(response)

    def log_lines(
        self,
        lines: list[str | dict[str, Any]],
        *,
        run: str | None = None,
        batch_id: str | None = None,
        stream: str = "",
    ) -> dict[str, Any]:
        """Post log lines to the run now (docs/integrations.md, "Run logs"), with the same retries as
        batches; return the server's answer (`kept`, `dropped`, `first_seq`, `last_seq`, `repeat`).

        A line is a string (info) or a dict with `text` and optional `level` ("warning" or a levelno),
        `ts` (a datetime, POSIX seconds or ISO 8601) and `stream`. The batch id (generated when not
        given) travels with every retry, so a batch re-sent after a lost answer is kept once. More than
        MAX_LOG_BATCH lines go in several requests, their ids `<batch_id>.<n>`; the answer then sums
        them. Raises `Refused` (4xx, with the server's field errors) or `Unreachable`."""
        run = self._run(run)
        body_lines = [_log_line(line) for line in lines]
        if batch_id is None:
            with self._counters_lock:
                self._log_batches += 1
                batch_id = f"{self.client_id}-log-{self._log_batches}"
        chunks = [body_lines[i : i + MAX_LOG_BATCH] for i in range(0, len(body_lines), MAX_LOG_BATCH)] or [[]]
        total: dict[str, Any] = {
            "batch_id": batch_id,
            "kept": 0,
            "dropped": 0,
            "first_seq": None,
            "last_seq": None,
            "repeat": True,
        }
        for n, chunk in enumerate(chunks, start=1):
            chunk_id = batch_id if len(chunks) == 1 else f"{batch_id}.{n}"
            body = {"batch_id": chunk_id, "lines": chunk}
            if stream:
                body["stream"] = stream
            data = json.dumps(body, separators=(",", ":")).encode()
            response = self._with_retries(
                lambda data=data: self._http.post(
                    self._run_url(run, "logs"), content=data, headers={"Content-Type": "application/json"}
                ),
                what=f"batch of {len(chunk)} log lines",
            )
            if response.status_code not in (200, 201):
                raise Refused(response.status_code, _json(response))
            answer = _json(response)
            total["kept"] += answer.get("kept", 0)
            total["dropped"] += answer.get("dropped", 0)
            total["first_seq"] = total["first_seq"] or answer.get("first_seq")
            total["last_seq"] = answer.get("last_seq") or total["last_seq"]
            total["repeat"] = total["repeat"] and bool(answer.get("repeat"))
        return total

    def get_run(self, run: str | None = None) -> dict[str, Any] | None:
        """The run as the API shows it (state, failure, spend, scores, …); None when it does not exist yet."""
        run = self._run(run)
        response = self._with_retries(lambda: self._http.get(self._run_url(run, "")[:-1]), what=f"run {run}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise Refused(response.status_code, _json(response))
        return _json(response)

    # --- flushing and closing --------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Send everything queued now and wait until it is answered (stored, duplicate or failed).
        False when `timeout` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flush_requested += 1
            self._wake.notify_all()
            try:
                while self._queue or self._in_flight:
                    if not self._thread.is_alive():
                        return False
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._idle.wait(remaining if remaining is not None else 1.0)
                return True
            finally:
                self._flush_requested -= 1

    def close(self, timeout: float | None = None) -> bool:
        """Flush (at most `timeout` seconds), stop the sender and close the connection. Returns what
        flush returned; events still queued after the timeout are counted in `failed_events`. A client
        armed by `with` or init() reports the run's end first (once; see the module docstring)."""
        if self._closed:
            return True
        for handler in list(self._log_handlers):  # their last lines before the connection goes
            handler.flush(timeout)
        self._report_end()
        self._unwatch_end()
        done = self.flush(timeout)
        self._stop.set()  # a retry waiting out its backoff gives up now rather than holding the exit
        with self._lock:
            self._closed = True
            left = len(self._queue)
            self._queue.clear()
            self._wake.notify_all()
        if left:
            self._count(failed_events=left)
            self.last_error = f"{left} events still queued at close"
            log.error("smrweb: %d events were not sent before close (timeout %ss)", left, timeout)
        self._thread.join(timeout=2)
        self._http.close()
        atexit.unregister(self._atexit)
        return done

    def __enter__(self):
        self._watch_end(excepthook=False)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._report_end(exc)
        self.close(timeout=self.exit_timeout)

    # --- the run's end ---------------------------------------------------------------------------

    def _watch_end(self, *, excepthook: bool) -> None:
        """Arm the end report (a client with a default run and `report_end`): SIGTERM is handled while
        armed (main thread only; a process that ignores SIGTERM keeps ignoring it), and with
        `excepthook` an uncaught exception is reported through sys.excepthook."""
        if not self.report_end or not self.run or self._closed:
            return
        self._end_armed = True
        self._end_pid = os.getpid()
        if not self._sigterm_installed and threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGTERM)
            if previous != signal.SIG_IGN:
                signal.signal(signal.SIGTERM, self._on_sigterm)
                self._prev_sigterm, self._sigterm_installed = previous, True
        if excepthook and self._prev_excepthook is None:
            self._prev_excepthook = sys.excepthook
            sys.excepthook = self._on_uncaught

    def _unwatch_end(self) -> None:
        """Put back the handlers this client replaced, unless someone replaced them since."""
        if self._sigterm_installed and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._prev_sigterm or signal.SIG_DFL)
            self._sigterm_installed = False
        if self._prev_excepthook is not None:
            if sys.excepthook == self._on_uncaught:
                sys.excepthook = self._prev_excepthook
            self._prev_excepthook = None

    def _on_sigterm(self, signum: int, frame) -> None:
        """Note the signal and end the process like the default action would, as SystemExit(128 + 15)
        so `with` blocks, finally clauses and atexit (the end report, the flush) still run. A handler
        the harness installed before is called instead; the harness then decides when to exit."""
        self._signal = self._signal or signal.Signals(signum).name
        previous = self._prev_sigterm
        if callable(previous):
            previous(signum, frame)
            return
        raise SystemExit(128 + signum)

    def _on_uncaught(self, exc_type, exc, tb) -> None:
        try:
            self._report_end(exc)  # queued; the atexit hook sends it (within exit_timeout)
        finally:
            (self._prev_excepthook or sys.__excepthook__)(exc_type, exc, tb)

    def _report_end(self, exc: BaseException | None = None) -> str | None:
        """Queue the run's end once: done, failed (an exception, a signal, a non-zero exit) or stopped
        (Ctrl-C). Nothing when not armed, already reported, in a forked child, or when the harness set
        a final state itself. Returns the event id."""
        if not self._end_armed or self._end_reported or self._closed or os.getpid() != self._end_pid:
            return None
        self._end_reported = True
        if self._last_state.get(self.run) in FINAL_STATES:
            return None
        state, failure = _ending(exc, self._signal)
        try:
            return self.set_state(state, failure)
        except Exception:  # never let the report turn an exit into a second error
            log.exception("smrweb: could not queue the run's end (%s)", state)
            return None

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue) + self._in_flight

    # --- internals ------------------------------------------------------------------------------

    def _run(self, run: str | None) -> str:
        run = run or self.run
        if not run:
            raise ValueError("smrweb client: no run (pass run= or set SMRWEB_RUN)")
        return run

    def _run_url(self, run: str, tail: str) -> str:
        return f"projects/{quote(self.project, safe='')}/runs/{quote(run, safe='')}/{tail}"

    def _log(self, run: str, event: dict[str, Any], ts, event_id: str | None) -> str:
        if self._closed:
            raise SmrwebError("this smrweb client is closed")
        stamp = _ts(ts)
        if stamp is not None:
            event["ts"] = stamp
        with self._lock:
            if event_id is None:
                self._seq += 1
                event_id = f"{self.client_id}-{self._seq}"
            event["id"] = event_id
            # Encoded now: NaN or an unserializable value fails here, in the caller, not in a batch.
            data = json.dumps(event, allow_nan=False, separators=(",", ":")).encode()
            if event.get("type") == "state":
                self._last_state[run] = str(event.get("state"))
            self._queue.append(_Item(run, data, event_id))
            if len(self._queue) == 1 or len(self._queue) >= self.batch_size:
                self._wake.notify_all()  # first event: the sender starts its interval; full: send now
        return event_id

    def _take_batch(self) -> list[_Item]:
        """Up to batch_size queued events of the first queued run, in order (lock held)."""
        run = self._queue[0].run
        batch, keep = [], deque()
        while self._queue and len(batch) < self.batch_size:
            item = self._queue.popleft()
            (batch if item.run == run else keep).append(item)
        self._queue.extendleft(reversed(keep))
        return batch

    def _sender(self) -> None:
        while True:
            with self._lock:
                while True:
                    if self._closed and not self._queue:
                        return
                    if self._queue:
                        due = self._queue[0].logged + self.flush_interval
                        if (
                            len(self._queue) >= self.batch_size
                            or self._flush_requested
                            or self._closed
                            or time.monotonic() >= due
                        ):
                            break
                        self._wake.wait(max(0.0, due - time.monotonic()))
                    else:
                        self._idle.notify_all()
                        self._wake.wait()
                batch = self._take_batch()
                self._in_flight = len(batch)
            try:
                self._send_batch(batch[0].run, batch)
            except Exception as exc:  # never let the sender die: count the batch and go on
                log.exception("smrweb: unexpected error sending %d events", len(batch))
                self._count(failed_events=len(batch))
                self.last_error = repr(exc)
            finally:
                with self._lock:
                    self._in_flight = 0
                    self._idle.notify_all()

    def _send_batch(self, run: str, batch: list[_Item]) -> None:
        """Send until every event is stored, a duplicate, or counted as failed. Each pass either ends
        or drops at least one event, so this terminates."""
        while batch:
            body = b"[" + b",".join(item.data for item in batch) + b"]"
            try:
                response = self._with_retries(
                    lambda body=body: self._http.post(
                        self._run_url(run, "events"),
                        content=body,
                        headers={"Content-Type": "application/json"},
                    ),
                    what=f"batch of {len(batch)} events",
                    count=True,
                )
            except Unreachable as exc:
                self._fail(batch, str(exc))
                return
            if response.status_code == 200:
                answer = _json(response)
                self._count(
                    batches_sent=1,
                    accepted_events=int(answer.get("accepted", 0)),
                    duplicate_events=int(answer.get("duplicates", 0)),
                )
                return
            if response.status_code == 413 and len(batch) > 1:
                half = len(batch) // 2
                self._send_batch(run, batch[:half])
                batch = batch[half:]
                continue
            refused = Refused(response.status_code, _json(response))
            bad = {
                e["index"]
                for e in refused.errors
                if isinstance(e.get("index"), int) and 0 <= e["index"] < len(batch)
            }
            if response.status_code != 400 or not bad:
                self._fail(batch, str(refused))
                return
            self._fail([batch[i] for i in sorted(bad)], str(refused))
            batch = [item for i, item in enumerate(batch) if i not in bad]

    def _count(self, **increments: int) -> None:
        with self._counters_lock:
            for name, n in increments.items():
                setattr(self, name, getattr(self, name) + n)

    def _fail(self, items: list[_Item], reason: str) -> None:
        self._count(failed_events=len(items))
        self.last_error = reason
        ids = ", ".join(item.id for item in items[:5]) + (" …" if len(items) > 5 else "")
        log.error("smrweb: %d events not stored (%s): %s", len(items), ids, reason)

    def _with_retries(self, send, *, what: str, count: bool = False) -> httpx.Response:
        """`send()` until it answers something other than 429/5xx, retrying those, timeouts and
        connection errors with exponential backoff and jitter; Unreachable after max_retries retries."""
        attempt = 0
        while True:
            wait: float | None = None
            if self._stop.is_set():
                raise Unreachable(f"{what}: the client closed before it could be sent")
            try:
                if count:
                    self._count(requests=1)
                response = send()
                if response.status_code != 429 and response.status_code < 500:
                    return response
                problem = f"HTTP {response.status_code}"
                if response.status_code in (429, 503):
                    wait = retry_after_seconds(response.headers.get("Retry-After"))
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if attempt >= self.max_retries:
                raise Unreachable(f"{what}: {problem} after {attempt + 1} attempts")
            backoff = min(self.backoff_max, self.backoff_base * 2**attempt)
            backoff = backoff / 2 + random.uniform(0, backoff / 2)  # equal jitter
            delay = min(self.backoff_max, wait) if wait is not None else backoff
            attempt += 1
            log.warning(
                "smrweb: %s: %s; retry %d/%d in %.2fs", what, problem, attempt, self.max_retries, delay
            )
            if self._stop.wait(delay):  # close() gave up on the flush: stop retrying
                raise Unreachable(f"{what}: {problem}; the client closed before a retry")


MAX_LOG_BATCH = 5000  # the server's limit of lines per request (after splitting texts on newlines)
_LEVEL_NAMES = {"debug", "info", "warning", "warn", "error", "critical", "fatal"}


def _log_line(line: str | dict[str, Any]) -> dict[str, Any]:
    """A line as the logs endpoint takes it; times become ISO 8601 here, the rest is checked there."""
    if isinstance(line, str):
        return {"text": line}
    if not isinstance(line, dict):
        raise TypeError(f"a log line is a str or a dict, not {type(line).__name__}")
    out = dict(line)
    if out.get("ts") is not None:
        out["ts"] = _ts(out["ts"])
    return out


class LogHandler(logging.Handler):
    """A `logging.Handler` that ships records to a run's log in batches (docs/integrations.md, "Run logs")::

        handler = smrweb.client.LogHandler(client)          # the client's run, or run="…"
        logging.getLogger().addHandler(handler)

    Records are buffered and sent by a daemon thread when `batch_size` are waiting or `flush_interval`
    seconds have passed, each batch under its own id (retried safely). It never raises into the code
    that logs: what cannot be sent is counted (`failed_lines`, `last_error`), and past `max_buffer`
    waiting lines (the server down for long) new ones are counted in `dropped_lines`, not kept.
    Records logged while the handler itself is sending (httpx's, the client's retry warnings) are not
    shipped, so it cannot feed itself. `flush()` sends now; `close()` (and `client.close()`, and the
    interpreter's exit) flush first. A record's level is its levelno, its time `record.created`, its
    stream the logger's name, its text the handler's formatter's output (traceback included)."""

    def __init__(
        self,
        client: Client | None = None,
        run: str | None = None,
        *,
        level: int = logging.NOTSET,
        batch_size: int = 500,
        flush_interval: float = 2.0,
        max_buffer: int = 100_000,
    ):
        super().__init__(level)
        self.client = client or get_client()
        self.run = self.client._run(run)
        if not 1 <= batch_size <= MAX_LOG_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_LOG_BATCH}")
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.max_buffer = max_buffer
        self.id = uuid.uuid4().hex
        # Counters (read them, don't write them).
        self.sent_lines = 0  # kept by the server
        self.capped_lines = 0  # the server counted them as over the run's cap
        self.failed_lines = 0  # refused, or given up on after the retries
        self.dropped_lines = 0  # over max_buffer while waiting: never sent
        self.last_error: str | None = None
        self._batches = 0
        self._buffer: list[dict[str, Any]] = []
        self._oldest = 0.0  # monotonic time the oldest buffered line was logged
        self._buffer_lock = threading.Lock()
        self._wake = threading.Event()
        self._send_lock = threading.Lock()  # one batch in flight at a time, in order
        self._sending = threading.local()
        self._closing = False
        self._thread = threading.Thread(target=self._sender, name=f"smrweb-log-{self.id[:8]}", daemon=True)
        with _signals_blocked(_SIGNALS_FOR_MAIN):
            self._thread.start()
        self.client._log_handlers.add(self)
        ref = weakref.ref(self)
        self._atexit = lambda: (h := ref()) is not None and h.close()
        atexit.register(self._atexit)  # registered after the client's: runs before it (LIFO)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if (
                getattr(self._sending, "active", False)
                or threading.current_thread() is self.client._thread
                or self._closing
            ):
                return  # the client's own sending (httpx, its retry warnings): never shipped
            line = {
                "text": self.format(record),
                "level": max(1, min(50, record.levelno)),
                "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
                "stream": record.name[:200],
            }
            with self._buffer_lock:
                if len(self._buffer) >= self.max_buffer:
                    self.dropped_lines += 1
                    return
                if not self._buffer:
                    self._oldest = time.monotonic()
                self._buffer.append(line)
                full = len(self._buffer) >= self.batch_size
            if full:
                self._wake.set()
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.failed_lines += 1

    def flush(self, timeout: float | None = None) -> bool:
        """Send every buffered line now and wait for the answers (at most `timeout` seconds: then the
        sending goes on in the background). False when the timeout passed first."""
        if timeout is None:
            while self._send_one(force=True):
                pass
            return True
        drain = threading.Thread(target=self.flush, name=f"smrweb-log-flush-{self.id[:8]}", daemon=True)
        drain.start()
        drain.join(timeout)
        return not drain.is_alive()

    def close(self) -> None:
        """Flush (at most the client's `exit_timeout` seconds) and stop."""
        if self._closing:
            return
        try:
            self.flush(timeout=self.client.exit_timeout)
        finally:
            self._closing = True
            self._wake.set()
            atexit.unregister(self._atexit)
            super().close()

    def _sender(self) -> None:
        while not self._closing:
            self._wake.wait(timeout=min(self.flush_interval, 0.5))
            self._wake.clear()
            if self._closing:
                return
            with self._buffer_lock:
                due = bool(self._buffer) and (
                    len(self._buffer) >= self.batch_size
                    or time.monotonic() - self._oldest >= self.flush_interval
                )
            if due:
                while self._send_one(force=False):
                    pass

    def _send_one(self, *, force: bool) -> bool:
        """Send one batch; whether another may be waiting."""
        with self._send_lock:
            with self._buffer_lock:
                if not self._buffer or (
                    not force
                    and len(self._buffer) < self.batch_size
                    and time.monotonic() - self._oldest < self.flush_interval
                ):
                    return False
                batch, self._buffer = self._buffer[: self.batch_size], self._buffer[self.batch_size :]
                self._oldest = time.monotonic()
                self._batches += 1
                batch_id = f"{self.client.client_id}-handler-{self.id[:12]}-{self._batches}"
            self._sending.active = True
            try:
                answer = self.client.log_lines(batch, run=self.run, batch_id=batch_id)
                self.sent_lines += answer.get("kept", 0)
                self.capped_lines += answer.get("dropped", 0)
            except Exception as exc:  # noqa: BLE001 - counted, never raised into the caller's code
                self.failed_lines += len(batch)
                self.last_error = f"{type(exc).__name__}: {exc}"
            finally:
                self._sending.active = False
            return True


def _clean(text: str, limit: int) -> str:
    return text.replace("\x00", "\ufffd")[:limit]


def _describe(exc: BaseException) -> str:
    """`<type>: <message>` on the first line (as Python prints it), then the innermost frames."""
    head = "".join(traceback.format_exception_only(type(exc), exc)).strip() or type(exc).__name__
    head = _clean(head, 2000)
    try:
        frames = "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-5, chain=False)
        ).strip()
    except Exception:  # a hostile __str__ or frame: the head is what matters
        frames = ""
    return _clean(f"{head}\n\n{frames[-(MAX_DETAIL - len(head) - 2) :]}" if frames else head, MAX_DETAIL)


_SIGNALS_FOR_MAIN = {signal.SIGTERM, signal.SIGINT}


@contextlib.contextmanager
def _signals_blocked(signals: set[signal.Signals]):
    """Block `signals` in the calling thread for the block's length (threads started inside inherit
    the block); a no-op where pthread_sigmask does not exist."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _ending(exc: BaseException | None, signal_name: str | None) -> tuple[str, dict[str, str] | None]:
    """How a run ended, as (state, failure) for its final `state` event."""
    if signal_name:
        return "failed", {"family": "signal", "detail": signal_name, "source": END_SOURCE}
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0)):
        return "done", None
    if isinstance(exc, KeyboardInterrupt):
        return "stopped", {"family": "interrupted", "detail": "KeyboardInterrupt", "source": END_SOURCE}
    if isinstance(exc, SystemExit):
        return "failed", {
            "family": "exit",
            "detail": _clean(f"SystemExit: {exc.code}", 2000),
            "source": END_SOURCE,
        }
    return "failed", {"family": "exception", "detail": _describe(exc), "source": END_SOURCE}


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"code": "error", "message": response.text[:500], "errors": []}
    return body if isinstance(body, dict) else {"code": "error", "message": str(body)[:500], "errors": []}


# --- module-level convenience --------------------------------------------------------------------

_default: Client | None = None
_default_lock = threading.Lock()


def init(
    base_url: str | None = None,
    token: str | None = None,
    project: str | None = None,
    run: str | None = None,
    **options,
) -> Client:
    """Create the module's client (closing a previous one, which reports its run's end) and return it.
    Arguments as `Client`. Unless `report_end=False`, the run's end is reported once: `done` when the
    process exits normally, `failed` on an uncaught exception (sys.excepthook) or SIGTERM (then the
    process exits with status 143), `stopped` on Ctrl-C; previous hooks and handlers are chained."""
    global _default
    with _default_lock:
        if _default is not None:
            _default.close(timeout=_default.exit_timeout)
        _default = Client(base_url, token, project, run, **options)
        _default._watch_end(excepthook=True)
        return _default


def get_client() -> Client:
    """The module's client; created from the SMRWEB_* environment variables on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
        return _default


def log_metric(key: str, value: float, step: int | None = None, ts=None, **kw) -> str:
    return get_client().log_metric(key, value, step, ts, **kw)


def log_score(score: float, **kw) -> str:
    return get_client().log_score(score, **kw)


def log_turn(turn: int, **kw) -> str:
    return get_client().log_turn(turn, **kw)


def log_message(body: str, **kw) -> str:
    return get_client().log_message(body, **kw)


def log_checkpoint(checkpoint_id: str, **kw) -> str:
    return get_client().log_checkpoint(checkpoint_id, **kw)


def set_state(state: str, failure=None, **kw) -> str:
    return get_client().set_state(state, failure, **kw)


def upload_artifact(path, name: str | None = None, **kw) -> str:
    return get_client().upload_artifact(path, name, **kw)


def flush(timeout: float | None = None) -> bool:
    return get_client().flush(timeout)


def close(timeout: float | None = None) -> bool:
    global _default
    with _default_lock:
        client, _default = _default, None
    return client.close(timeout) if client is not None else True
