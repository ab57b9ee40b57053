"""What the server counts, for tests and benchmarks (`GET /_sim/stats`)."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from smrweb.simulator.server.routes import Route


class Stats:
    """Request counts by route, faults by kind, artifact content requests by artifact id, and every
    non-GET call with its body (`calls`)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.requests: dict[str, int] = defaultdict(int)
            self.faults: dict[str, int] = defaultdict(int)
            self.faults_by_route: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            self.content_requests: dict[str, int] = defaultdict(int)
            self.content_served: dict[str, int] = defaultdict(int)
            self.bytes: dict[str, int] = defaultdict(int)  # response body bytes by route
            self.unauthorized = 0
            self.unmatched = 0
            self.calls: list[dict[str, Any]] = []  # every request with a body-bearing method, as received

    def count(self, route: Route, params: dict[str, str]) -> None:
        with self._lock:
            self.requests[route.key] += 1
            if route.name == "artifact_content":
                self.content_requests[params["artifact_id"]] += 1

    def record(self, route: Route, method: str, path: str, body: Any) -> None:
        """What a client asked the backend to do (POST and the like): tests assert on what it saw."""
        with self._lock:
            self.calls.append({"method": method, "path": path, "route": route.name, "body": body})

    def fault(self, route: Route, kind: str) -> None:
        with self._lock:
            self.faults[kind] += 1
            self.faults_by_route[route.key][kind] += 1

    def sent(self, route_key: str, size: int) -> None:
        with self._lock:
            self.bytes[route_key] += size

    def served(self, artifact_id: str) -> None:
        with self._lock:
            self.content_served[artifact_id] += 1

    def bump(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "total_requests": sum(self.requests.values()),
                "faults": dict(self.faults),
                "faults_by_route": {k: dict(v) for k, v in self.faults_by_route.items()},
                "content_requests": dict(self.content_requests),
                "content_served": dict(self.content_served),
                "bytes": dict(self.bytes),
                "total_bytes": sum(self.bytes.values()),
                "unauthorized": self.unauthorized,
                "unmatched": self.unmatched,
                "calls": [dict(c) for c in self.calls],
            }
