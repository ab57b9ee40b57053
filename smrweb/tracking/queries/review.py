"""What a reviewer reads before approving: an artifact's preview, and a submission's artifact compared
with another one — the previous approved submission at the same path, the project's best, or any
submission the reviewer picks. Shared by the API (`…/submissions/{id}/diff`) and the dashboard.

Bytes come from the artifact store, read up to a cap. ONNX summaries are never computed here: a worker
reads the model under limits, once per digest (`services.summaries`, red-team N2), and until it has, the
preview and the diff say "summarising" (`OnnxState.status` pending) and the page polls. Two models whose
weights differ are compared element by element on a worker too, once per pair of digests.

One rule for every diff (issue 33 P1-A): two artifacts are identical when, and only when, their digests
are; whatever else is compared (lines, a graph) is said beside that, never instead of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q
from django.template.defaultfilters import filesizeformat, pluralize

from smrweb.core import cachekeys, onnx_summary, preview, softcache, textdiff
from smrweb.tracking.errors import (
    ArtifactBytesMissing,
    InvalidInput,
    NoComparison,
    NotComparable,
    SummaryPending,
    TooLargeToCompare,
)
from smrweb.tracking.models import Artifact, Submission, SubmissionStatus, SummaryStatus
from smrweb.tracking.services import summaries
from smrweb.tracking.services.artifacts import open_blob

DIFF_BYTES = preview.FULL_BYTES  # per side; past it a text diff is refused (download both instead)
APPROVED_ONCE = (SubmissionStatus.APPROVED, SubmissionStatus.UPLOADED, SubmissionStatus.RANKED)
AGAINST_CHOICES = ("approved", "best")
PICKER_LIMIT = 100  # the newest at the path, listed; any other is picked by its number
TOP_TENSORS = 10  # changed tensors shown per ONNX diff (the largest change first)


def read_head(artifact: Artifact, limit: int) -> bytes:
    """The artifact's first `limit + 1` bytes at most: one more than shown says whether there is more."""
    with open_blob(artifact.blob) as handle:
        return handle.read(limit + 1)


@dataclass(frozen=True)
class OnnxState:
    status: str  # SummaryStatus: pending | done | unreadable | too_large
    summary: dict | None = None
    reason: str = ""  # unreadable: why; too_large: which limit


def onnx_summary_of(artifact: Artifact) -> OnnxState:
    """The artifact's ONNX summary as a worker read it, or that it is being read (claimed and queued here
    the first time anyone asks)."""
    row = summaries.claimed_summary(artifact.blob, summaries.ONNX, onnx_summary.VERSION)
    return OnnxState(row.status, row.result if row.status == SummaryStatus.DONE else None, row.reason)


CACHE_SECONDS = 7 * 24 * 3600
CACHE_MAX_CHARS = 4_000_000  # highlighted HTML larger than this is rendered each time, not cached


def _cached(key: str, size: int, build):
    """`build()`, kept in the cache under `key` when it is small enough: a blob's bytes never change, so
    neither does what is drawn from them (lexing is the slow part: ~0.3 s per 100 KB of Python)."""
    found = softcache.get(key)
    if found is None:
        found = build()
        if size <= CACHE_MAX_CHARS:
            softcache.set(key, found, timeout=CACHE_SECONDS)
    return found


def artifact_preview(artifact: Artifact, *, more: bool = False) -> preview.Preview:
    limit = preview.FULL_BYTES if more else preview.PREVIEW_BYTES
    key = cachekeys.preview(artifact.blob.sha256, limit, artifact.path, artifact.kind, artifact.content_type)
    try:
        if preview.is_onnx(artifact.path, artifact.kind):  # not cached: may be pending; its summary's row is
            return _render_preview(artifact, limit)
        return _cached(key, min(artifact.blob.size, limit) * 5, lambda: _render_preview(artifact, limit))
    except ArtifactBytesMissing as exc:  # not cached: shown again until the bytes are back
        return preview.Preview(kind="missing", name=artifact.path, size=artifact.blob.size, note=exc.message)


def _render_preview(artifact: Artifact, limit: int) -> preview.Preview:
    state = OnnxState("")
    if preview.is_onnx(artifact.path, artifact.kind):
        head = read_head(artifact, preview.HEX_BYTES)  # first: missing bytes are said, not summarised
        state = onnx_summary_of(artifact)
    else:
        head = read_head(artifact, limit)
    return preview.render(
        head,
        name=artifact.path,
        size=artifact.blob.size,
        content_type=artifact.content_type,
        kind=artifact.kind,
        limit=limit,
        onnx_summary=state.summary,
        onnx_error=state.reason,
        onnx_status=state.status,
    )


