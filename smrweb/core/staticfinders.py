"""Serve plotly.js from the installed `plotly` package as `vendor/plotly.min.js`: the version is
pinned in the lock file with the Python package, nothing is copied into the repository and no page
loads a CDN. collectstatic picks it up like any other static file."""

from __future__ import annotations

import os
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_NAME = "vendor/plotly.min.js"


def plotly_bundle() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


class PlotlyFinder(BaseFinder):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bundle = plotly_bundle()
        # collectstatic copies through a storage whose root holds the file under its static name.
        self.storage = _SingleFileStorage(self.bundle, PLOTLY_STATIC_NAME)

    def check(self, **kwargs):
        from django.core.checks import Error

        if not self.bundle.exists():
            return [
                Error(
                    f"plotly.js is missing at {self.bundle}",
                    hint="reinstall the pinned plotly package",
                    id="smrweb.E001",
                )
            ]
        return []

    def find(self, path, find_all=False, **kwargs):
        if path == PLOTLY_STATIC_NAME and self.bundle.exists():
            return [str(self.bundle)] if (find_all or kwargs.get("all")) else str(self.bundle)
        return [] if (find_all or kwargs.get("all")) else None

    def list(self, ignore_patterns):
        if self.bundle.exists():
            yield PLOTLY_STATIC_NAME, self.storage


class _SingleFileStorage(FileSystemStorage):
    """A read-only storage that answers for exactly one file under one name."""

    def __init__(self, source: Path, name: str):
        super().__init__(location=str(source.parent))
        self.source, self.name_ = source, name

    def path(self, name):
        return str(self.source) if name == self.name_ else super().path(name)

    def open(self, name, mode="rb"):
        return super().open(self.source.name if name == self.name_ else name, mode)

    def exists(self, name):
        return name == self.name_ or super().exists(name)

    def get_modified_time(self, name):
        return super().get_modified_time(self.source.name if name == self.name_ else name)

    def size(self, name):
        return os.path.getsize(self.path(name))
