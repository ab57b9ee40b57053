"""A run's log, write side: the one path by which lines are kept, for a push (`POST …/runs/{run}/logs`,
`smrweb log`, the logging handler) and for the SMR poller's archives alike.

What a line becomes (docs/api.md, "Run logs"):
- `text` is required; a text holding newlines is split into one line per row (same level, time and
  stream), so search and paging work on lines and a traceback keeps its lines in order;
- terminal colour codes (ANSI escape sequences) are removed, then every other control character except
  tab; a line longer than LOG_LINE_MAX characters is cut and marked " …[cut N chars]";
- `level`: a name (debug, info, warning, error, critical; warn, fatal) or a levelno 1-50, default info;
- `ts`: ISO 8601 (no zone: UTC) within the event bounds, default the time it arrives;
- `stream`: up to 200 characters ("stderr", "worker-3"), default the batch's.

A batch is all or nothing: one bad line refuses it (its field named, `lines[3].level`) and nothing is
written. A batch id the run already has writes nothing and answers what the first time kept. Lines past
the run's cap (SMRWEB_LOG_LINES_PER_RUN) are counted as dropped, on the batch and the run."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from smrweb.tracking.errors import EventError, InvalidLogLines
from smrweb.tracking.events import TS_MAX, TS_MIN
from smrweb.tracking.models import (
    LOG_LINE_MAX,
    LogLevel,
    LogSource,
    Project,
    Run,
    RunLogBatch,
    RunLogLine,
)
from smrweb.tracking.services.archive import check_writable
from smrweb.tracking.services.rows import insert_rows
from smrweb.tracking.services.runs import _locked_run

MAX_LOG_LINES_PER_BATCH = 5000  # after splitting texts on newlines
BATCH_ID_MAX = 200
STREAM_MAX = 200
ERRORS_SHOWN = 50  # of a refused batch's problems, the first this many are named
TOO_MANY = (
    f"At most {MAX_LOG_LINES_PER_BATCH} lines a batch (texts split on newlines count one a line); "
    "send smaller batches."
)
LINE_FIELDS = frozenset({"text", "level", "ts", "stream"})

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class LogLineIn:
    """One line, checked and cleaned, ready to store."""

    text: str
    level: int
    ts: datetime
    stream: str


@dataclass(frozen=True)
class LogBatchResult:
    batch_id: str
    kept: int
    dropped: int
    first_seq: int | None
    last_seq: int | None
    repeat: bool  # the run had this batch id already: nothing was written this time

    def as_dict(self) -> dict:
        return {
            "batch_id": self.batch_id,
            "kept": self.kept,
            "dropped": self.dropped,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "repeat": self.repeat,
        }


def clean_text(text: str) -> str:
    """Colour codes and control characters (except tab) out; cut past LOG_LINE_MAX, saying how much."""
    text = _CONTROL.sub("", _ANSI.sub("", text))
    if len(text) > LOG_LINE_MAX:
        cut = len(text) - LOG_LINE_MAX
        text = f"{text[:LOG_LINE_MAX]} …[cut {cut} chars]"
    return text


def _parse_ts(value: object) -> datetime:
    if not isinstance(value, str):
        raise ValueError("A time is an ISO 8601 string, e.g. 2026-12-02T10:00:00Z.")
    try:
        ts = parse_datetime(value.strip())
    except ValueError:
        ts = None
    if ts is None:
        raise ValueError(f"{value[:60]!r} is not an ISO 8601 time (e.g. 2026-12-02T10:00:00Z).")
    if ts.tzinfo is None:  # as for events: a time without a zone is UTC, not the server's local time
        ts = ts.replace(tzinfo=UTC)
    if not TS_MIN <= ts <= TS_MAX:
        raise ValueError("A time must be between 1970-01-01 and 9999-01-01 (UTC).")
    return ts.astimezone(UTC)


def parse_lines(
    lines: object,
    *,
    stream: str = "",
    now: datetime | None = None,
    limit: int | None = MAX_LOG_LINES_PER_BATCH,
) -> list[LogLineIn]:
    """Check and clean a batch's lines (dicts, or plain strings for text at info level). Every problem
    is collected, named by its field (`lines[3].level`), and raised together: InvalidLogLines.
    `limit`: lines a batch may hold (a push's cap; an SMR archive is bounded by its bytes instead)."""
    if not isinstance(lines, list):
        raise InvalidLogLines([EventError(None, "lines", "Send `lines` as a list of lines.")])
    limit = limit if limit is not None else 2**62
    if len(lines) > limit:
        raise InvalidLogLines([EventError(None, "lines", TOO_MANY)])
    now = now or timezone.now()
    errors: list[EventError] = []
    out: list[LogLineIn] = []
    for index, line in enumerate(lines):
        where = f"lines[{index}]"
        if isinstance(line, str):
            line = {"text": line}
        if not isinstance(line, dict):
            errors.append(EventError(index, where, "A line is an object with `text` (or a string)."))
            continue
        if unknown := sorted(set(line) - LINE_FIELDS):
            errors.append(
                EventError(
                    index, f"{where}.{unknown[0]}", "Unknown field; a line has text, level, ts and stream."
                )
            )
            continue
        text = line.get("text")
        if not isinstance(text, str):
            errors.append(EventError(index, f"{where}.text", "Each line needs `text`, a string."))
            continue
        level, ts, line_stream = LogLevel.INFO, now, stream
        try:
            if line.get("level") is not None:
                level = LogLevel.parse(line["level"])
        except ValueError as exc:
            errors.append(EventError(index, f"{where}.level", str(exc)))
        try:
            if line.get("ts") is not None:
                ts = _parse_ts(line["ts"])
        except ValueError as exc:
            errors.append(EventError(index, f"{where}.ts", str(exc)))
        if line.get("stream") is not None:
            line_stream = line["stream"]
            if not isinstance(line_stream, str) or len(line_stream) > STREAM_MAX:
                errors.append(EventError(index, f"{where}.stream", "A stream is a string of ≤200 chars."))
                continue
            line_stream = _CONTROL.sub("", line_stream)
        # "" is one empty line (a print() of nothing); "a\nb\n" is two.
        for piece in text.splitlines() or [""]:
            out.append(LogLineIn(clean_text(piece), level, ts, line_stream))
        if len(out) > limit:
            errors.append(EventError(None, "lines", TOO_MANY))
            break
    if errors:
        raise InvalidLogLines(errors[:ERRORS_SHOWN])
    return out


def check_batch_id(batch_id: object) -> str:
    if not isinstance(batch_id, str) or not batch_id.strip() or len(batch_id) > BATCH_ID_MAX:
        raise InvalidLogLines(
            [EventError(None, "batch_id", f"`batch_id` is required: a string of 1-{BATCH_ID_MAX} chars.")]
        )
    return batch_id


def push_lines(
    project: Project,
    run_external_id: str,
    batch_id: object,
    lines: object,
    *,
    source: str = LogSource.PUSH,
    stream: str = "",
) -> LogBatchResult:
    """A push: the run is created if this is the first the project hears of it (a harness may set up its
    logging before its first event), as events create it."""
    batch_id = check_batch_id(batch_id)
    parsed = parse_lines(lines, stream=stream)
    with transaction.atomic():
        run = _locked_run(project, run_external_id, min((line.ts for line in parsed), default=timezone.now()))
        return _append_locked(run, batch_id, parsed, source)


def append_lines(
    run: Run,
    batch_id: object,
    lines: object,
    *,
    source: str = LogSource.PUSH,
    stream: str = "",
    limit: int | None = MAX_LOG_LINES_PER_BATCH,
) -> LogBatchResult:
    """Keep a batch of lines on an existing run (the SMR poller's archives; see the module's doc)."""
    batch_id = check_batch_id(batch_id)
    parsed = parse_lines(lines, stream=stream, limit=limit)
    with transaction.atomic():
        locked = Run.objects.select_for_update(of=("self",)).select_related("project").get(pk=run.pk)
        check_writable(locked.project, locked)
        return _append_locked(locked, batch_id, parsed, source)


def record_unreadable_archive(run: Run, batch_id: str, problem: str) -> bool:
    """An SMR log archive the poller could not read: a batch that kept nothing, with why, counted on the
    run (`log_archives_unreadable`), so it is shown rather than silently missing. False when the run
    already has this batch (read, or found unreadable, before)."""
    batch_id = check_batch_id(batch_id)
    with transaction.atomic():
        locked = Run.objects.select_for_update(of=("self",)).get(pk=run.pk)
        if RunLogBatch.objects.filter(run=locked, batch_id=batch_id).exists():
            return False
        RunLogBatch.objects.create(
            run=locked, batch_id=batch_id, source=LogSource.SMR, problem=_CONTROL.sub("", problem)[:500]
        )
        Run.objects.filter(pk=run.pk).update(log_archives_unreadable=F("log_archives_unreadable") + 1)
    return True


_INSERT_FIELDS = ("run", "seq", "ts", "level", "text", "source", "stream")


def _insert_lines(run: Run, last: int, lines: Sequence[LogLineIn], source: str) -> int:
    """The lines in few statements (`rows.insert_rows`: `bulk_create` built a model and prepared each
    value per row, most of a 5,000-line push's time). Seqs follow `last`."""
    ts_field = RunLogLine._meta.get_field("ts")
    values = [
        (
            run.pk,
            seq,
            ts_field.get_db_prep_save(line.ts, connection),
            line.level,
            line.text,
            source,
            line.stream,
        )
        for seq, line in enumerate(lines, start=last + 1)
    ]
    insert_rows(RunLogLine, _INSERT_FIELDS, values)
    return len(lines)


def _append_locked(run: Run, batch_id: str, lines: Sequence[LogLineIn], source: str) -> LogBatchResult:
    """Under the run's row lock (one writer of its seq at a time)."""
    earlier = RunLogBatch.objects.filter(run=run, batch_id=batch_id).first()
    if earlier is not None:
        return LogBatchResult(
            batch_id, earlier.kept, earlier.dropped, earlier.first_seq, earlier.last_seq, repeat=True
        )
    room = max(0, settings.SMRWEB_LOG_LINES_PER_RUN - run.log_lines)
    kept_lines, dropped = lines[:room], max(0, len(lines) - room)
    last = RunLogLine.objects.filter(run=run).order_by("-seq").values_list("seq", flat=True).first() or 0
    rows = _insert_lines(run, last, kept_lines, source)
    first_seq, last_seq = (last + 1, last + rows) if rows else (None, None)
    RunLogBatch.objects.create(
        run=run,
        batch_id=batch_id,
        source=source,
        kept=rows,
        dropped=dropped,
        first_seq=first_seq,
        last_seq=last_seq,
    )
    warnings = sum(1 for line in kept_lines if line.level >= LogLevel.WARNING)
    if rows or dropped:
        Run.objects.filter(pk=run.pk).update(
            log_lines=F("log_lines") + rows,
            log_lines_dropped=F("log_lines_dropped") + dropped,
            log_warnings=F("log_warnings") + warnings,
        )
        run.log_lines += rows
        run.log_lines_dropped += dropped
        run.log_warnings += warnings
    return LogBatchResult(batch_id, rows, dropped, first_seq, last_seq, repeat=False)
