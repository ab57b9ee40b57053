"""PostgreSQL: MetricPoint's foreign key to its run checked once per statement instead of once per row.

The built-in constraint runs one `SELECT 1 FROM tracking_run … FOR KEY SHARE` per inserted point at
commit: most of PostgreSQL's time for a 5,000-point batch (measured: ~60 of ~100 ms). These triggers
enforce the same rule with one query per statement, over the statement's transition table:

- a point inserted or updated must name an existing run (the run is locked FOR KEY SHARE, as the
  built-in check locks it, so a concurrent delete of the run waits, then fails on the points);
- a run may not be deleted (nor its id changed) while points name it.

Violations raise SQLSTATE 23503 (foreign_key_violation), Django's IntegrityError, as before. The checks
are immediate (at the end of the statement), where the built-in one was deferred to commit: every writer
already inserts points after their run and deletes them before it. The model still declares the foreign
key (Django's collector still cascades, SQLite keeps its constraint); on PostgreSQL the constraint itself
is these triggers, so a later migration that alters MetricPoint.run must drop them and restore it first
(the reverse of this migration).
"""

from django.db import migrations

_FUNCTIONS = """
CREATE FUNCTION smrweb_metricpoint_run_exists() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing bigint;
BEGIN
    SELECT n.run_id INTO missing FROM (SELECT DISTINCT run_id FROM new_points) n
    WHERE NOT EXISTS (SELECT 1 FROM tracking_run r WHERE r.id = n.run_id FOR KEY SHARE OF r)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'insert or update on table "tracking_metricpoint" violates foreign key constraint '
            '"smrweb_metricpoint_run_fk"'
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (run_id)=(%s) is not present in table "tracking_run".', missing);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION smrweb_run_without_points() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    held bigint;
BEGIN
    SELECT o.id INTO held FROM old_runs o
    WHERE EXISTS (SELECT 1 FROM tracking_metricpoint m WHERE m.run_id = o.id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'update or delete on table "tracking_run" violates foreign key constraint '
            '"smrweb_metricpoint_run_fk" on table "tracking_metricpoint"'
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (id)=(%s) is still referenced from table "tracking_metricpoint".', held);
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION smrweb_run_id_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM tracking_metricpoint m WHERE m.run_id = OLD.id) THEN
        RAISE EXCEPTION 'update or delete on table "tracking_run" violates foreign key constraint '
            '"smrweb_metricpoint_run_fk" on table "tracking_metricpoint"'
            USING ERRCODE = 'foreign_key_violation',
                  DETAIL = format('Key (id)=(%s) is still referenced from table "tracking_metricpoint".', OLD.id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER smrweb_metricpoint_run_insert AFTER INSERT ON tracking_metricpoint
    REFERENCING NEW TABLE AS new_points FOR EACH STATEMENT EXECUTE FUNCTION smrweb_metricpoint_run_exists();
CREATE TRIGGER smrweb_metricpoint_run_update AFTER UPDATE ON tracking_metricpoint
    REFERENCING NEW TABLE AS new_points FOR EACH STATEMENT EXECUTE FUNCTION smrweb_metricpoint_run_exists();
CREATE TRIGGER smrweb_run_delete_points AFTER DELETE ON tracking_run
    REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT EXECUTE FUNCTION smrweb_run_without_points();
CREATE TRIGGER smrweb_run_id_points AFTER UPDATE OF id ON tracking_run
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id) EXECUTE FUNCTION smrweb_run_id_changed();
"""

_DROP = """
DROP TRIGGER IF EXISTS smrweb_metricpoint_run_insert ON tracking_metricpoint;
DROP TRIGGER IF EXISTS smrweb_metricpoint_run_update ON tracking_metricpoint;
DROP TRIGGER IF EXISTS smrweb_run_delete_points ON tracking_run;
DROP TRIGGER IF EXISTS smrweb_run_id_points ON tracking_run;
DROP FUNCTION IF EXISTS smrweb_metricpoint_run_exists();
DROP FUNCTION IF EXISTS smrweb_run_without_points();
DROP FUNCTION IF EXISTS smrweb_run_id_changed();
"""


def _builtin_fk_names(schema_editor) -> list[str]:
    with schema_editor.connection.cursor() as cursor:
        constraints = schema_editor.connection.introspection.get_constraints(cursor, "tracking_metricpoint")
    return [
        name
        for name, c in constraints.items()
        if c["foreign_key"] == ("tracking_run", "id") and c["columns"] == ["run_id"]
    ]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite keeps its own per-row check, which costs little there
    for name in _builtin_fk_names(schema_editor):
        schema_editor.execute(f'ALTER TABLE tracking_metricpoint DROP CONSTRAINT "{name}"')
    schema_editor.execute(_FUNCTIONS, None)  # (no parameters: its %s are format()'s)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(_DROP, None)
    if not _builtin_fk_names(schema_editor):
        schema_editor.execute(
            'ALTER TABLE tracking_metricpoint ADD CONSTRAINT "tracking_metricpoint_run_id_3baab4e6_fk_tracking_run_id" '
            "FOREIGN KEY (run_id) REFERENCES tracking_run (id) DEFERRABLE INITIALLY DEFERRED"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("tracking", "0018_turn_rollup"),
    ]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