def _stored(sub: Submission, role: str) -> Artifact:
    if sub.artifact is None:
        ref = f" (it names {sub.artifact_ref!r}, never uploaded)" if sub.artifact_ref else ""
        raise NotComparable(f"The {role} submission #{sub.pk} has no stored artifact{ref}.")
    return sub.artifact


def _rows(project_id: int):
    return Submission.objects.filter(project_id=project_id).select_related("run", "artifact__blob")


def comparison_target(sub: Submission, against: str | None) -> tuple[Submission, str]:
    """The submission to compare `sub` with, and how it was chosen (said on the page and in the API):
    "approved" (the latest approved — or since uploaded or ranked — submission at the same path before
    this one, else after it), "best" (the project's best other than this one: verified first, as the
    leaderboard counts it) or a submission id of the same project."""
    choice = (against or "approved").strip().lower()
    if choice == "approved":
        path = _stored(sub, "reviewed").path
        approved = (
            _rows(sub.project_id).filter(status__in=APPROVED_ONCE, artifact__path=path).exclude(pk=sub.pk)
        )
        before = Q(ts__lt=sub.ts) | Q(ts=sub.ts, pk__lt=sub.pk)
        other = approved.filter(before).order_by("-ts", "-id").first()
        if other is not None:
            return other, f"the previous approved submission at {path}"
        other = approved.order_by("-ts", "-id").first()
        if other is None:
            raise NoComparison(f"No approved submission at {path} to compare with yet.")
        return other, f"the latest approved submission at {path} (approved after this one)"
    if choice == "best":
        order = "-score" if sub.project.scenario.maximize else "score"
        rows = _rows(sub.project_id).exclude(pk=sub.pk)
        other = (
            rows.counted().order_by(order, "ts", "id").first()
            or rows.counted(unverified=True).order_by(order, "ts", "id").first()
        )
        if other is None:
            raise NoComparison("No other submission in this project counts towards its best yet.")
        return other, "the project's best submission" + ("" if other.is_verified else " (not verified yet)")
    if not choice.isdigit():
        raise InvalidInput("against", "Use approved, best or the id of a submission in this project.")
    other = _rows(sub.project_id).filter(pk=int(choice)).first()
    if other is None:
        raise NoComparison(f"No submission #{choice} in this project.")
    if other.pk == sub.pk:
        raise InvalidInput("against", "A submission compared with itself has no changes; pick another.")
    return other, f"submission #{other.pk}"


@dataclass
class Picker:
    choices: list[Submission]  # the newest PICKER_LIMIT at the path, and the one compared with if older
    total: int  # other submissions at the path

    @property
    def more(self) -> int:
        """How many at the path are not listed (picked by typing their number)."""
        return max(0, self.total - len(self.choices))


def picker_choices(sub: Submission, *, chosen: str | None = None) -> Picker:
    """Other submissions at the same path, newest first, for the page's "compare with" picker: the newest
    PICKER_LIMIT, plus `chosen` (a submission id typed in) when it is older, so it shows as selected."""
    if sub.artifact is None:
        return Picker([], 0)
    rows = _rows(sub.project_id).filter(artifact__path=sub.artifact.path).exclude(pk=sub.pk)
    choices = list(rows.order_by("-ts", "-id")[:PICKER_LIMIT])
    total = len(choices) if len(choices) < PICKER_LIMIT else rows.count()
    chosen = (chosen or "").strip()
    if chosen.isdigit() and int(chosen) != sub.pk and all(c.pk != int(chosen) for c in choices):
        picked = _rows(sub.project_id).filter(pk=int(chosen)).first()
        if picked is not None:
            choices.append(picked)
    return Picker(choices, total)


