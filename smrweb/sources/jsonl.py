"""JSONL import: event logs written to disk become ingest-contract events, streamed through the one
write path (`events.parse_events` + `services.ingest_events`) in batches of at most 5,000.

Three formats (docs/integrations.md#jsonl-import has example lines):

- `generic`: one ingest-contract event a line (`{"type": "metric", "key": "loss", ...}`), as-is.
- `agent-turns`: `agent.turn` trace events as an agent runtime emits them (seed 003: turn index, tool
  calls, per-turn tokens and cost, often inside a `spend` object); other fields are ignored.
- `usage-log`: per-call usage logs (seed 001: provider, model, input/output tokens); each call that
  carries usage is one agent turn, numbered per actor in file order.

Decisions, each tested in tests/sources/test_jsonl.py:

- **Ids.** A line's own `id` is kept (generic, agent-turns). Otherwise the event's id is
  `jsonl:<file id>:<line number>:<16 hex of blake2b(canonical JSON of the line)>`. The file id is 16 hex
  of blake2b of the canonical JSON of the file's first non-blank line (decompressed for gzip), so it
  does not change when the file is renamed, compressed or appended to. Re-importing a file adds
  nothing; importing it again after lines were appended adds exactly the new lines; two identical
  lines (two calls that look alike) are two events because their line numbers differ.
- **Turn numbers of usage logs.** Calls are numbered per actor, 0, 1, 2, … in file order; every line
  the adapter reads as a call takes a number, even one the contract then refuses, so the numbering
  is a function of the file alone. The counters are part of the checkpoint.
- **Resume.** After each batch is written, a checkpoint (byte offset and line number in the
  decompressed stream, a digest of the last line before the offset, the turn counters and the
  running summary) goes to `DATA_DIR/imports/<key>.json`, the key a digest of (project, run, file id,
  format). An import that finds one continues at its offset when the line before it is unchanged,
  otherwise it starts over; either way the ids make a re-sent line a duplicate, so a resumed import
  ends with exactly the rows of an uninterrupted one. A finished import deletes its checkpoint.
- **Bad lines** never stop an import: blank lines are counted, a line that is not JSON, not an
  object, longer than 8 MiB, not of the format, or refused by the contract (or the scenario's score
  bounds) is skipped and counted by reason with its first line numbers.

Memory is bounded by a batch (5,000 events or 16 MiB of lines), whatever the file's length.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import msgspec
from django.conf import settings
from django.utils import timezone

from smrweb.core import turn_bodies
from smrweb.sources.apply import apply_events
from smrweb.sources.failures import failure_of
from smrweb.tracking import events as ev
from smrweb.tracking import pricing, services
from smrweb.tracking.errors import EventError, TrackingError
from smrweb.tracking.models import Project

FORMATS = ("generic", "agent-turns", "usage-log")
MAX_LINE_BYTES = 8 * 2**20
MAX_BATCH_BYTES = 16 * 2**20
SNIFF_LINES = 50
SAMPLES = 5  # line numbers kept per skip reason
MAX_REASONS = 50  # distinct skip reasons kept; the rest are counted as "other reasons"
TICK_LINES = 5000  # progress bar update (and checkpoint when nothing is pending) every this many lines
STATE_VERSION = 1
BOM = b"\xef\xbb\xbf"

_decode = msgspec.json.Decoder().decode
_canonical = msgspec.json.Encoder(order="sorted").encode
_encode = msgspec.json.Encoder().encode


class ImportFailed(TrackingError):
    """The import cannot start or go on (no such file, unknown format, bad options)."""

    code = "import_failed"


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


# --- format adapters --------------------------------------------------------------------------


def _first(sources: tuple[Any, ...], keys: tuple[str, ...]) -> Any:
    """The first value that is not None among `keys` of the dicts in `sources`."""
    for source in sources:
        if isinstance(source, dict):
            for key in keys:
                value = source.get(key)
                if value is not None:
                    return value
    return None


def _int(value: Any) -> Any:
    """Integral floats (12.0) as ints; anything else unchanged, for the contract to judge."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def _ms(value: Any) -> Any:
    if type(value) is float and abs(value) < 2**53:  # NaN never gets here: not JSON
        return round(value)
    return value


