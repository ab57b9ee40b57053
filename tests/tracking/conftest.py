"""Fixtures for the tracking service tests: artifacts land in a per-test temporary directory."""

import pytest


@pytest.fixture(autouse=True)
def artifact_root(settings, tmp_path):
    """Point the `artifacts` storage at tmp_path. Assigning STORAGES fires setting_changed, which
    makes Django drop its cached storage backends (and again when the fixture restores it)."""
    root = tmp_path / "artifacts"
    settings.STORAGES = {
        **settings.STORAGES,
        "artifacts": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                      "OPTIONS": {"location": str(root), "base_url": None}},
    }
    return root
