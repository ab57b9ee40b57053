"""A real S3-compatible server for the artifact store: moto in server mode, started once per session in
a subprocess on a free loopback port. Each test gets a bucket of its own and the artifact storage that
settings.py builds from the SMRWEB_ARTIFACT_S3_* / AWS_* variables (read by starting Django in a
subprocess with them set, so the options under test are exactly the deployed ones)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import boto3
import httpx
import pytest

from tests.conftest import ROOT

REGION = "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "smrweb-test", "AWS_SECRET_ACCESS_KEY": "smrweb-test-secret"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """The URL of a moto S3 server (`moto_server`) running for the whole session."""
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/moto-api/", timeout=1)
            break
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.2)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


def deployed_env(endpoint: str, bucket: str) -> dict[str, str]:
    """The variables docker-compose.yml gives the app for its MinIO bucket, pointed at `endpoint`."""
    return {
        "SMRWEB_ARTIFACT_S3_BUCKET": bucket,
        "SMRWEB_ARTIFACT_S3_ENDPOINT": endpoint,
        "AWS_S3_REGION_NAME": REGION,
        **CREDENTIALS,
    }


@pytest.fixture(scope="session")
def s3_storage_config(s3_endpoint, tmp_path_factory):
    """STORAGES["artifacts"] as settings.py builds it from the deployment's variables (bucket "BUCKET")."""
    env = {**os.environ, **deployed_env(s3_endpoint, "BUCKET")}
    env["SMRWEB_DATA_DIR"] = str(tmp_path_factory.mktemp("s3-settings"))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'smrweb.settings'; "
            "from django.conf import settings; print(json.dumps(settings.STORAGES['artifacts']))",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@dataclass
class Bucket:
    """A test's bucket, read and written with boto3 directly (never through smrweb's code)."""

    name: str
    client: object

    def keys(self) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.name)
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

    def get(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.name, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.name, Key=key, Body=data)

    def empty(self) -> None:
        for key in self.keys():
            self.client.delete_object(Bucket=self.name, Key=key)


@pytest.fixture
def s3(s3_endpoint, s3_storage_config, settings, monkeypatch, artifact_root):
    """Artifacts of this test go to a fresh bucket on the local S3 server, through the storage settings.py
    builds. Assigning STORAGES (after the suite's own `artifact_root`) makes Django drop its cached
    storage backends, so services.artifact_storage() is a new S3Storage on this bucket."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)  # as in the deployment: boto3 reads the AWS_* variables
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    name = f"smrweb-{uuid.uuid4().hex[:16]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name=REGION,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=name)
    config = json.loads(json.dumps(s3_storage_config))
    config["OPTIONS"]["bucket_name"] = name
    settings.STORAGES = {**settings.STORAGES, "artifacts": config}
    bucket = Bucket(name, client)
    yield bucket
    bucket.empty()
    client.delete_bucket(Bucket=name)