def _ts(value: Any) -> Any:
    """ISO text unchanged; an epoch number (seconds, milliseconds or microseconds, by size) as ISO text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1e6 if value > 1e14 else value / 1e3 if value > 1e11 else value
        try:
            return datetime.fromtimestamp(seconds, UTC).isoformat()
        except (OverflowError, OSError, ValueError):
            return value  # refused by the contract, with its field
    return value


def _actor(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) else None


_IN = ("tokens_in", "input_tokens", "prompt_tokens", "tokensIn", "inputTokens", "promptTokens")
_OUT = ("tokens_out", "output_tokens", "completion_tokens", "tokensOut", "outputTokens", "completionTokens")
_COST = ("cost_usd", "costUsd", "cost", "usd")


_DURATION = ("duration_ms", "durationMs", "latency_ms", "latencyMs", "elapsed_ms", "elapsedMs")
_TS = ("ts", "timestamp", "time", "at", "created_at", "createdAt")
_KINDS = {
    "driver_inference": "driver_inference",
    "driverInference": "driver_inference",
    "child_work": "child_work",
    "childWork": "child_work",
}
_TURN_TAGS = ("type", "event", "e", "name", "kind")


_PROMPT = ("prompt", "messages", "input_messages", "inputMessages")
_RESPONSE = ("response", "completion", "output_text", "outputText", "output_messages", "outputMessages")


def _bodies(obj: dict) -> dict[str, Any]:
    """The line's prompt and response, when it has them: text, or messages (a message without a role
    takes "user" in a prompt, "assistant" in a response) — a harness's shapes, never a reason to skip."""
    found = {}
    for name, keys, role in (("prompt", _PROMPT, "user"), ("response", _RESPONSE, "assistant")):
        value = turn_bodies.to_messages(_first((obj,), keys), role, json_text=False)
        if value is not None:
            found[name] = value
    return found


def _kind(obj: dict) -> str | None:
    kind = obj.get("kind")
    return _KINDS.get(kind) if isinstance(kind, str) else None


class Adapter:
    """Turns one decoded line into an event dict, or returns the reason to skip it."""

    name = ""

    def convert(self, obj: dict) -> dict | str:
        raise NotImplementedError

    def state(self) -> dict:
        return {}

    def restore(self, state: dict) -> None:
        pass


class GenericAdapter(Adapter):
    """One ingest-contract event a line, untouched: the contract judges it."""

    name = "generic"

    def convert(self, obj: dict) -> dict | str:
        return obj


