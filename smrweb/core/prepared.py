"""A query a live poll runs after every change, compiled once per process.

Building and compiling an ORM query is ~0.2–0.5 ms of Python (the turns a run's aggregates advance by
after each turn, a project poll's changed runs with their markers); running it on its index is ~0.02 ms.
A `Prepared` query keeps the SQL Django compiled for it and the compiler that converts its rows as the
ORM does; each run passes new values for its parameters. Its parameters are ids (integers) and moments
(datetimes): compiled once with stand-in values, which are found among the compiled query's parameters
and replaced on each run by the values given, adapted as the ORM adapts them. The rows' converters are
the compiling request's (they read no connection state a thread owns); the cursor is the running thread's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from django.db import connections
from django.db.models import Model, QuerySet

# Stand-ins no id or moment takes: each is where the query's own parameter went (and only there).
_STAND_INS = {
    int: tuple(-(7**21) - n for n in range(8)),
    datetime: tuple(datetime(1901, 2, 3, 4, 5, 6, n + 1, tzinfo=UTC) for n in range(8)),
}


class Prepared:
    """`build(*values)` -> a queryset whose parameters include those values, as given (no expression of
    them), of the `kinds` given (int or datetime, in order). `rows(*values)` gives what `list(build(…))`
    gives for a `values_list` queryset; `instances(*values)` what it gives for a queryset of models (no
    `select_related`: the model's own columns and annotations)."""

    def __init__(self, build: Callable[..., QuerySet], *kinds: type) -> None:
        if not set(kinds) <= set(_STAND_INS):
            raise TypeError(f"ids (int) and moments (datetime) only, not {kinds!r}")
        self.build, self.kinds = build, kinds
        # (compiler, sql, parameters, slots): two threads may both make it, either is right.
        self._compiled: tuple | None = None

    def rows(self, *values) -> list[tuple]:
        compiler, found = self._run(values)
        return list(compiler.results_iter(results=[found], tuple_expected=True))

    def instances(self, *values) -> list[Model]:
        compiler, found = self._run(values)
        info, select = compiler.klass_info, compiler.select
        if info is None or info.get("related_klass_infos"):
            raise ValueError("instances() reads a model's own columns only (no values(), no select_related)")
        start, end = info["select_fields"][0], info["select_fields"][-1] + 1
        names = [column[0].target.attname for column in select[start:end]]
        out = []
        for row in compiler.results_iter(results=[found]):
            instance = info["model"].from_db(compiler.using, names, row[start:end])
            for name, position in compiler.annotation_col_map.items():
                setattr(instance, name, row[position])
            out.append(instance)
        return out

    def _run(self, values: tuple) -> tuple:
        if len(values) != len(self.kinds) or not all(
            type(v) is kind if kind is int else isinstance(v, kind) for v, kind in zip(values, self.kinds)
        ):
            raise TypeError(f"{[k.__name__ for k in self.kinds]} expected, got {values!r}")
        compiler, sql, params, slots = self._compiled or self._compile()
        connection = connections[compiler.using]
        adapted = [
            connection.ops.adapt_datetimefield_value(v) if kind is datetime else v
            for v, kind in zip(values, self.kinds)
        ]
        params = list(params)
        for position, which in slots:
            params[position] = adapted[which]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return compiler, cursor.fetchall()

    def _stand_ins(self) -> list:
        taken = {kind: iter(values) for kind, values in _STAND_INS.items()}
        return [next(taken[kind]) for kind in self.kinds]

    def _compile(self) -> tuple:
        stand_ins = self._stand_ins()
        queryset = self.build(*stand_ins)
        compiler = queryset.query.get_compiler(queryset.db)
        sql, params = compiler.as_sql()
        ops = connections[compiler.using].ops
        adapted = [
            ops.adapt_datetimefield_value(v) if kind is datetime else v
            for v, kind in zip(stand_ins, self.kinds)
        ]
        slots = tuple(
            (i, adapted.index(p)) for i, p in enumerate(params) if type(p) is not bool and p in adapted
        )
        if {which for _, which in slots} != set(range(len(self.kinds))):
            raise ValueError(f"{queryset.query}: not every value is one of the query's parameters")
        self._compiled = (compiler, sql, tuple(params), slots)
        return self._compiled
