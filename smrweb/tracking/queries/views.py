"""The runs table's chosen columns (`?col=`) and the saved views people can open.

A column is a run's param or tag value, the last, lowest or highest value of a logged metric (read off the
metric rollup's whole-series row, so a column costs one indexed lookup per run, whatever the number of
points), or a part of its spend. Each column is one subquery or expression of the runs query itself: a
page reads its runs in one query however many columns it shows, and sorts on any of them in SQL (a
param's or tag's numbers in number order, the rest as text after them)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.db.models import (
    Case,
    CharField,
    ExpressionWrapper,
    F,
    FloatField,
    OuterRef,
    PositiveBigIntegerField,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Cast

from smrweb.tracking.models import MetricRollup, Project, RunParam, RunTag, SavedView
from smrweb.tracking.queries import budget

MAX_COLUMNS = 12
KEYS_SHOWN = 200  # per kind, in the add-a-column menu (any key can still be typed into `?col=`)
KEY_MAX = 250
# A param's or tag's value read as a number where it is one (so 0.003 < 0.01 < 0.1 and 9 < 10): the text
# form of a finite decimal, as a harness writes it.
NUMBER_RE = r"^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$"
STATS = {"last": "last_value", "min": "low", "max": "high"}
STAT_WORDS = {"last": "last", "min": "lowest", "max": "highest"}


def _tokens(*fields: str):
    total = F(fields[0])
    for field in fields[1:]:
        total = total + F(field)
    return ExpressionWrapper(total, output_field=PositiveBigIntegerField())


# spend:<part> — what each part is, how it reads and how it is written (usd, tokens, count).
SPEND = {
    "usd": ("Spend USD (all)", budget.spend_usd, "usd"),
    "driver_usd": ("Driver USD", lambda: F("driver_cost_usd"), "usd"),
    "child_usd": ("Child USD", lambda: F("child_cost_usd"), "usd"),
    "other_usd": ("Other meters USD", lambda: F("other_meters_usd"), "usd"),
    "source_usd": ("Billed by source USD", lambda: F("source_total_usd"), "usd"),
    "tokens": ("Tokens (all)", budget.spend_tokens, "tokens"),
    "tokens_in": ("Tokens in", lambda: F("tokens_in"), "tokens"),
    "tokens_out": ("Tokens out", lambda: F("tokens_out"), "tokens"),
    "driver_tokens": ("Driver tokens", lambda: _tokens("driver_tokens_in", "driver_tokens_out"), "tokens"),
    "child_tokens": ("Child tokens", lambda: _tokens("child_tokens_in", "child_tokens_out"), "tokens"),
    "failed_calls": ("Failed calls", lambda: F("failed_turns"), "count"),
    "unpriced_turns": ("Unpriced turns", lambda: F("unpriced_turns"), "count"),
}


class ColumnError(ValueError):
    field = "col"


@dataclass(frozen=True)
class Column:
    spec: str  # as written in `?col=`: param:KEY, tag:KEY, metric:KEY[:last|min|max], spend:PART
    kind: str
    key: str
    stat: str = ""

    @property
    def alias(self) -> str:
        """The column's name in the runs query (any key spells a valid, distinct SQL name)."""
        return "col_" + hashlib.sha1(self.spec.encode()).hexdigest()[:12]  # noqa: S324 (a name, not a secret)

    @property
    def label(self) -> str:
        if self.kind == "spend":
            return SPEND[self.key][0]
        if self.kind == "metric":
            return self.key if self.stat == "last" else f"{self.key} ({STAT_WORDS[self.stat]})"
        return self.key

    @property
    def what(self) -> str:
        """The header's tooltip: where the values come from."""
        if self.kind == "spend":
            return f"{SPEND[self.key][0]}: from the run's spend summary"
        if self.kind == "metric":
            return f"The {STAT_WORDS[self.stat]} value the run logged for the metric {self.key}"
        return f"The run's {self.kind} {self.key}"

    @property
    def format(self) -> str:
        """How a cell is written: text (params, tags), number (metrics), usd, tokens or count (spend)."""
        if self.kind == "spend":
            return SPEND[self.key][2]
        return "number" if self.kind == "metric" else "text"

    def plain(self, value):
        """The value as the API writes it: USD as decimal text (as `spend`), the rest as read."""
        if value is not None and self.format == "usd":
            return str(value)
        return value

    def expression(self):
        if self.kind == "spend":
            return SPEND[self.key][1]()
        if self.kind == "metric":
            rows = MetricRollup.objects.filter(run=OuterRef("pk"), key=self.key, width=0, bucket=0)
            return Subquery(rows.values(STATS[self.stat])[:1], output_field=FloatField())
        model = RunParam if self.kind == "param" else RunTag
        return Subquery(model.objects.filter(run=OuterRef("pk"), key=self.key).values("value")[:1])

    def order(self, descending: bool) -> list:
        """What `ORDER BY` this column means: a param's or tag's numbers first, in number order, then the
        rest as text; runs without a value last either way."""
        value = F(self.alias)
        if self.format != "text":
            return [value.desc(nulls_last=True) if descending else value.asc(nulls_last=True)]
        # Descending is ascending reversed (text first, then the numbers from the largest), with the runs
        # that have no value at all still last.
        missing = Case(When(Q(**{f"{self.alias}__isnull": True}), then=Value(1)), default=Value(0))
        number = Case(When(Q(**{f"{self.alias}__regex": NUMBER_RE}), then=Cast(self.alias, FloatField())))
        if descending:
            return [missing.asc(), number.desc(nulls_first=True), value.desc()]
        return [missing.asc(), number.asc(nulls_last=True), value.asc()]