class AgentTurnsAdapter(Adapter):
    """`agent.turn` trace events (seed 003) → TurnEvent.

    turn ← turn | turnIndex | turn_index | index; actor ← actor | scope | scopeId | agentId | agent_id
    (default "driver"); parent_actor ← parent_actor | parentActor | parentScope | parent; kind ← kind
    (driver_inference/driverInference, child_work/childWork; else the contract's default by parent);
    tokens ← spend.tokens.{input,output} | tokens.{input,output} | usage.{input_tokens,…} | tokens_in…;
    cost_usd ← spend.usd | cost_usd | costUsd | usd | usage.cost_usd (else priced from the price table);
    cached / cache-write / reasoning tokens ← their usual names (`pricing.PART_KEYS`);
    tool_calls ← tool_calls | toolCalls; duration_ms ← duration_ms | durationMs | spend.ms (a spend.ms
    of 0 is "not measured");
    ts ← ts | timestamp | time (ISO or epoch); id ← id; prompt ← prompt | messages | input_messages;
    response ← response | completion | output_text | output_messages (text, or {role, content}
    messages). Other fields are ignored.
    """

    name = "agent-turns"

    def convert(self, obj: dict) -> dict | str:
        if not any(obj.get(tag) == "agent.turn" for tag in _TURN_TAGS):
            return "not an agent.turn event"
        spend = obj.get("spend") if isinstance(obj.get("spend"), dict) else {}
        tokens = obj.get("tokens") if isinstance(obj.get("tokens"), dict) else {}
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
        spend_tokens = spend.get("tokens") if isinstance(spend.get("tokens"), dict) else {}
        event: dict[str, Any] = {"type": "agent.turn"}
        found = {
            "id": obj.get("id"),
            "ts": _ts(_first((obj,), _TS)),
            "turn": _int(_first((obj,), ("turn", "turnIndex", "turn_index", "index"))),
            "actor": _first((obj,), ("actor", "scope", "scopeId", "scope_id", "agentId", "agent_id")),
            "parent_actor": _first(
                (obj,), ("parent_actor", "parentActor", "parentScope", "parentScopeId", "parent")
            ),
            "kind": _kind(obj),
            "model": obj.get("model"),
            "tokens_in": _int(_first((spend_tokens, tokens), ("input",))),
            "tokens_out": _int(_first((spend_tokens, tokens), ("output",))),
            "cost_usd": _first((spend, obj, usage), _COST),
            "tool_calls": _first((obj,), ("tool_calls", "toolCalls")),
            "duration_ms": _ms(_first((obj,), _DURATION)),
        }
        if found["tokens_in"] is None:
            found["tokens_in"] = _int(_first((obj, usage), _IN + ("input",)))
        if found["tokens_out"] is None:
            found["tokens_out"] = _int(_first((obj, usage), _OUT + ("output",)))
        if found["duration_ms"] is None and spend.get("ms"):  # driver turns hard-code ms: 0 (not measured)
            found["duration_ms"] = _ms(spend["ms"])
        found.update(pricing.token_counts(found, spend_tokens, tokens, obj, usage))
        for name in ("actor", "parent_actor"):
            if found[name] is not None:
                found[name] = _actor(found[name]) or found[name]
        event.update((k, v) for k, v in found.items() if v is not None)
        event.update(_bodies(obj))
        return event


SUMMARY_LINES = frozenset({"dispatch_exhausted"})  # lines that sum up attempts logged one by one


class UsageLogAdapter(Adapter):
    """Per-call usage logs (seed 001) → TurnEvent, one turn a call.

    A call is a line with usage: input/output tokens (input_tokens | prompt_tokens | inputTokens, …, at
    the top level or in a `usage` object) or a cost, or a failed call: a line with an `error` (the
    exception's class, seed 001), kept as a failed turn with its `http_status` and its `fix_hint` (else
    `message` / `error_message`) as the message. Other lines (probes, warm-ups, the router's
    `dispatch_exhausted` summary of attempts already logged one by one) are skipped.
    actor ← agent_id | agentId | agent | actor (default "driver");
    parent_actor ← parent_agent_id | parentAgentId | parent_actor; turn ← the actor's count of calls
    before this one in the file (0-based); kind ← kind when given, else the contract's default
    (driver_inference for a root actor, child_work under a parent); model ← "provider/model" (model alone
    when it already starts with the provider); cost_usd ← cost_usd | costUsd | cost | usd (else 0);
    duration_ms ← duration_ms | latency_ms | elapsed_ms (rounded); tool_calls ← tool_calls | toolCalls;
    ts ← ts | timestamp | time | created_at (ISO or epoch); prompt and response as in agent-turns. A log
    line's own `id`/`request_id` is not used: a retried request is another call.
    """

    name = "usage-log"

    def __init__(self) -> None:
        self.turns: dict[str, int] = {}

    def state(self) -> dict:
        return {"turns": self.turns}

    def restore(self, state: dict) -> None:
        self.turns = {str(k): int(v) for k, v in state.get("turns", {}).items()}

    def convert(self, obj: dict) -> dict | str:
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
        sources = (obj, usage)
        tokens_in, tokens_out = _first(sources, _IN), _first(sources, _OUT)
        cost = _first(sources, _COST)
        failure = failure_of(obj)
        if _first((obj,), _TURN_TAGS) in SUMMARY_LINES:
            return "a summary of calls logged one by one"
        if tokens_in is None and tokens_out is None and cost is None and not failure:
            return "no usage (not a model call)"
        raw_actor = _first((obj,), ("agent_id", "agentId", "agent", "actor"))
        actor = "driver" if raw_actor is None else _actor(raw_actor)
        if actor is None or not 1 <= len(actor) <= 200:
            return "refused: actor: expected a string of 1 to 200 characters"
        turn = self.turns.get(actor, 0)
        self.turns[actor] = turn + 1
        provider, model = obj.get("provider"), obj.get("model")
        if (
            isinstance(provider, str)
            and provider
            and isinstance(model, str)
            and not model.startswith(provider + "/")
        ):
            model = f"{provider}/{model}"
        found = {
            "ts": _ts(_first((obj,), _TS)),
            "turn": turn,
            "actor": actor,
            "parent_actor": _first(
                (obj,), ("parent_agent_id", "parentAgentId", "parent_actor", "parentActor")
            ),
            "kind": _kind(obj),
            "model": model if model is not None else provider,
            "tokens_in": _int(tokens_in),
            "tokens_out": _int(tokens_out),
            "cost_usd": cost,
            "tool_calls": _first((obj,), ("tool_calls", "toolCalls")),
            "duration_ms": _ms(_first((obj,), _DURATION)),
        }
        found.update(pricing.token_counts(found, obj, usage))
        found.update(failure)
        event: dict[str, Any] = {"type": "agent.turn"}
        event.update((k, v) for k, v in found.items() if v is not None)
        event.update(_bodies(obj))
        return event


