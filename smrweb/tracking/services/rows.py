"""Many new rows of one model in few statements, for the write paths' hot tables (agent turns, log
lines): what `bulk_create` does without its compiler's per-column, per-row work (a turn row has 21
columns; that work was most of a batch's turn cost, and most of a 5,000-line log push's).

Values go to the driver as given: the caller prepares dates, decimals and JSON with their fields'
`get_db_prep_save` (`prepared_values` does it for model instances). On SQLite a multi-row
`INSERT … VALUES` per chunk within its limit on bound parameters; on PostgreSQL one array per column
through `UNNEST`, as Django's own bulk insert does there (a statement of thousands of placeholders costs
psycopg more to split, in Python, than the insert costs the server)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

from django.db import connection

SQLITE_PARAMETERS = 999  # SQLite's default limit on bound parameters before 3.32
PG_ROWS = 5000  # rows a statement on PostgreSQL (parameters are one array per column)

# Column types whose values the field prepares (the rest go to the driver as they are).
_PREPARED_TYPES = frozenset({"DateTimeField", "DateField", "DecimalField", "JSONField"})


def insert_rows(
    model, columns: Sequence[str], rows: Sequence[tuple], *, returning: bool = False
) -> list[int]:
    """INSERT `rows` (tuples in the order of `columns`, field names or attnames) into `model`'s table;
    with `returning`, the new ids in row order (as `bulk_create` reads them), else []."""
    fields = tuple(model._meta.get_field(c) for c in columns)
    names = tuple(f.column for f in fields)
    ids: list[int] = []
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # varchar[], not varchar(200)[]: a cast to the sized type would cut a value, not refuse it.
            types = tuple(f.db_type(connection).split("(")[0] for f in fields)
            for start in range(0, len(rows), PG_ROWS):
                chunk = rows[start : start + PG_ROWS]
                cursor.execute(_unnest_sql(model, names, types, returning), [list(c) for c in zip(*chunk)])
                if returning:
                    ids += [pk for (pk,) in cursor.fetchall()]
            return ids
        size = max(1, min(1000, SQLITE_PARAMETERS // len(names)))
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            cursor.execute(_values_sql(model, names, len(chunk), returning), [v for r in chunk for v in r])
            if returning:
                ids += [pk for (pk,) in cursor.fetchall()]
    return ids


def write_instances(objs: list) -> None:
    """INSERT unsaved instances of one model and set their ids, as `bulk_create` would."""
    if not objs:
        return
    model = type(objs[0])
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    if any(getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False) for f in fields):
        raise ValueError(f"{model.__name__}: fields set on save (auto_now) need bulk_create")
    prepared = [f for f in fields if f.get_internal_type() in _PREPARED_TYPES]
    plain = [f for f in fields if f not in prepared]
    take = operator.attrgetter(*(f.attname for f in plain))
    rows = [
        (*take(obj), *(f.get_db_prep_save(getattr(obj, f.attname), connection) for f in prepared))
        for obj in objs
    ]
    columns = (*(f.attname for f in plain), *(f.attname for f in prepared))
    for obj, pk in zip(objs, insert_rows(model, columns, rows, returning=True), strict=True):
        obj.pk = pk
        obj._state.adding, obj._state.db = False, connection.alias


def _returning(model, returning: bool) -> str:
    return f" RETURNING {connection.ops.quote_name(model._meta.pk.column)}" if returning else ""


@functools.cache
def _values_sql(model, columns: tuple[str, ...], rows: int, returning: bool) -> str:
    q = connection.ops.quote_name
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return (
        f"INSERT INTO {q(model._meta.db_table)} ({', '.join(q(c) for c in columns)}) "
        f"VALUES {', '.join([one] * rows)}{_returning(model, returning)}"
    )


@functools.cache
def _unnest_sql(model, columns: tuple[str, ...], types: tuple[str, ...], returning: bool) -> str:
    q = connection.ops.quote_name
    arrays = ", ".join(f"(%s)::{t}[]" for t in types)
    return (
        f"INSERT INTO {q(model._meta.db_table)} ({', '.join(q(c) for c in columns)}) "
        f"SELECT * FROM UNNEST({arrays}){_returning(model, returning)}"
    )