@dataclass
class ArtifactDiff:
    submission: Submission
    against: Submission
    reason: str
    mode: str  # "text" | "onnx" | "binary"
    text: textdiff.TextDiff
    structural: list[dict] = field(default_factory=list)  # ONNX: what changed, field by field
    note: str = ""
    weights: dict | None = None  # ONNX: the tensors compared (`_weights`)

    @property
    def old_blob(self):
        return self.against.artifact.blob

    @property
    def new_blob(self):
        return self.submission.artifact.blob

    @property
    def identical(self) -> bool:
        """The one rule: identical bytes, by digest. Equal text or an equal graph is not enough."""
        return self.old_blob.sha256 == self.new_blob.sha256

    @property
    def same_structure(self) -> bool | None:
        """ONNX: whether the graph summaries and the tensors' names, types and shapes are equal."""
        if self.mode != "onnx":
            return None
        w = self.weights or {}
        return not self.structural and not (w.get("added") or w.get("removed") or w.get("reshaped"))

    @property
    def headline(self) -> str:
        """What changed, in one line: the page's and the API's `summary`."""
        if self.identical:
            return "identical bytes"
        sha = f"sha256 {self.old_blob.sha256[:8]}… vs {self.new_blob.sha256[:8]}…"
        if self.mode == "binary":
            sizes = f"{_size(self.old_blob.size)} → {_size(self.new_blob.size)}"
            return f"bytes differ ({sha}, sizes {sizes})"
        if self.mode == "text":
            if self.text.identical:  # decoded alike: an encoding, a byte-order mark, line endings
                return f"same text, bytes differ ({sha}): encoding or line endings changed"
            return f"{self.text.added} line{pluralize(self.text.added)} added, {self.text.removed} removed"
        w = self.weights or {}
        if w.get("status") != "done":
            weights = f"weights not compared: {w.get('reason') or 'unknown'}"
        elif w.get("tensors_changed"):
            weights = "weights differ"
        else:
            weights = "same weights"
        if self.same_structure:
            if weights == "same weights":
                return f"same structure and weights, bytes differ ({sha}): names, attributes or metadata"
            return f"same structure, {weights} ({sha})"
        return f"structure differs, {weights} ({sha})"


def _size(n: int) -> str:
    return filesizeformat(n).replace("\xa0", " ")


def _weights(old: Artifact, new: Artifact, a: dict, b: dict) -> dict:
    """The tensors of two ONNX summaries compared (`onnx_summary.diff_tensors`) and, when some differ, the
    worker's element-by-element figures for the pair: `status` done | too_large | unreadable (`reason`),
    `added`, `removed`, `reshaped`, `tensors_changed`, `tensors_compared`, `parameters_compared`,
    `parameters_changed`, `max_abs_change`, `mean_abs_change`, `nonfinite_changes`, `tensors` (the
    TOP_TENSORS largest changes) and `more_tensors` (changed ones not listed). Raises SummaryPending while
    the worker compares."""
    found = onnx_summary.diff_tensors(a, b)
    weights = {
        "status": "done",
        "reason": "",
        "added": found["added"],
        "removed": found["removed"],
        "reshaped": found["reshaped"],
        "tensors_changed": len(found["changed"]),
        "tensors_compared": len(found["changed"]) + found["same"],
        "parameters_compared": 0,
        "parameters_changed": 0,
        "max_abs_change": 0.0,
        "mean_abs_change": 0.0,
        "nonfinite_changes": 0,
        "tensors": [],
        "more_tensors": 0,
    }
    if found["omitted"]:
        return weights | {"status": SummaryStatus.TOO_LARGE, "reason": found["omitted"]}
    if not found["changed"]:  # equal digests: nothing to read, every parameter unchanged
        shapes = {t["name"]: t["elements"] for t in b["tensors"]}
        same = [t["name"] for t in a["tensors"] if t["name"] in shapes]
        reshaped = {r["name"] for r in found["reshaped"]}
        weights["parameters_compared"] = sum(shapes[n] for n in same if n not in reshaped)
        return weights
    row = summaries.claimed_summary(old.blob, summaries.ONNX_WEIGHTS, onnx_summary.VERSION, other=new.blob)
    if row.status == SummaryStatus.PENDING:
        raise SummaryPending("The models' weights are being compared on a worker; ask again shortly.")
    if row.status != SummaryStatus.DONE:
        return weights | {"status": row.status, "reason": row.reason}
    figures = row.result
    return weights | {
        "tensors_changed": figures["tensors_changed"],
        "tensors_compared": figures["tensors_compared"],
        "parameters_compared": figures["elements_compared"],
        "parameters_changed": figures["elements_changed"],
        "max_abs_change": figures["max_abs_change"],
        "mean_abs_change": figures["mean_abs_change"],
        "nonfinite_changes": figures["nonfinite_changes"],
        "tensors": figures["tensors"][:TOP_TENSORS],
        "more_tensors": max(0, figures["tensors_changed"] - TOP_TENSORS),
    }