ADAPTERS: dict[str, type[Adapter]] = {a.name: a for a in (GenericAdapter, AgentTurnsAdapter, UsageLogAdapter)}
_CONTRACT_KEYS = {name: set(model.model_fields) for name, model in ev.EVENT_TYPES.items()}


def classify(obj: Any) -> str | None:
    """What one decoded line looks like: a format, "generic-turn" (a contract agent.turn, which the
    agent-turns format reads too), or None (tells nothing)."""
    if not isinstance(obj, dict):
        return None
    kind = obj.get("type")
    if isinstance(kind, str) and kind in _CONTRACT_KEYS and obj.keys() <= _CONTRACT_KEYS[kind]:
        return "generic-turn" if kind == "agent.turn" else "generic"
    if any(obj.get(tag) == "agent.turn" for tag in _TURN_TAGS):
        return "agent-turns"
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
    if _first((obj, usage), _IN + _OUT) is not None:
        return "usage-log"
    return None


def sniff_format(path: Path | str) -> str:
    """The format of a file from its first lines: the first line that tells decides; lines that are
    contract agent.turn events alone mean generic."""
    seen_generic_turn = False
    with open_lines(path) as (_, stream):
        for _ in range(SNIFF_LINES):
            line = stream.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            try:
                found = classify(_decode(line.removeprefix(BOM).strip() or b"null"))
            except ValueError:  # msgspec.DecodeError, or UnicodeDecodeError for bytes that are not UTF-8
                continue
            if found == "generic-turn":
                seen_generic_turn = True
            elif found is not None:
                return found
    if seen_generic_turn:
        return "generic"
    raise ImportFailed(
        f"Cannot tell the format of {Path(path).name} from its first {SNIFF_LINES} lines; "
        f"pass --format ({', '.join(FORMATS)})."
    )


# --- reading ----------------------------------------------------------------------------------


