"""Project backups: one self-contained archive per project, restored exactly (docs/backup.md).

An archive is a zip file:

    manifest.json            format and version, the project's slug, rows per table, and the sha256
                             and size of every other member
    data/<table>.jsonl       one JSON object per row; `data/user.jsonl` the users the rows name
    blobs/<sha256>           the bytes of every artifact of the project, named by their digest

Rows point at each other by archive-local numbers (`ref`), at users by username, at the scenario by
key and at blobs by digest: no primary key of the exporting database means anything in the archive,
and an import re-maps every foreign key.

Export reads one snapshot of the database, streaming every table in chunks (`.iterator()`), so a
project with millions of metric points never sits in memory. Import verifies the whole archive
(manifest, every member's sha256, every blob's bytes against its name) before it writes anything,
then writes in one transaction with `bulk_create` in chunks. Blob bytes go to storage under their
digest as `services.save_blob` stores them; the ones an import wrote are deleted again if it fails.

Modules: `tables` (what an archive holds), `export`, `archive` (reading and checking one), `restore`.
"""

from smrweb.tracking.backup.export import _Exporter, export_project  # noqa: F401
from smrweb.tracking.backup.restore import ImportResult, import_project  # noqa: F401
from smrweb.tracking.backup.tables import MANIFEST, TABLES, BackupError, default_archive_name  # noqa: F401
