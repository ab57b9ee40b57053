"""SMR run log archives, against the simulator over real HTTP: each archive read once through the log
write path (batch id `smr:<key>`), in the shapes a backend may answer with (the spec's entry with an
artifact, download URLs, relative URLs, inline lines and content; gzip or plain; JSON lines or text),
and what cannot be read recorded with why and counted on the run, never dropped silently. A URL on
another origin is never fetched (SSRF); a transient fault is retried next cycle; a finished run's
archives are read on its last sync."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from smrweb.sources import smr_logs
from smrweb.tracking.models import LogLevel, LogSource, Run, RunLogBatch, RunLogLine
from tests.sources.smr_project import bind_to, simulator_factory, synced

API_KEY, PID = "logs-key", "logs-proj"
CONTENT = "GET /smr/artifacts/{artifact_id}/content"
ARCHIVES = "GET /smr/projects/{project_id}/runs/{run_id}/logs/archives"


@pytest.fixture
def sim(start_sim):
    return simulator_factory(
        start_sim, api_key=API_KEY, project_ids=[PID], runs=2, auto_tick=False, seed=3, warmup=20
    )


@pytest.fixture
def every_sync_reads_whole(settings):
    settings.SMRWEB_SMR_RUN_REFRESH_SECONDS = 0  # no cheap "unchanged" skip between two syncs here


def lines_of(run: Run) -> list[tuple[int, str, str, str]]:
    return list(
        RunLogLine.objects.filter(run=run).order_by("seq").values_list("level", "stream", "text", "source")
    )


def live_run(backend, project) -> Run:
    state = backend.world.state()["projects"][PID]["runs"]
    rid = next(r["run_id"] for r in state if r["state"] not in ("done", "failed", "stopped", "canceled"))
    return Run.objects.get(project=project, external_id=rid)


def content_requests(backend) -> int:
    return backend.stats.snapshot()["requests"].get(CONTENT, 0)


def test_archives_in_every_shape_are_read_once(sim, alice, every_sync_reads_whole):
    backend = sim()
    project = bind_to(backend, alice, slug="logs", smr_project=PID, api_key=API_KEY)
    synced(project)
    run = live_run(backend, project)
    world, rid = backend.world, run.external_id
    # 1. The spec's entry: its bytes are an artifact, gzip JSON lines as VictoriaLogs writes them.
    victoria = b"".join(
        json.dumps(r).encode() + b"\n"
        for r in (
            {"_msg": "worker started", "_time": "2026-12-01T10:00:00Z", "_stream": "{worker=\"w1\"}",
             "level": "info"},
            {"_msg": "checkpoint upload failed: 503", "_time": "2026-12-01T10:00:05Z", "level": "warning"},
        )
    )  # fmt: skip
    spec_file = world.store_log_file(rid, gzip.compress(victoria), content_type="application/gzip")
    world.add_log_archive(
        rid, world.log_archive_entry(rid, "la-1", artifact_id=spec_file["artifact_id"], record_count=2)
    )
    # 2. An absolute download URL on the backend, gzip text with leading times and levels.
    text = (
        "2026-12-01T10:01:00Z INFO epoch 1 done\n"
        "2026-12-01 10:01:02,123 [ERROR] optimizer diverged\n"
        "no time on this line\n"
        "WARNING: disk at 91%\n"
    )
    text_file = world.store_log_file(rid, gzip.compress(text.encode()), content_type="application/gzip")
    world.add_log_archive(
        rid,
        {
            "archive_id": "arch-2",
            "key": "runs/x/2.log.gz",
            "download_url": backend.url + text_file["path"],
            "content_type": "application/gzip",
            "created_at": "2026-12-01T10:02:00Z",
            "size_bytes": 123,
        },
    )
    # 3. A relative URL, plain JSON lines {ts, level, message, source}.
    jsonl = (
        json.dumps({"ts": 1796119380, "level": "error", "message": "OOM in worker-2", "source": "worker-2"})
        + "\n"
        + json.dumps({"ts": "2026-12-01T10:03:01Z", "level": 35, "message": "custom level"})
        + "\n"
    )
    jsonl_file = world.store_log_file(rid, jsonl.encode(), content_type="application/x-ndjson")
    world.add_log_archive(rid, {"id": "arch-3", "url": jsonl_file["path"], "format": "jsonl"})
    # 4. Lines inline, and content inline.
    world.add_log_archive(
        rid, {"id": "arch-4", "lines": ["inline one", {"message": "inline two", "level": "error"}]}
    )
    world.add_log_archive(rid, {"id": "arch-5", "content": "[DEBUG] inline content\nsecond"})

    report = synced(project)
    assert (report.log_archives_read, report.log_archives_unreadable) == (5, 0)
    run.refresh_from_db()
    got = lines_of(run)
    assert got == [
        (LogLevel.INFO, '{worker="w1"}', "worker started", LogSource.SMR),
        (LogLevel.WARNING, "la-1", "checkpoint upload failed: 503", LogSource.SMR),
        (LogLevel.INFO, "arch-2", "epoch 1 done", LogSource.SMR),
        (LogLevel.ERROR, "arch-2", "optimizer diverged", LogSource.SMR),
        (LogLevel.INFO, "arch-2", "no time on this line", LogSource.SMR),
        (LogLevel.WARNING, "arch-2", "disk at 91%", LogSource.SMR),
        (LogLevel.ERROR, "worker-2", "OOM in worker-2", LogSource.SMR),
        (35, "arch-3", "custom level", LogSource.SMR),
        (LogLevel.INFO, "arch-4", "inline one", LogSource.SMR),
        (LogLevel.ERROR, "arch-4", "inline two", LogSource.SMR),
        (LogLevel.DEBUG, "arch-5", "inline content", LogSource.SMR),
        (LogLevel.INFO, "arch-5", "second", LogSource.SMR),
    ]
    times = dict(RunLogLine.objects.filter(run=run).values_list("text", "ts"))
    assert times["worker started"].isoformat() == "2026-12-01T10:00:00+00:00"
    assert times["optimizer diverged"].isoformat() == "2026-12-01T10:01:02.123000+00:00"
    assert times["OOM in worker-2"].isoformat() == "2026-12-01T10:03:00+00:00"
    assert sorted(RunLogBatch.objects.filter(run=run).values_list("batch_id", flat=True)) == [
        "smr:arch-2", "smr:arch-3", "smr:arch-4", "smr:arch-5", "smr:la-1"
    ]  # fmt: skip
    assert (run.log_lines, run.log_warnings, run.log_archives_unreadable) == (12, 6, 0)

    # Read once: the next syncs list the archives again and download nothing.
    downloads = content_requests(backend)
    report = synced(project)
    assert (report.log_archives_read, report.log_archives_unreadable) == (0, 0)
    assert content_requests(backend) == downloads
    assert RunLogLine.objects.filter(run=run).count() == 12


def test_what_cannot_be_read_is_recorded_with_why_and_other_origins_are_never_fetched(
    sim, alice, every_sync_reads_whole, settings
):
    backend, elsewhere = sim(), sim(api_key="other-key")
    project = bind_to(backend, alice, slug="logs", smr_project=PID, api_key=API_KEY)
    synced(project)
    run = live_run(backend, project)
    world, rid = backend.world, run.external_id
    settings.SMRWEB_LOG_ARCHIVE_MAX_BYTES = 10_000
    bomb = world.store_log_file(rid, gzip.compress(b"A" * 1_000_000))
    big = world.store_log_file(rid, b"x" * 20_000)
    broken = world.store_log_file(rid, b"\x1f\x8b\x08\x00not really gzip")
    for entry in (
        world.log_archive_entry(rid, "s3-only", s3_bucket="smr-logs", s3_key="runs/1/session.jsonl.gz"),
        {"id": "ssrf", "download_url": elsewhere.url + "/smr/projects"},
        {"id": "metadata", "url": "http://169.254.169.254/latest/meta-data/"},
        {"id": "bomb", "url": bomb["path"]},
        {"id": "big", "url": big["path"]},
        {"id": "big-artifact", "artifact_id": big["artifact_id"]},  # streamed, given up at the cap
        {"id": "broken", "url": broken["path"]},
        {"id": "gone", "url": "/smr/artifacts/no-such-artifact/content"},
        {"id": "gone-artifact", "artifact_id": "no-such-artifact"},
        {"name": "nothing at all"},
    ):
        world.add_log_archive(rid, entry)
    world.add_log_archive(rid, {"id": "fine", "content": "still read"})

    report = synced(project)
    assert (report.log_archives_read, report.log_archives_unreadable) == (1, 10)
    problems = dict(RunLogBatch.objects.filter(run=run, kept=0).values_list("batch_id", "problem"))
    assert "smr-logs runs/1/session.jsonl.gz" in problems["smr:s3-only"]
    assert "not on the SMR backend's origin" in problems["smr:ssrf"]
    assert "not on the SMR backend's origin" in problems["smr:metadata"]
    assert "decompressed" in problems["smr:bomb"]
    assert "cap" in problems["smr:big"]
    assert problems["smr:big-artifact"] == f"artifact {big['artifact_id']}: over the 10000-byte cap"
    assert "gzip" in problems["smr:broken"]
    assert "HTTP 404" in problems["smr:gone"]
    assert "no-such-artifact" in problems["smr:gone-artifact"]
    nameless = smr_logs.archive_key({"name": "nothing at all"})
    assert problems[f"smr:{nameless}"] == "no location and no content"
    assert elsewhere.stats.snapshot()["total_requests"] == 0  # never asked, so the key never went there
    run.refresh_from_db()
    assert run.log_archives_unreadable == 10 and [t for _, _, t, _ in lines_of(run)] == ["still read"]
    # Recorded once: the next sync neither retries nor counts them again.
    assert synced(project).log_archives_unreadable == 0
    run.refresh_from_db()
    assert run.log_archives_unreadable == 10


def test_a_transient_fault_is_retried_and_a_finished_runs_archives_are_read_on_its_last_sync(
    sim, alice, every_sync_reads_whole
):
    backend = sim()
    project = bind_to(backend, alice, slug="logs", smr_project=PID, api_key=API_KEY)
    synced(project)
    run = live_run(backend, project)
    world, rid = backend.world, run.external_id
    world.add_log_archive(rid, {"id": "a1", "content": "before the fault"})
    backend.set_faults("log_archives:5xx=1")
    from smrweb.sources import sync

    report = sync.sync_project(project, owner="test")
    assert "log archives" in report.error
    assert not RunLogLine.objects.filter(run=run).exists()
    run.refresh_from_db()
    assert "fault" in run.source_cursor and "seen" not in run.source_cursor
    backend.set_faults("")
    assert synced(project).log_archives_read == 1
    # The run ends; an archive written at its end is read by the sync that sees it finished.
    httpx.post(
        f"{backend.url}/smr/projects/{PID}/runs/{rid}/stop",
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=10,
    ).raise_for_status()
    world.add_log_archive(rid, {"id": "a2", "content": "the last words"})
    synced(project)
    run.refresh_from_db()
    assert run.state == "stopped"
    assert [t for _, _, t, _ in lines_of(run)] == ["before the fault", "the last words"]


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        ("2026-12-01T10:00:00.5+02:00 WARN something",
         {"ts": "2026-12-01T08:00:00.500000+00:00", "level": 30, "text": "something"}),
        ("[2026-12-01 10:00:00] Starting epoch",
         {"ts": "2026-12-01T10:00:00+00:00", "text": "Starting epoch"}),
        ("ERROR: it broke", {"level": 40, "text": "it broke"}),
        ("[warning] low disk", {"level": 30, "text": "low disk"}),
        ("[main] not a level", {"text": "[main] not a level"}),
        ("Errors are fine here", {"text": "Errors are fine here"}),
        ("0001-01-01T00:00:00Z INFO out of bounds", {"text": "0001-01-01T00:00:00Z INFO out of bounds"}),
    ],
)  # fmt: skip
def test_text_lines_give_up_their_leading_time_and_level(raw, line):
    assert smr_logs.parse_text_line(raw) == line
