"""Artifact bytes pulled from an SMR backend are capped (SMRWEB_MAX_ARTIFACT_BYTES; a log archive's at
SMRWEB_LOG_ARCHIVE_MAX_BYTES) while they stream: an artifact listed past the cap is not requested, one whose
listing understates its size is given up at the cap, not read whole (the SDK's own call reads a body whole
and base64s it), and the run's fault says which artifact and why. Against the simulator over real HTTP,
and a local server that streams without a Content-Length and counts what it got to send."""

from __future__ import annotations

import http.server
import threading

from smrweb.sources import sync
from smrweb.sources.smr import SmrConnector
from smrweb.tracking.models import Artifact, Run
from tests.sources.smr_project import bind_to, synced

API_KEY, PID = "cap-key", "cap-proj"


def test_an_artifact_past_the_cap_is_not_pulled_and_the_run_says_which(start_sim, alice, settings):
    settings.SMRWEB_SMR_RUN_REFRESH_SECONDS = 0
    backend = start_sim(api_key=API_KEY, project_ids=[PID], runs=1, auto_tick=False, seed=5, warmup=20)
    project = bind_to(backend, alice, slug="cap", smr_project=PID, api_key=API_KEY)
    synced(project)
    run = Run.objects.get(project=project)
    pulled_before = Artifact.objects.filter(run=run).count()
    settings.SMRWEB_MAX_ARTIFACT_BYTES = 50_000
    listed = backend.world.add_run_artifact(run.external_id, "ckpt/big.bin", b"b" * 60_000)

    report = sync.sync_project(project, owner="test")
    assert report.error.startswith("quota:") and listed["artifact_id"] in report.error
    assert "60000 bytes listed past SMRWEB_MAX_ARTIFACT_BYTES (50000): not pulled" in report.error
    assert backend.stats.snapshot()["content_requests"].get(listed["artifact_id"]) is None  # never asked
    run.refresh_from_db()
    assert listed["artifact_id"] in run.source_cursor["fault"]["message"]
    assert Artifact.objects.filter(run=run).count() == pulled_before

    # A listing that understates the size: asked for, given up at the cap (the answer's Content-Length).
    backend.world.artifacts.pop(listed["artifact_id"])
    backend.world.get_run(run.external_id).artifacts.remove(
        next(a for a in backend.world.get_run(run.external_id).artifacts if a["path"] == "ckpt/big.bin")
    )
    lying = backend.world.add_run_artifact(run.external_id, "ckpt/lying.bin", b"l" * 60_000, size_bytes=10)
    report = sync.sync_project(project, owner="test")
    assert backend.stats.snapshot()["content_requests"][lying["artifact_id"]] == 1
    assert "its bytes run past SMRWEB_MAX_ARTIFACT_BYTES (50000): not pulled" in report.error
    assert not Artifact.objects.filter(run=run, path="ckpt/lying.bin").exists()

    # Within the cap again (an operator raised it): pulled, stored, the fault gone.
    settings.SMRWEB_MAX_ARTIFACT_BYTES = 100_000
    synced(project)
    assert Artifact.objects.get(run=run, path="ckpt/lying.bin").blob.size == 60_000
    run.refresh_from_db()
    assert "fault" not in run.source_cursor


class _Endless(http.server.BaseHTTPRequestHandler):
    """Streams 64 MB of artifact bytes in chunks without a Content-Length, counting what it got to send
    before the client hung up."""

    sent = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b"z" * 65536
        try:
            for _ in range(1024):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                type(self).sent += len(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


def test_bytes_without_a_length_are_given_up_at_the_cap_not_read_whole(project):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        connector = SmrConnector(
            project, api_key="k", backend_base=f"http://127.0.0.1:{server.server_address[1]}"
        )
        assert connector.artifact_bytes("artifact content", "a-1", 1_000_000) is None
        assert connector.artifact_bytes("artifact content", "a-1", 100 * 1024 * 1024) == b"z" * (64 << 20)
    finally:
        server.shutdown()
        server.server_close()
    # The first read stopped a little past 1 MB: what the server got to send is its socket buffers' worth
    # beyond that, not 64 MB (the second read took all 64 MB).
    assert _Endless.sent < (64 << 20) + 16 * (1 << 20)
