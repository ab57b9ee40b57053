"""Red-team findings 14 and 15: what an smrweb process creates is its owner's only; a session ends when
its person is idle (polls do not count) and at its maximum age; everyone can change their password;
production does not answer to `testserver`; compose will not start on default passwords."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

PASSWORD = "pw-for-tests-only"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_data_dir_and_everything_in_it_are_the_owners_only(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)  # made by an older smrweb: tightened
    env = {**os.environ, "SMRWEB_DATA_DIR": str(data)}
    env.pop("DATABASE_URL", None)
    env.pop("SMRWEB_ARTIFACT_ROOT", None)
    store = (
        "import io; from smrweb.tracking import services; "
        "p = services.create_project('perm'); services.store_artifact(p, 'r1', path='a.py', "
        "content=io.BytesIO(b'x'))"
    )
    for argv in (["migrate", "-v", "0"], ["shell", "-c", store]):
        done = subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    assert mode(data) == 0o700
    created = [p for p in data.rglob("*")]
    assert any(p.name == "smrweb.sqlite3" for p in created) and any("blobs" in p.parts for p in created)
    for path in created:
        assert mode(path) & 0o077 == 0, f"{path} is {oct(mode(path))}"


def test_production_does_not_answer_to_testserver(tmp_path):
    env = {
        **os.environ,
        "SMRWEB_DATA_DIR": str(tmp_path),
        "SMRWEB_PRODUCTION": "true",
        "SECRET_KEY": "k" * 60,
    }
    env.pop("ALLOWED_HOSTS", None)
    probe = "from django.conf import settings; print(settings.ALLOWED_HOSTS)"
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "testserver" not in done.stdout and "localhost" in done.stdout


def test_compose_refuses_to_start_without_real_passwords():
    compose = (ROOT / "docker-compose.yml").read_text()
    for secret in ("POSTGRES_PASSWORD", "MINIO_ROOT_PASSWORD", "SECRET_KEY"):
        uses = re.findall(r"\$\{" + secret + r"([^}]*)\}", compose)
        assert uses and all(use.startswith(":?") for use in uses), (secret, uses)  # required, no default
    yaml.safe_load(compose)  # still a compose file
    example = dict(
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert example["POSTGRES_PASSWORD"] == example["MINIO_ROOT_PASSWORD"] == example["SECRET_KEY"] == ""


# --- sessions ----------------------------------------------------------------------------------------


@pytest.fixture
def signed_in(client, alice, time_machine):
    time_machine.move_to("2026-03-02 10:00:00Z", tick=False)
    client.force_login(alice)
    assert client.get("/").status_code == 200
    return client


def test_a_session_ends_after_its_idle_time(signed_in, time_machine, settings):
    settings.SMRWEB_SESSION_IDLE_SECONDS = 3600
    time_machine.shift(3000)
    assert signed_in.get("/").status_code == 200  # activity: the idle clock starts again
    time_machine.shift(3000)
    assert signed_in.get("/").status_code == 200
    time_machine.shift(3700)
    response = signed_in.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


@pytest.mark.parametrize("poll", [{"X-Smrweb-Version": "0"}, {"X-Smrweb-Cards": "run-head=0"}])
def test_polls_are_not_activity(signed_in, time_machine, settings, poll):
    settings.SMRWEB_SESSION_IDLE_SECONDS = 3600
    poll = {"HX-Request": "true", **poll}  # a fragment's poll, or a page of live cards' (the run page)
    for _ in range(3):  # a tab left open keeps polling
        time_machine.shift(1000)
        assert signed_in.get("/", headers=poll).status_code in (200, 204)
    time_machine.shift(700)  # an hour and a bit since the person last did something
    response = signed_in.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_a_session_ends_at_its_maximum_age_however_active(signed_in, time_machine, settings):
    settings.SMRWEB_SESSION_MAX_AGE_SECONDS = 3 * 3600
    for _ in range(3):
        time_machine.shift(3000)
        assert signed_in.get("/").status_code == 200
    time_machine.shift(3000)
    assert signed_in.get("/").status_code == 302


def test_everyone_can_change_their_password(client, carol):
    client.force_login(carol)
    page = client.get("/password/")
    assert page.status_code == 200 and 'autocomplete="new-password"' in page.content.decode()
    wrong = client.post(
        "/password/",
        {
            "old_password": "nope",
            "new_password1": "a-much-better-one-42",
            "new_password2": "a-much-better-one-42",
        },
    )
    assert wrong.status_code == 200 and "form-error" in wrong.content.decode()
    done = client.post(
        "/password/",
        {
            "old_password": PASSWORD,
            "new_password1": "a-much-better-one-42",
            "new_password2": "a-much-better-one-42",
        },
    )
    assert done.status_code == 302 and done["Location"] == "/password/done/"
    carol.refresh_from_db()
    assert carol.check_password("a-much-better-one-42")
    assert 'href="/password/"' in client.get("/").content.decode()  # linked from every page's header