def summary_lines(summary: dict) -> list[str]:
    """An ONNX summary as stable lines of text, so two summaries diff like two files."""
    lines = [
        f"producer: {summary.get('producer') or '—'}",
        f"ir_version: {summary.get('ir_version')}",
    ]
    lines += [f"opset {domain or 'ai.onnx'}: {v}" for domain, v in sorted(summary.get("opsets", {}).items())]
    for kind in ("inputs", "outputs"):
        for io in summary.get(kind, []):
            lines.append(f"{kind[:-1]} {io.get('name')}: {io.get('type')} {io.get('shape')}")
    lines.append(f"parameters: {summary.get('parameters', 0):,}")
    lines.append(f"nodes: {summary.get('nodes', 0):,}")
    lines += [f"op {op}: {n}" for op, n in sorted(summary.get("operators", {}).items())]
    lines += [
        f"tensor {t['name']}: {t['dtype']}{t['shape']} sha256 {t['sha256'][:12] or '(external)'}"
        for t in summary.get("tensors") or []
    ]
    return lines


def _decoded(artifact: Artifact, role: str) -> str | None:
    if artifact.blob.size > DIFF_BYTES:
        raise NotComparable(
            f"The {role} artifact is {artifact.blob.size:,} bytes, over the {DIFF_BYTES:,}-byte diff "
            "limit: download both to compare them."
        )
    return preview.decode_text(read_head(artifact, DIFF_BYTES), truncated=False)


def _highlighted(artifact: Artifact, text: str) -> list[str]:
    key = cachekeys.highlighted(artifact.blob.sha256, artifact.path, artifact.content_type)
    lexer = preview.lexer_for(artifact.path, artifact.content_type)
    return _cached(key, len(text) * 5, lambda: preview.highlight_lines(text, lexer))


def artifact_diff(sub: Submission, against: str | None, *, highlight: bool = False) -> ArtifactDiff:
    """`sub`'s artifact against the one `against` chooses; with `highlight`, each row's lines carry
    Pygments markup (for pages; the API reads the unified text and the counts)."""
    other, reason = comparison_target(sub, against)
    new, old = _stored(sub, "reviewed"), _stored(other, "compared")
    names = {"old_name": f"#{other.pk}/{old.path}", "new_name": f"#{sub.pk}/{new.path}"}
    onnx = preview.is_onnx(new.path, new.kind) and preview.is_onnx(old.path, old.kind)
    if old.blob.sha256 == new.blob.sha256:  # the one rule, first: equal digests, and only they, are equal
        mode = "onnx" if onnx else "text"
        return ArtifactDiff(sub, other, reason, mode, textdiff.diff("", "", **names), note="Identical bytes.")
    if onnx:
        a, b = onnx_summary_of(old), onnx_summary_of(new)
        for state in (a, b):  # a side that will never have a summary is said at once
            if state.status == SummaryStatus.TOO_LARGE:
                raise TooLargeToCompare(f"An ONNX model is too large to summarise: {state.reason}.")
            if state.status == SummaryStatus.UNREADABLE:
                raise NotComparable(f"An ONNX model could not be read: {state.reason}")
        if a.summary is None or b.summary is None:
            raise SummaryPending("The models are being summarised on a worker; ask again shortly.")
        lines_a, lines_b = summary_lines(a.summary), summary_lines(b.summary)
        try:
            text = textdiff.diff("\n".join(lines_a), "\n".join(lines_b), **names)
        except textdiff.TooLarge as exc:  # red-team N8: was a 500
            raise TooLargeToCompare(
                f"The models' summaries are too large to diff here ({exc}): download both to compare them."
            ) from exc
        structural = onnx_summary.diff_summaries(a.summary, b.summary)
        weights = _weights(old, new, a.summary, b.summary)
        return ArtifactDiff(sub, other, reason, "onnx", text, structural, weights=weights)
    a_text, b_text = _decoded(old, "compared"), _decoded(new, "reviewed")
    if a_text is None or b_text is None:
        text = textdiff.TextDiff(f"Binary files {names['old_name']} and {names['new_name']} differ\n", 0, 0)
        note = "Binary content of a kind not compared here: download both to compare them."
        return ArtifactDiff(sub, other, reason, "binary", text, note=note)
    html = {}
    if highlight:
        html = {"old_html": _highlighted(old, a_text), "new_html": _highlighted(new, b_text)}
    try:
        text = textdiff.diff(a_text, b_text, **names, **html)
    except textdiff.TooLarge as exc:
        raise NotComparable(f"Too large to diff here ({exc}): download both to compare them.") from exc
    return ArtifactDiff(sub, other, reason, "text", text)