def parse_column(text: str) -> Column:
    """A column from its spec, or ColumnError saying what is wrong and what is possible."""
    text = (text or "").strip()
    kind, sep, rest = text.partition(":")
    rest = rest.strip()
    if not sep or kind not in ("param", "tag", "metric", "spend"):
        raise ColumnError(
            f"Unknown column {text[:80]!r}: param:KEY, tag:KEY, metric:KEY (or metric:KEY:min, :max, :last) "
            f"or spend:PART."
        )
    if kind == "spend":
        if rest not in SPEND:
            raise ColumnError(f"Unknown spend part {rest[:80]!r}: one of {', '.join(SPEND)}.")
        return Column(f"spend:{rest}", "spend", rest)
    stat = ""
    if kind == "metric":
        key, colon, last = rest.rpartition(":")
        if colon and last in STATS:
            rest, stat = key.strip(), last
        stat = stat or "last"
    if not rest:
        raise ColumnError(f"A {kind} column names its key: {kind}:KEY.")
    if len(rest) > KEY_MAX or any(ord(c) < 32 for c in rest):
        raise ColumnError(f"A {kind} key is at most {KEY_MAX} printable characters.")
    spec = f"{kind}:{rest}" + (f":{stat}" if stat and stat != "last" else "")
    return Column(spec, kind, rest, stat)


def parse_columns(texts: list[str]) -> list[Column]:
    """The columns in their order, each once; ColumnError past MAX_COLUMNS or on one that does not read."""
    columns = list({c.spec: c for c in (parse_column(t) for t in texts if t.strip())}.values())
    if len(columns) > MAX_COLUMNS:
        raise ColumnError(f"At most {MAX_COLUMNS} columns (this asks for {len(columns)}).")
    return columns


def with_columns(queryset, columns: list[Column]):
    """The runs with each column's value read in the same query (as `run.<column.alias>`)."""
    missing = {c.alias: c.expression() for c in columns if c.alias not in queryset.query.annotations}
    return queryset.annotate(**missing) if missing else queryset


def cells(run, columns: list[Column]) -> list[tuple[Column, object]]:
    """A row's cells: each column with the run's value (read by `with_columns`)."""
    return [(c, getattr(run, c.alias, None)) for c in columns]


def available(project: Project) -> dict[str, list[tuple[str, str]]]:
    """What the project's runs could show as columns, (spec, label) per kind: the params, tags and metrics
    any run has (one query: the three kinds of key over their indexes, as one union), and the spend parts."""
    runs = project.runs.values("pk")

    def keys(model, kind: str, **only):
        rows = model.objects.filter(run__in=runs, **only).annotate(kind=Value(kind, output_field=CharField()))
        return rows.values_list("kind", "key").order_by()

    found: dict[str, list[str]] = {"param": [], "tag": [], "metric": []}
    union = keys(RunParam, "param").union(
        keys(RunTag, "tag"), keys(MetricRollup, "metric", width=0, bucket=0)
    )
    for kind, key in sorted(union):
        if len(found[kind]) < KEYS_SHOWN:
            found[kind].append(key)
    metric_rows = []
    for key in found["metric"]:
        metric_rows += [(f"metric:{key}", f"{key} (last)"), (f"metric:{key}:min", f"{key} (lowest)")]
        metric_rows.append((f"metric:{key}:max", f"{key} (highest)"))
    return {
        "param": [(f"param:{k}", k) for k in found["param"]],
        "tag": [(f"tag:{k}", k) for k in found["tag"]],
        "metric": metric_rows,
        "spend": [(f"spend:{k}", label) for k, (label, _, _) in SPEND.items()],
    }


# --- saved views ------------------------------------------------------------------------------------------


def saved_views(project: Project, user) -> list[SavedView]:
    """The views of the project `user` may open: shared ones and their own, by name."""
    return list(SavedView.objects.filter(project=project).visible_to(user).select_related("owner"))


def find_view(project: Project, user, ident) -> SavedView | None:
    """The view `ident` (its id) of the project if `user` may open it; None otherwise (a private view of
    someone else reads exactly like one that does not exist)."""
    try:
        pk = int(str(ident).strip())
    except (TypeError, ValueError):
        return None
    return SavedView.objects.filter(project=project, pk=pk).visible_to(user).select_related("owner").first()
