"""Fixtures for the simulator's tests: the OpenAPI spec shipped in the SDK wheel, a strict validator for
an operation's 200 answer, and in-process simulators that do not tick on their own."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import httpx
import jsonschema
import managed_research
import pytest
import yaml
from managed_research import ManagedResearchClient

from smrweb.simulator.server import start_simulator

SPEC_PATH = Path(managed_research.__file__).parent / "schemas" / "smr_openapi.yaml"
API_KEY = "test-sim-key"
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def spec() -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with SPEC_PATH.open() as fh:
        return yaml.load(fh, Loader=loader)


def _strict_datetime(value) -> bool:
    if not isinstance(value, str):
        return True
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return False
    return parsed.tzinfo is not None


FORMATS = jsonschema.FormatChecker(formats=())
FORMATS.checks("date-time")(_strict_datetime)


def operation_schema(spec: dict, method: str, template: str) -> dict | None:
    """The JSON schema of an operation's 200 answer, as a root whose `#/components/...` refs resolve."""
    operation = spec["paths"][template][method.lower()]
    content = operation["responses"]["200"].get("content", {})
    schema = content.get("application/json", {}).get("schema")
    if schema is None:
        return None
    return {**schema, "components": spec["components"]}


def component_schema(spec: dict, name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}


def validate(schema: dict, payload) -> None:
    jsonschema.Draft202012Validator(schema, format_checker=FORMATS).validate(payload)


@pytest.fixture(scope="session")
def check(spec):
    """check(method, template, payload): validates an answer against the spec's 200 schema."""
    cache: dict[tuple[str, str], dict | None] = {}

    def _check(method: str, template: str, payload) -> None:
        key = (method, template)
        if key not in cache:
            cache[key] = operation_schema(spec, method, template)
        schema = cache[key]
        assert schema is not None, f"{method} {template} has no JSON response schema in the spec"
        validate(schema, payload)

    return _check


def make_sim(**kwargs):
    options = {"seed": 7, "warmup": 110, "auto_tick": False, "api_key": API_KEY, "start_time": START}
    options.update(kwargs)
    return start_simulator(**options)


# Every free-form variation at once: both wire shapes (alternating per run), opaque entries, a
# higher_is_better metric on odd runs and a worker downgrade on some runs (always index 5).
MIXED = {
    "shapes": ("a", "b"),
    "unreadable_every": 5,
    "metrics": (("val_loss", "lower_is_better"), ("val_accuracy", "higher_is_better")),
    "worker_downgrades": True,
}
WORLDS = {"default": {}, "mixed": MIXED}


@pytest.fixture(scope="module", params=sorted(WORLDS))
def sim(request):
    """A shared simulator for read-only tests: 110 ticks in, never ticking by itself. Parametrized:
    today's single shape, and the mixed world (so every shape-b answer is validated and parsed too)."""
    handle = make_sim(**WORLDS[request.param])
    yield handle
    handle.stop()


@pytest.fixture
def fresh_sim():
    """A simulator of its own, for tests that stop runs, restore checkpoints or inject faults."""
    handle = make_sim()
    yield handle
    handle.stop()


@pytest.fixture
def client_for():
    clients = []

    def _make(handle, **kwargs) -> ManagedResearchClient:
        client = ManagedResearchClient(
            api_key=kwargs.pop("api_key", API_KEY), backend_base=handle.url, **kwargs
        )
        clients.append(client)
        return client

    yield _make
    for client in clients:
        client.close()


@pytest.fixture
def raw():
    """raw(handle, method, path, **params) -> httpx.Response, with the bearer header."""
    with httpx.Client(headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10) as http:

        def _raw(handle, method: str, path: str, *, json=None, **params) -> httpx.Response:
            return http.request(method, handle.url + path, params=params or None, json=json)

        yield _raw
