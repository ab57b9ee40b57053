"""Domain errors have one home (issue 35, review 2026-11-28 §3.5: they were in seven modules, each with
its HTTP status): every TrackingError of the tracking package is defined in tracking/errors.py."""

import importlib
import pkgutil

import smrweb.tracking
from smrweb.tracking.errors import TrackingError

# The backup tool's own error stays with it (backup/ is a package apart, review §6 "leave alone").
ELSEWHERE = {"smrweb.tracking.backup.tables.BackupError"}


def test_every_tracking_error_is_defined_in_errors_py():
    for info in pkgutil.walk_packages(smrweb.tracking.__path__, "smrweb.tracking."):
        if ".migrations" not in info.name and ".management" not in info.name:
            importlib.import_module(info.name)
    found, todo = set(), [TrackingError]
    while todo:
        for cls in todo.pop().__subclasses__():
            found.add(f"{cls.__module__}.{cls.__qualname__}")
            todo.append(cls)
    outside = {
        name
        for name in found
        if name.startswith("smrweb.tracking.") and not name.startswith("smrweb.tracking.errors.")
    }
    assert outside == ELSEWHERE, sorted(outside - ELSEWHERE)
    assert len(found) > 20  # the walk found them
