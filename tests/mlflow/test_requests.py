"""The MLflow API's answers to plain requests: MLflow's error shape and status for every refusal, nothing
half-written, retries that write nothing twice, and who may reach what."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from smrweb.tracking import services
from smrweb.tracking.models import MetricPoint, Run, RunParam, RunTag, StateChange

API = "/mlflow/api/2.0/mlflow"
pytestmark = pytest.mark.django_db


def post(client, path: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    response = client.post(f"{API}/{path}", data=data, content_type="application/json")
    return response.status_code, response.json()


def get(client, path: str, **query) -> tuple[int, dict]:
    response = client.get(f"{API}/{path}", query)
    return response.status_code, response.json()


@pytest.fixture
def run_id(api, project) -> str:
    status, body = post(
        api, "runs/create", {"experiment_id": str(project.pk), "start_time": 1_700_000_000_000}
    )
    assert status == 200, body
    return body["run"]["info"]["run_id"]


def metric(key="loss", value=0.5, step=0, timestamp=1_700_000_000_000) -> dict:
    return {"key": key, "value": value, "step": step, "timestamp": timestamp}


def test_create_run_answers_mlflow_run_and_starts_it_at_start_time(api, project, run_id):
    run = Run.objects.get(external_id=run_id)
    assert (run.project, run.state) == (project, "running")
    assert int(run.started_at.timestamp() * 1000) == 1_700_000_000_000
    status, body = get(api, "runs/get", run_id=run_id)
    info = body["run"]["info"]
    assert (status, info["status"], info["start_time"], info["experiment_id"]) == (
        200,
        "RUNNING",
        1_700_000_000_000,
        str(project.pk),
    )
    assert info["artifact_uri"] == f"mlflow-artifacts:/{project.pk}/{run_id}/artifacts"


@pytest.mark.parametrize(
    "body, code, needle",
    [
        (b"{not json", "INVALID_PARAMETER_VALUE", "not valid JSON"),
        (b"[1, 2]", "INVALID_PARAMETER_VALUE", "JSON object"),
        ({"metrics": [metric(value="high")]}, "INVALID_PARAMETER_VALUE", "must be a number"),
        ({"metrics": [metric(value="NaN")]}, "INVALID_PARAMETER_VALUE", "finite"),
        ({"metrics": [metric(step=-1)]}, "INVALID_PARAMETER_VALUE", "steps from 0"),
        ({"metrics": [metric(timestamp="soon")]}, "INVALID_PARAMETER_VALUE", "64-bit integer"),
        ({"metrics": [{"value": 1, "timestamp": 1}]}, "INVALID_PARAMETER_VALUE", "'key'"),
        ({"metrics": [metric()] * 1001}, "INVALID_PARAMETER_VALUE", "at most 1000 metrics"),
        (
            {"params": [{"key": f"p{i}", "value": "1"} for i in range(101)]},
            "INVALID_PARAMETER_VALUE",
            "100 params",
        ),
        (
            {"tags": [{"key": f"t{i}", "value": "1"} for i in range(101)]},
            "INVALID_PARAMETER_VALUE",
            "100 tags",
        ),
        (
            {
                "metrics": [metric(step=i) for i in range(950)],
                "params": [{"key": f"p{i}", "value": "1"} for i in range(51)],
            },
            "INVALID_PARAMETER_VALUE",
            "1000 metrics, params and tags together",
        ),
        ({"params": [{"key": "bad\x00key", "value": "1"}]}, "INVALID_PARAMETER_VALUE", "Control characters"),
        ({"tags": [{"key": "/leading", "value": "1"}]}, "INVALID_PARAMETER_VALUE", "tag key"),
        ({"params": [{"key": "x", "value": "v" * 6001}]}, "INVALID_PARAMETER_VALUE", "6000"),
    ],
)
def test_bad_batches_are_refused_in_mlflow_shape_and_write_nothing(api, run_id, body, code, needle):
    if isinstance(body, dict):
        body = {"run_id": run_id, **body, "params": body.get("params", []) + [{"key": "ok", "value": "1"}]}
    status, answer = post(api, "runs/log-batch", body)
    assert status == 400 and answer["error_code"] == code and needle in answer["message"], answer
    assert set(answer) == {"error_code", "message"}
    run = Run.objects.get(external_id=run_id)
    assert not MetricPoint.objects.filter(run=run).exists() and not RunParam.objects.filter(run=run).exists()


def test_a_batch_refused_late_writes_none_of_its_metrics_or_params(api, run_id):
    post(api, "runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.1"})
    status, answer = post(
        api,
        "runs/log-batch",
        {
            "run_id": run_id,
            "metrics": [metric()],
            "params": [{"key": "layers", "value": "4"}, {"key": "lr", "value": "0.2"}],
            "tags": [{"key": "team", "value": "x"}],
        },
    )
    assert status == 400 and "cannot change" in answer["message"]
    run = Run.objects.get(external_id=run_id)
    assert list(RunParam.objects.filter(run=run).values_list("key", "value")) == [("lr", "0.1")]
    assert not MetricPoint.objects.filter(run=run).exists() and not RunTag.objects.filter(run=run).exists()
    # The same value again is a retry, not a change.
    assert post(api, "runs/log-parameter", {"run_id": run_id, "key": "lr", "value": "0.1"})[0] == 200


def test_retried_requests_write_nothing_twice(api, run_id):
    batch = {
        "run_id": run_id,
        "metrics": [metric(step=1), metric(step=2, value=0.25), metric("acc", 0.9, step=2)],
        "params": [{"key": "lr", "value": "0.1"}],
        "tags": [{"key": "team", "value": "x"}],
    }
    for _ in range(3):
        assert post(api, "runs/log-batch", batch)[0] == 200
        assert post(api, "runs/log-metric", {"run_id": run_id, **metric(step=1)})[0] == 200
    run = Run.objects.get(external_id=run_id)
    assert MetricPoint.objects.filter(run=run).count() == 3
    # Another value at the same step and time is another point, as in MLflow.
    post(api, "runs/log-metric", {"run_id": run_id, **metric(step=1, value=0.75)})
    assert MetricPoint.objects.filter(run=run).count() == 4
    status, body = get(api, "metrics/get-history", run_id=run_id, metric_key="loss")
    assert [(m["step"], m["value"]) for m in body["metrics"]] == [(1, 0.5), (1, 0.75), (2, 0.25)]


def test_status_updates_are_state_events_at_the_end_time(api, run_id):
    for status, state in (("FINISHED", "done"), ("KILLED", "stopped"), ("FAILED", "failed")):
        code, body = post(
            api, "runs/update", {"run_id": run_id, "status": status, "end_time": 1_700_000_100_000}
        )
        assert code == 200 and body["run_info"]["status"] == status
        run = Run.objects.get(external_id=run_id)
        assert run.state == state and int(run.finished_at.timestamp() * 1000) == 1_700_000_100_000
    code, body = post(api, "runs/update", {"run_id": run_id, "status": "EXPLODED"})
    assert code == 400 and "Invalid status" in body["message"]
    code, body = post(
        api, "runs/update", {"run_id": run_id, "status": "RUNNING", "end_time": 1_700_000_200_000}
    )
    assert Run.objects.get(external_id=run_id).state == "running"
    assert StateChange.objects.filter(run__external_id=run_id).count() == 5  # created + 4 changes


def test_unknown_runs_and_experiments_and_endpoints(api, project):
    assert get(api, "runs/get", run_id="nope")[1]["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    assert get(api, "runs/get")[1]["error_code"] == "INVALID_PARAMETER_VALUE"
    assert get(api, "experiments/get", experiment_id="999999")[0] == 404
    assert get(api, "experiments/get", experiment_id="0")[1]["experiment"]["name"] == "hill"  # the default
    assert (
        get(api, "experiments/get-by-name", experiment_name="nope")[1]["error_code"]
        == "RESOURCE_DOES_NOT_EXIST"
    )
    status, body = post(api, "runs/delete", {"run_id": "x"})
    assert status == 404 and body["error_code"] == "ENDPOINT_NOT_FOUND"


def test_another_projects_run_is_not_found_and_writes_nothing(api, other_project):
    other_token = services.create_api_token(other_project, name="other")[1]
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    _, created = post(other, "runs/create", {"experiment_id": "0"})
    run_id = created["run"]["info"]["run_id"]
    assert Run.objects.get(external_id=run_id).project == other_project
    status, body = post(api, "runs/log-metric", {"run_id": run_id, **metric()})
    assert (status, body["error_code"]) == (404, "RESOURCE_DOES_NOT_EXIST")
    assert get(api, "runs/get", run_id=run_id)[0] == 404
    status, body = post(api, "runs/create", {"experiment_id": str(other_project.pk)})
    assert status == 404
    assert get(api, "experiments/get-by-name", experiment_name="other")[0] == 404
    assert not MetricPoint.objects.exists()


def test_sessions_need_the_admin_role_to_write_and_anonymous_callers_are_unauthenticated(
    client, bob, alice, run_id
):
    status, body = post(APIClient(), "runs/log-metric", {"run_id": run_id, **metric()})
    assert (status, body["error_code"]) == (401, "UNAUTHENTICATED")
    reviewer = APIClient(enforce_csrf_checks=False)
    reviewer.force_login(bob)
    assert get(reviewer, "runs/get", run_id=run_id)[0] == 200
    status, body = post(reviewer, "runs/log-metric", {"run_id": run_id, **metric()})
    assert (status, body["error_code"]) == (403, "PERMISSION_DENIED")
    admin = APIClient()
    admin.force_login(alice)
    assert post(admin, "runs/log-metric", {"run_id": run_id, **metric()})[0] == 200
    assert MetricPoint.objects.count() == 1


def test_search_runs_filters_and_orders_as_the_client_asks(api, project):
    ids = []
    for i, (lr, loss) in enumerate((("0.1", 0.9), ("0.01", 0.4), ("0.001", 0.6))):
        _, body = post(
            api,
            "runs/create",
            {"experiment_id": str(project.pk), "start_time": 1_700_000_000_000 + i, "run_name": f"r{i}"},
        )
        run_id = body["run"]["info"]["run_id"]
        ids.append(run_id)
        post(
            api,
            "runs/log-batch",
            {
                "run_id": run_id,
                "metrics": [metric(value=loss)],
                "params": [{"key": "lr", "value": lr}],
                "tags": [{"key": "sweep", "value": "a" if i else "b"}],
            },
        )
    post(api, "runs/update", {"run_id": ids[2], "status": "FINISHED"})

    def search(filter_string="", order_by=None, **more):
        status, body = post(
            api,
            "runs/search",
            {
                "experiment_ids": [str(project.pk)],
                "filter": filter_string,
                "order_by": order_by or [],
                **more,
            },
        )
        assert status == 200, body
        return [r["info"]["run_name"] for r in body.get("runs", [])], body

    assert search()[0] == ["r2", "r1", "r0"]  # newest first
    assert search("params.lr = '0.01'")[0] == ["r1"]
    assert search("metrics.loss < 0.7", ["metrics.loss ASC"])[0] == ["r1", "r2"]
    assert search("tags.sweep = 'a' AND attributes.status = 'FINISHED'")[0] == ["r2"]
    assert search("attributes.status != 'FINISHED'")[0] == ["r1", "r0"]
    assert search("tags.`mlflow.runName` LIKE 'r%'", ["attributes.run_name DESC"])[0] == ["r2", "r1", "r0"]
    assert search(f"attributes.run_id IN ('{ids[0]}', '{ids[2]}')")[0] == ["r2", "r0"]
    names, body = search(max_results=2)
    assert names == ["r2", "r1"]
    assert search(max_results=2, page_token=body["next_page_token"])[0] == ["r0"]
    status, body = post(api, "runs/search", {"experiment_ids": [str(project.pk)], "filter": "params.lr ~ 1"})
    assert status == 400 and body["error_code"] == "INVALID_PARAMETER_VALUE"
    status, body = post(api, "runs/search", {"experiment_ids": ["424242"]})
    assert status == 404


def test_experiment_search_and_create(api, project, other_project):
    status, body = post(api, "experiments/search", {"max_results": 10})
    assert [e["name"] for e in body["experiments"]] == ["hill"]
    status, body = post(api, "experiments/create", {"name": "hill"})
    assert (status, body["error_code"]) == (400, "RESOURCE_ALREADY_EXISTS")
    status, body = post(api, "experiments/create", {"name": "brand-new"})
    assert (status, body["error_code"]) == (403, "PERMISSION_DENIED")


def test_artifact_uploads_are_content_addressed_and_checked(api, project, run_id):
    url = f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{project.pk}/{run_id}/artifacts"
    response = api.put(f"{url}/model/w.bin", data=b"\x00\x01weights", content_type="application/octet-stream")
    assert response.status_code == 200, response.content
    assert (
        api.put(
            f"{url}/copy/w.bin", data=b"\x00\x01weights", content_type="application/octet-stream"
        ).status_code
        == 200
    )
    run = Run.objects.get(external_id=run_id)
    blobs = set(run.artifacts.values_list("blob__sha256", flat=True))
    assert run.artifacts.count() == 2 and len(blobs) == 1  # the same bytes stored once
    assert b"".join(api.get(f"{url}/model/w.bin").streaming_content) == b"\x00\x01weights"
    assert api.get(f"{url}/model/none.bin").json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    response = api.put(f"{url}/../../escape.txt", data=b"x", content_type="text/plain")
    assert response.status_code in (400, 404) and "error_code" in response.json()
    wrong = f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{project.pk + 1}/{run_id}/artifacts/a.txt"
    assert api.put(wrong, data=b"x", content_type="text/plain").status_code == 404
    listing = api.get(
        "/mlflow/api/2.0/mlflow-artifacts/artifacts", {"path": f"{project.pk}/{run_id}/artifacts"}
    ).json()
    assert listing == {"files": [{"path": "copy", "is_dir": True}, {"path": "model", "is_dir": True}]}


def test_params_show_on_the_run_page_and_filter_the_project_page(api, client_alice, project, run_id):
    other = post(api, "runs/create", {"experiment_id": str(project.pk), "run_name": "other-run"})[1]
    post(api, "runs/log-batch", {"run_id": run_id, "params": [{"key": "learning rate", "value": "0.1"}]})
    post(
        api,
        "runs/log-batch",
        {"run_id": other["run"]["info"]["run_id"], "params": [{"key": "learning rate", "value": "0.2"}]},
    )
    page = client_alice.get(f"/projects/hill/runs/{run_id}/").content.decode()
    assert 'id="run-params"' in page and "<dt>learning rate</dt>" in page
    assert "?param=learning%20rate%3D0.1" in page
    listing = client_alice.get("/projects/hill/", {"param": "learning rate=0.1"}).content.decode()
    assert run_id in listing and "other-run" not in listing and "data-active-params" in listing
    bare = client_alice.get(f"/projects/hill/runs/{other['run']['info']['run_id']}/").content.decode()
    assert "<dt>learning rate</dt>" in bare


def test_an_oversized_artifact_is_refused_before_anything_is_stored(api, project, run_id, settings):
    settings.SMRWEB_MAX_ARTIFACT_BYTES = 10
    url = f"/mlflow/api/2.0/mlflow-artifacts/artifacts/{project.pk}/{run_id}/artifacts/big.bin"
    response = api.put(url, data=b"x" * 11, content_type="application/octet-stream")
    assert response.status_code == 400 and response.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert "limited to 10 bytes" in response.json()["message"]
    assert not Run.objects.get(external_id=run_id).artifacts.exists()
