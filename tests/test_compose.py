"""docker-compose.yml, read as Docker would (no engine here): every lane has a worker, and validators run
only where the sandbox can confine them (finding N4): a root verifier with a writable private cgroup
namespace, while every other service keeps the image's unprivileged user."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from smrweb.celery import LANES

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def _queues(service: dict) -> set[str]:
    command = service.get("command") or []
    if "celery" not in command or "worker" not in command:
        return set()
    return set(command[command.index("-Q") + 1].split(","))


def test_every_lane_is_taken_by_exactly_one_service():
    taken = {name: _queues(service) for name, service in SERVICES.items()}
    for queue in ["celery", *(f"celery.{lane}" for lane in LANES)]:
        takers = [name for name, queues in taken.items() if queue in queues]
        assert len(takers) == 1, (queue, takers)


def test_validators_run_only_in_the_verifier_which_can_confine_them():
    verifier = SERVICES["verifier"]
    assert _queues(verifier) == {"celery.verification"}
    assert str(verifier["user"]) == "0"  # joins the cgroup, then drops to the slot's uid
    assert verifier["cgroup"] == "private" and "SYS_ADMIN" in verifier["cap_add"]
    assert "seccomp=unconfined" in verifier["security_opt"]
    assert any(volume.endswith(":/run/smrweb-sandbox") for volume in verifier["volumes"])
    entrypoint = verifier["entrypoint"][0]
    assert entrypoint.startswith("/app/smrweb/")  # the image copies smrweb/ to /app/smrweb
    script = ROOT / entrypoint.removeprefix("/app/")
    assert os.access(script, os.X_OK)
    others = [name for name, service in SERVICES.items() if name != "verifier" and "user" in service]
    assert others == [] or all(str(SERVICES[n]["user"]) != "0" for n in others)


def test_the_entrypoint_runs_its_command(tmp_path):
    """On a host without a cgroup v2 root (cgroup v1, like this one) it has nothing to prepare."""
    script = ROOT / SERVICES["verifier"]["entrypoint"][0].removeprefix("/app/")
    done = subprocess.run(
        ["sh", str(script), "sh", "-c", "echo ran with ${SMRWEB_SANDBOX_CGROUP:-no cgroup set}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    expected = (
        "ran with /sys/fs/cgroup/sandboxes"
        if Path("/sys/fs/cgroup/cgroup.controllers").exists()
        else ("ran with no cgroup set")
    )
    assert done.stdout.strip() == expected


def test_the_poller_can_be_scaled_out():
    """`docker compose up --scale poller=N` (issue 34): nothing in the service is one of a kind."""
    poller = SERVICES["poller"]
    assert _queues(poller) == {"celery.polling"}
    assert "container_name" not in poller and "ports" not in poller
    assert "beat" not in poller["command"] and "-B" not in poller["command"]  # one beat, its own service
    assert poller["command"][poller["command"].index("--prefetch-multiplier") + 1] == "1"