@contextmanager
def open_lines(path: Path | str) -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """(raw file, stream of lines): the stream decompresses gzip (told by its magic bytes, not its name)."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 — closed below
    except OSError as exc:
        raise ImportFailed(f"Cannot read {path}: {exc.strerror or exc}.") from None
    try:
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
        try:
            yield raw, stream
        finally:
            if stream is not raw:
                stream.close()
    finally:
        raw.close()


def file_identity(path: Path | str) -> str | None:
    """16 hex of blake2b of the canonical JSON of the first non-blank line (its bytes when it is not
    JSON); None for a file without one."""
    with open_lines(path) as (_, stream):
        while line := stream.readline(MAX_LINE_BYTES + 1):
            text = line.removeprefix(BOM).strip()
            if text:
                try:
                    return _digest(_canonical(_decode(text)))
                except ValueError:  # msgspec.DecodeError, or UnicodeDecodeError for bytes that are not UTF-8
                    return _digest(text)
    return None


# --- summary and checkpoints ------------------------------------------------------------------


@dataclass
class ImportStats:
    lines: int = 0  # lines read; == blank + skipped + accepted + duplicates once all are sent
    blank: int = 0
    accepted: int = 0
    duplicates: int = 0
    skipped: int = 0
    reasons: dict[str, list] = field(default_factory=dict)  # reason -> [count, first line numbers]

    def skip(self, reason: str, line_no: int) -> None:
        self.skipped += 1
        entry = self.reasons.get(reason)
        if entry is None:
            if len(self.reasons) >= MAX_REASONS:
                reason = "other reasons"
                entry = self.reasons.get(reason)
            if entry is None:
                entry = self.reasons[reason] = [0, []]
        entry[0] += 1
        if len(entry[1]) < SAMPLES:
            entry[1].append(line_no)

    def as_dict(self) -> dict:
        return {
            "lines": self.lines,
            "blank": self.blank,
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "skipped": self.skipped,
            "reasons": {k: [v[0], list(v[1])] for k, v in self.reasons.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> ImportStats:
        return cls(**{**data, "reasons": {k: [v[0], list(v[1])] for k, v in data.get("reasons", {}).items()}})


@dataclass
class ImportResult:
    path: Path
    project: str
    run: str
    format: str
    file_id: str | None
    stats: ImportStats
    resumed_at: int | None = None  # the line a checkpoint let this import start after
    restarted: str = ""  # why a checkpoint found was not used
    stopped_at: int | None = None  # the last line done when the import stopped before the end
    interrupted: bool = False
    error: str = ""  # the stream could not be read to its end (a truncated gzip file)
    state_path: Path | None = None

    @property
    def complete(self) -> bool:
        return self.stopped_at is None


class Checkpoints:
    """One JSON file per (project, run, file id, format) under `directory`, replaced atomically."""

    def __init__(self, directory: Path, project: str, run: str, file_id: str, fmt: str):
        key = _digest(json.dumps([project, run, file_id, fmt]).encode())
        self.directory = Path(directory)
        self.path = self.directory / f"{key}.json"

    def load(self) -> dict | None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # unreadable: start over (the ids keep that correct)
        return data if isinstance(data, dict) and data.get("version") == STATE_VERSION else None

    def save(self, data: dict) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.stem}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


# --- the import -------------------------------------------------------------------------------


def _reason(err: EventError) -> str:
    return f"refused: {err.field}: {err.message}" if err.field else f"refused: {err.message}"


class _Importer:
    def __init__(self, project: Project, run: str, adapter: Adapter, stats: ImportStats, batch_size: int):
        self.project, self.run, self.adapter, self.stats = project, run, adapter, stats
        self.batch_size = batch_size

    def send(self, batch: list[tuple[int, dict]]) -> None:
        """Validate and write one batch; refused events are skipped with their line numbers, the rest
        written."""
        applied = apply_events(
            self.project, self.run, batch, on_refused="skip", batch_size=len(batch) or 1, via="jsonl"
        )
        for line, errors in applied.refused:
            self.stats.skip(_reason(errors[0]) if errors else "refused", line)
        self.stats.accepted += applied.accepted
        self.stats.duplicates += applied.duplicates


def import_file(
    path: Path | str,
    project: Project,
    run: str,
    *,
    fmt: str = "auto",
    progress: IO[str] | None = None,
    restart: bool = False,
    max_lines: int | None = None,
    batch_size: int = ev.MAX_EVENTS,
    state_dir: Path | str | None = None,
) -> ImportResult:
    """Import a JSONL file (plain or gzip) into one run of `project`; see the module docstring.

    `progress`: where a tqdm bar (bytes of the file) goes, None for none. `restart`: ignore a
    checkpoint. `max_lines`: stop after this many lines (the checkpoint lets the next call go on).
    KeyboardInterrupt stops the import at the last checkpoint and returns (`interrupted`).
    """
    path = Path(path)
    if not 1 <= batch_size <= ev.MAX_EVENTS:
        raise ImportFailed(f"The batch size is 1 to {ev.MAX_EVENTS}.")
    if max_lines is not None and max_lines < 1:
        raise ImportFailed("--max-lines must be at least 1.")
    if fmt != "auto" and fmt not in ADAPTERS:
        raise ImportFailed(f"Unknown format {fmt!r}; expected auto or one of: {', '.join(FORMATS)}.")
    services.ingest_events(project, run, [])  # checks the run id; writes nothing
    file_id = file_identity(path)
    if file_id is None:
        return ImportResult(path, project.slug, run, fmt if fmt != "auto" else "", None, ImportStats())
    if fmt == "auto":
        fmt = sniff_format(path)
    adapter = ADAPTERS[fmt]()
    store = Checkpoints(
        Path(state_dir) if state_dir else settings.DATA_DIR / "imports", project.slug, run, file_id, fmt
    )
    saved = None if restart else store.load()
    stats = ImportStats()
    result = ImportResult(path, project.slug, run, fmt, file_id, stats, state_path=store.path)
    prefix = f"jsonl:{file_id}:"

    with open_lines(path) as (raw, stream):
        offset, line_no, tail = 0, 0, b""
        if saved is not None:
            try:
                offset, line_no, tail_len = int(saved["offset"]), int(saved["line"]), int(saved["tail_len"])
                stream.seek(max(offset - tail_len, 0))
                tail = stream.read(tail_len)
                if len(tail) != tail_len or _digest(tail) != saved["tail"]:
                    raise ValueError("the file changed before the checkpoint's offset")
                stats = result.stats = ImportStats.from_dict(saved["stats"])
                adapter.restore(saved.get("adapter", {}))
                result.resumed_at = line_no
            except (KeyError, TypeError, ValueError, EOFError, OSError, zlib.error) as exc:
                # A changed file, a damaged gzip stream or an unreadable checkpoint: from the start.
                result.restarted = (
                    str(exc) if isinstance(exc, ValueError) else "the checkpoint could not be used"
                )
                stats = result.stats = ImportStats()
                adapter = ADAPTERS[fmt]()
                stream.seek(0)
                offset, line_no, tail = 0, 0, b""
        importer = _Importer(project, run, adapter, stats, batch_size)

        def checkpoint() -> dict:
            data = {
                "version": STATE_VERSION,
                "project": project.slug,
                "run": run,
                "file": str(path.resolve()),
                "file_id": file_id,
                "format": fmt,
                "offset": offset,
                "line": line_no,
                "tail": _digest(tail),
                "tail_len": len(tail),
                "adapter": adapter.state(),
                "stats": stats.as_dict(),
                "updated": timezone.now().isoformat(),
            }
            store.save(data)
            return data

        bar = None
        if progress is not None:
            from tqdm import tqdm

            size = path.stat().st_size
            bar = tqdm(
                total=size,
                initial=min(raw.tell(), size),
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=path.name,
                file=progress,
                mininterval=0.5,
                leave=True,
            )

        def tick() -> None:
            if bar is not None:
                bar.update(raw.tell() - bar.n)

        last_saved = saved if result.resumed_at is not None else None
        pending: list[tuple[int, dict]] = []
        pending_bytes = 0
        read_here = 0
        ticked = line_no
        decode, canonical, convert, skip = _decode, _canonical, adapter.convert, stats.skip
        readline = stream.readline
        try:
            try:
                while True:
                    if line_no - ticked >= TICK_LINES:  # the lines so far are all handled
                        ticked = line_no
                        tick()
                        if not pending:
                            last_saved = checkpoint()
                    if max_lines is not None and read_here >= max_lines:
                        result.stopped_at = line_no
                        break
                    line = readline(MAX_LINE_BYTES + 1)
                    if not line:
                        break
                    line_no += 1
                    read_here += 1
                    offset += len(line)
                    tail = line
                    stats.lines += 1
                    if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                        while chunk := readline(2**20):  # the rest of the line, never held whole
                            offset += len(chunk)
                            tail = chunk
                            if chunk.endswith(b"\n"):
                                break
                        skip(f"line too long (over {MAX_LINE_BYTES:,} bytes)", line_no)
                        continue
                    text = line.strip()
                    if line_no == 1:
                        text = text.removeprefix(BOM)
                    if not text:
                        stats.blank += 1
                        continue
                    try:
                        obj = decode(text)
                    except (
                        ValueError
                    ):  # msgspec.DecodeError, or UnicodeDecodeError for bytes that are not UTF-8
                        skip("not JSON", line_no)
                        continue
                    if type(obj) is not dict:
                        skip("not a JSON object", line_no)
                        continue
                    event = convert(obj)
                    if type(event) is str:
                        skip(event, line_no)
                        continue
                    if event.get("id") is None:
                        event["id"] = (
                            f"{prefix}{line_no}:{hashlib.blake2b(canonical(obj), digest_size=8).hexdigest()}"
                        )
                    pending.append((line_no, event))
                    pending_bytes += len(line)
                    if len(pending) >= batch_size or pending_bytes >= MAX_BATCH_BYTES:
                        importer.send(pending)
                        pending, pending_bytes = [], 0
                        last_saved = checkpoint()
                        tick()
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                result.error = f"the compressed stream is damaged after line {line_no}: {exc}"
                result.stopped_at = line_no
            if pending:
                importer.send(pending)
                pending = []
            if result.complete:
                store.clear()
            else:
                checkpoint()
            tick()
        except KeyboardInterrupt:
            # What was sent after the last checkpoint is re-sent on resume, as duplicates.
            result.interrupted = True
            if last_saved is not None:
                result.stats = ImportStats.from_dict(last_saved["stats"])
                result.stopped_at = int(last_saved["line"])
            else:
                result.stats = ImportStats()
                result.stopped_at = 0
        finally:
            if bar is not None:
                bar.close()
    return result


def format_summary(result: ImportResult) -> str:
    """The end-of-import report: lines, events, and what was skipped and why (first line numbers)."""
    s = result.stats
    where = f"{result.project}/{result.run}"
    out = [f"{result.path.name} → {where} (format {result.format or '-'}, file id {result.file_id or '-'})"]
    if result.resumed_at is not None:
        out.append(
            f"resumed after line {result.resumed_at:,} (the checkpoint of an earlier, unfinished import)"
        )
    if result.restarted:
        out.append(f"started over: {result.restarted}; lines already imported count as duplicates")
    out.append(f"lines read: {s.lines:,} ({s.blank:,} blank)")
    out.append(f"events: {s.accepted:,} accepted, {s.duplicates:,} duplicates")
    out.append(f"skipped: {s.skipped:,} {'line' if s.skipped == 1 else 'lines'}" + (":" if s.skipped else ""))
    for reason, (count, lines) in sorted(s.reasons.items(), key=lambda item: (-item[1][0], item[0])):
        more = ", …" if count > len(lines) else ""
        label = "line" if count == 1 else "lines"
        out.append(f"  {reason}: {count:,} ({label} {', '.join(map(str, lines))}{more})")
    if result.error:
        out.append(f"stopped: {result.error}; the checkpoint keeps the place")
    elif result.interrupted:
        out.append(
            f"interrupted: the checkpoint is after line {result.stopped_at:,}; run the same command again "
            "to resume"
        )
    elif result.stopped_at is not None:
        out.append(
            f"stopped after line {result.stopped_at:,} (--max-lines); run the same command again to go on"
        )
    return "\n".join(out)
