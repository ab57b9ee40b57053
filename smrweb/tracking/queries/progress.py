"""Is a run getting anywhere? Two readings of its stored turns: loops (the agent repeating a tool call,
or two calls taking turns) and no progress (turns and spend since its best score).

`find_loops` is pure (a list of calls in, stretches out) so crafted sequences test it directly; the
alert evaluator feeds it a run's recent turns and keeps what it finds as `LoopFinding` rows."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Count, DecimalField, Sum, Value
from django.db.models.functions import Coalesce

from smrweb.tracking.models import RUN_RULE, USD, AgentTurn, LoopPattern, Run, Submission
from smrweb.tracking.queries.turn_memo import turns_after

# Loops are looked for in this many of a run's most recent turns with tool calls: the evaluator runs
# after every batch, so a loop is seen while it grows, and a long run costs the same as a short one.
SCAN_TURNS = 2000
DEFAULT_LOOP_REPEATS = 3  # the same call 3 times in a row, or A-B three times over (6 calls)
DEFAULT_NO_PROGRESS_TURNS = 50
SHOWN_ARGUMENTS = 120  # characters of a call's arguments in its label


@dataclass(frozen=True)
class Call:
    """One tool call, as the loop finder sees it: `key` compares calls (name + canonical arguments)."""

    turn: int
    key: str
    label: str
    tokens: int = 0  # what the turn that made the call cost (counted once per turn by `find_loops`)
    usd: Decimal = Decimal(0)


@dataclass(frozen=True)
class Loop:
    pattern: str  # LoopPattern
    label: str
    first_turn: int
    last_turn: int
    repeats: int  # calls in the stretch
    wasted_tokens: int
    wasted_usd: Decimal


def call_identity(entry: Any) -> tuple[str | None, str] | None:
    """(key, label) of one stored tool call, whatever shape the source wrote it in: a bare name, or a
    dict with name/tool/function.name and arguments/args/input/parameters (an object, or a JSON string
    of one). None when no name can be found. The key is None when the source recorded the name alone:
    two such calls cannot be told equal (the arguments may differ), so they never make a loop."""
    fields = ("arguments", "args", "input", "parameters")
    if isinstance(entry, str):
        name, sources = entry, []
    elif isinstance(entry, dict):
        function = entry.get("function") if isinstance(entry.get("function"), dict) else {}
        name = entry.get("name") or entry.get("tool") or entry.get("tool_name") or function.get("name")
        sources = [source for source in (entry, function) if any(f in source for f in fields)]
    else:
        return None
    if not isinstance(name, str) or not name.strip():
        return None
    if not sources:
        return None, name  # the name alone
    arguments = next(sources[0][f] for f in fields if f in sources[0])
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass  # free text arguments compare as text
    canonical = "" if arguments is None else json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    shown = canonical if len(canonical) <= SHOWN_ARGUMENTS else canonical[: SHOWN_ARGUMENTS - 1] + "…"
    return f"{name}\x00{canonical}", f"{name}({shown})" if canonical else name


def calls_of(turns: Iterable[tuple[int, Any, int, Decimal]]) -> list[Call]:
    """Flatten (turn, tool_calls, tokens, usd) rows in turn order into calls; turns without a readable
    call are skipped (thinking between two identical calls does not break the repetition)."""
    calls = []
    for turn, tool_calls, tokens, usd in turns:
        for index, entry in enumerate(tool_calls if isinstance(tool_calls, list) else []):
            identity = call_identity(entry)
            if identity is not None:
                key, label = identity
                # A call known by name alone equals no other call: it breaks a stretch, never makes one.
                calls.append(
                    Call(turn, key if key is not None else f"\x01{turn}:{index}", label, tokens, usd)
                )
    return calls


def _waste(stretch: Sequence[Call], first_cycle: int) -> tuple[int, Decimal]:
    """Tokens and USD of the turns in `stretch` after its first cycle (each turn once)."""
    seen = {c.turn for c in stretch[:first_cycle]}
    tokens, usd = 0, Decimal(0)
    for c in stretch[first_cycle:]:
        if c.turn not in seen:
            seen.add(c.turn)
            tokens, usd = tokens + c.tokens, usd + c.usd
    return tokens, usd


def find_loops(calls: Sequence[Call], repeats: int = DEFAULT_LOOP_REPEATS) -> list[Loop]:
    """Maximal stretches of one call `repeats` or more times in a row, and of two different calls
    alternating `repeats` or more times over (A-B-A-B…, 2 × repeats calls). Oldest first."""
    repeats = max(2, repeats)
    loops: list[Loop] = []
    n, i = len(calls), 0
    while i < n:
        j = i
        while j + 1 < n and calls[j + 1].key == calls[i].key:
            j += 1
        if j - i + 1 >= repeats:
            stretch = calls[i : j + 1]
            tokens, usd = _waste(stretch, 1)
            loops.append(
                Loop(
                    LoopPattern.REPEAT,
                    stretch[0].label,
                    stretch[0].turn,
                    stretch[-1].turn,
                    len(stretch),
                    tokens,
                    usd,
                )
            )
            i = j + 1
            continue
        # A ping-pong starting at i: calls[k] == calls[k - 2] and calls[k] != calls[k - 1] onwards.
        if i + 1 < n and calls[i + 1].key != calls[i].key:
            k = i + 2
            while k < n and calls[k].key == calls[k - 2].key:
                k += 1
            length = k - i
            if length >= 2 * repeats:
                stretch = calls[i:k]
                tokens, usd = _waste(stretch, 2)
                label = f"{stretch[0].label} ⇄ {stretch[1].label}"
                loops.append(
                    Loop(LoopPattern.PING_PONG, label, stretch[0].turn, stretch[-1].turn, length, tokens, usd)
                )
                i = k
                continue
        i += 1
    return loops


def recent_calls(run: Run, actor: str | None = None) -> dict[str, list[Call]]:
    """The calls of the run's last SCAN_TURNS turns that made any, per actor, in turn order."""
    rows = AgentTurn.objects.filter(run=run).exclude(tool_calls=[])
    if actor is not None:
        rows = rows.filter(actor=actor)
    recent = list(
        rows.order_by("-ts", "-id").values_list(
            "actor", "turn", "tool_calls", "tokens_in", "tokens_out", "cost_usd"
        )[:SCAN_TURNS]
    )
    by_actor: dict[str, list[tuple[int, Any, int, Decimal]]] = {}
    for actor_id, turn, tool_calls, tokens_in, tokens_out, usd in reversed(recent):
        by_actor.setdefault(actor_id, []).append((turn, tool_calls, tokens_in + tokens_out, usd))
    return {a: calls_of(sorted(turns, key=lambda t: t[0])) for a, turns in by_actor.items()}


