"""Helpers shared by the API tests."""

from rest_framework.test import APIClient


def session_client(user) -> APIClient:
    """An API client signed in as `user` through a browser session (no token)."""
    client = APIClient()
    client.force_login(user)
    return client


def assert_json_error(response, status: int, code: str | None = None) -> dict:
    """The response is the API's JSON error shape with this status (and code); returns its body."""
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"code", "message", "errors"}
    assert body["message"]
    if code is not None:
        assert body["code"] == code
    return body
