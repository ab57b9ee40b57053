"""Run log archives (`GET /smr/projects/{pid}/runs/{rid}/logs/archives`). The world makes none by itself
(so the other nouns' wire answers stay as they were); a test or a demo adds them with
`add_log_archive`, in the spec's shape (`log_archive_entry`) or any other a backend might answer with,
and `store_log_file` serves an archive's bytes at `/smr/artifacts/{id}/content` (an artifact of the run
that is not in its manifest, as a backend keeps log sessions apart from outputs)."""

from __future__ import annotations

import copy
from typing import Any

from smrweb.simulator.world.state import SimRun
from smrweb.simulator.world.wireformat import iso


class LogsMixin:
    def store_log_file(
        self, run_id: str, content: bytes, *, content_type: str = "text/plain"
    ) -> dict[str, str]:
        """Serve `content` as an artifact of the run: {"artifact_id", "path"} (the path is the URL path)."""
        with self.lock:
            run = self.get_run(run_id)
            artifact_id = f"log-{run_id}-{len(self.log_files) + 1}"
            artifact = self._artifact_record(
                run,
                artifact_id,
                content,
                artifact_type="log_archive",
                title=f"{artifact_id}.log",
                path=f"logs/{artifact_id}",
                content_type=content_type,
                created_at=self.tick_time(),
            )
            self.log_files.append(artifact_id)
            return {"artifact_id": artifact_id, "path": artifact["content_url"]}

    def log_archive_entry(self, run_id: str, log_archive_id: str, **fields: Any) -> dict[str, Any]:
        """An entry in the spec's shape (`SmrRunLogArchiveResponse`), its required fields filled."""
        run = self.get_run(run_id)
        return {
            "log_archive_id": log_archive_id,
            "org_id": self.org_id,
            "project_id": run.project_id,
            "run_id": run.run_id,
            "storage_backend": "s3",
            "record_count": 0,
            "session_count": 1,
            "truncated": False,
            "metadata": {},
            "created_at": iso(self.tick_time()),
            **fields,
        }

    def add_log_archive(self, run_id: str, entry: Any) -> None:
        """List `entry` (any JSON value: backends differ) among the run's log archives."""
        with self.lock:
            self.get_run(run_id)
            self.log_archives.setdefault(run_id, []).append(copy.deepcopy(entry))

    def log_archives_wire(self, run: SimRun) -> list[Any]:
        return copy.deepcopy(self.log_archives.get(run.run_id, []))