@dataclass(frozen=True)
class Progress:
    """Since the run's best score (or its start, before any): how many turns, tokens and dollars."""

    best_submission_id: int | None
    best_score: float | None
    turns: int
    tokens: int
    usd: Decimal

    def stuck(self, *, turns: int | None, usd: float | None) -> bool:
        """Whether this is "no progress" for a limit of `turns` or `usd` (either; None: not that one)."""
        return (turns is not None and self.turns >= turns) or (
            usd is not None and self.usd >= Decimal(str(usd))
        )


def best_counted(run: Run) -> tuple | None:
    """(pk, score, ts) of the run's best counted submission (earliest of equals), or None: one query."""
    return (
        Submission.objects.filter(run=run)
        .counted(**RUN_RULE)  # the rule the run's best card reads
        .order_by("-score" if run.project.scenario.maximize else "score", "ts", "id")
        .values_list("pk", "score", "ts")
        .first()
    )


def progress_since_best(run: Run, *, kept: bool = False, best: tuple | None | bool = False) -> Progress:
    """Two queries: the run's best counted submission (`best_counted`, unless the caller read it: `best`),
    then the turns after it — with `kept`, from the run page's kept turn aggregates (`timeline.turns_after`:
    the turns of one bucket read, not every turn since the best)."""
    if best is False:
        best = best_counted(run)
    if kept:
        if best is None:
            n, tokens, usd = run.turn_count, run.tokens_in + run.tokens_out, run.cost_usd
        else:
            n, tokens, usd = turns_after(run, best[2])
        return Progress(
            best_submission_id=best[0] if best else None,
            best_score=best[1] if best else None,
            turns=n,
            tokens=tokens,
            usd=Decimal(usd),
        )
    turns = AgentTurn.objects.filter(run=run)
    if best is not None:
        turns = turns.filter(ts__gt=best[2])
    zero = Value(Decimal(0), output_field=DecimalField(**USD))
    sums = turns.aggregate(
        n=Count("id"),
        tokens_in=Coalesce(Sum("tokens_in"), 0),
        tokens_out=Coalesce(Sum("tokens_out"), 0),
        usd=Coalesce(Sum("cost_usd"), zero),
    )
    return Progress(
        best_submission_id=best[0] if best else None,
        best_score=best[1] if best else None,
        turns=sums["n"],
        tokens=sums["tokens_in"] + sums["tokens_out"],
        usd=Decimal(sums["usd"]),
    )
