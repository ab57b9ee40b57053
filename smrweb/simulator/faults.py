"""Fault injection for the simulator: which requests fail, and how.

A spec is a comma-separated list of `[scope:]kind=rate` items plus a few `name=value` settings:

    429=0.1,5xx=0.05,slow=0.05,malformed=0.05,denial=0.05,drop=0.02,usage:5xx=0.3,slow_seconds=2

Kinds: `429`, `5xx`, `slow`, `malformed` (one of the next two, picked at random), `truncated`,
`wrong_shape`, `denial`, `drop`. A scope is an fnmatch glob matched against the route name
(`usage`, `runs`, `artifact_content`, ... see `server.ROUTES`) or against the request path
(`/smr/runs/*/usage`); a scoped rate replaces the unscoped rate of that kind for matching requests.
Settings: `slow_seconds` (default 35, longer than the SDK's 30 s timeout), `retry_after` (seconds in
the 429's `Retry-After` header and body, default 2), `denial_status` (HTTP status of a denial,
default 200: a success status carrying a structured denial), `seed` (the fault RNG's seed).

Decisions come from one seeded RNG, one draw per /smr request, so a given request sequence always
meets the same faults. A faulted request never runs its handler, so it never changes the world.
"""

from __future__ import annotations

import fnmatch
import random
import threading
from dataclasses import dataclass, field
from typing import Any

KINDS = ("429", "5xx", "slow", "malformed", "truncated", "wrong_shape", "denial", "drop")
SETTINGS = {"slow_seconds": float, "retry_after": int, "denial_status": int, "seed": int}
KIND_ALIASES = {
    "500": "5xx",
    "rate_limit": "429",
    "timeout": "slow",
    "wrongshape": "wrong_shape",
    "invalid": "malformed",
    "close": "drop",
}


@dataclass
class FaultConfig:
    rates: dict[str, float] = field(default_factory=dict)
    scoped: list[tuple[str, dict[str, float]]] = field(default_factory=list)
    slow_seconds: float = 35.0
    retry_after: int = 2
    denial_status: int = 200
    seed: int | None = None

    @classmethod
    def parse(cls, spec: str | None) -> FaultConfig:
        config = cls()
        for raw in (spec or "").replace(";", ",").split(","):
            item = raw.strip()
            if not item:
                continue
            if "=" not in item:
                raise ValueError(f"fault item {item!r} is not of the form [scope:]kind=rate")
            left, value = (part.strip() for part in item.split("=", 1))
            if left in SETTINGS:
                setattr(config, left, SETTINGS[left](value))
                continue
            scope, _, kind = left.rpartition(":")
            kind = KIND_ALIASES.get(kind.strip().lower(), kind.strip().lower())
            if kind not in KINDS:
                raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
            rate = float(value)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault rate {rate} for {kind!r} is not within [0, 1]")
            if scope.strip():
                for existing_scope, rates in config.scoped:
                    if existing_scope == scope.strip():
                        rates[kind] = rate
                        break
                else:
                    config.scoped.append((scope.strip(), {kind: rate}))
            else:
                config.rates[kind] = rate
        if config.denial_status < 100 or config.denial_status > 599:
            raise ValueError("denial_status must be an HTTP status")
        for rates in [config.rates, *(r for _, r in config.scoped)]:
            if sum(rates.values()) > 1.0 + 1e-9:
                raise ValueError("fault rates for one scope add up to more than 1")
        return config

    def rates_for(self, route: str, path: str) -> dict[str, float]:
        rates = dict(self.rates)
        for scope, scoped in self.scoped:
            if fnmatch.fnmatchcase(route, scope) or fnmatch.fnmatchcase(path, scope):
                rates.update(scoped)
        return rates

    def to_dict(self) -> dict[str, Any]:
        return {
            "rates": dict(self.rates),
            "scoped": [{"scope": s, "rates": dict(r)} for s, r in self.scoped],
            "slow_seconds": self.slow_seconds,
            "retry_after": self.retry_after,
            "denial_status": self.denial_status,
            "seed": self.seed,
        }

    def spec(self) -> str:
        items = [f"{k}={v}" for k, v in self.rates.items()]
        items += [f"{s}:{k}={v}" for s, rates in self.scoped for k, v in rates.items()]
        items += [
            f"slow_seconds={self.slow_seconds}",
            f"retry_after={self.retry_after}",
            f"denial_status={self.denial_status}",
        ]
        return ",".join(items)


class FaultInjector:
    """Thread-safe: holds the current config and the seeded RNG that decides each request's fate."""

    def __init__(self, config: FaultConfig | str | None = None, *, seed: int = 0):
        self._lock = threading.Lock()
        self.config = FaultConfig()
        self._rng = random.Random(f"smr-sim-faults|{seed}")
        self.set(config if config is not None else FaultConfig(), seed=seed)

    def set(self, config: FaultConfig | str, *, seed: int | None = None) -> FaultConfig:
        parsed = FaultConfig.parse(config) if isinstance(config, str) else config
        with self._lock:
            self.config = parsed
            chosen = parsed.seed if parsed.seed is not None else seed
            if chosen is not None:
                self._rng = random.Random(f"smr-sim-faults|{chosen}")
        return parsed

    def decide(self, route: str, path: str) -> tuple[str | None, random.Random]:
        """The fault kind for one request (or None), and a RNG for the fault's own choices."""
        with self._lock:
            draw = self._rng.random()
            detail_seed = self._rng.getrandbits(32)
            rates = self.config.rates_for(route, path)
        kind = None
        edge = 0.0
        for name in KINDS:
            edge += rates.get(name, 0.0)
            if draw < edge:
                kind = name
                break
        rng = random.Random(detail_seed)
        if kind == "malformed":
            kind = rng.choice(("truncated", "wrong_shape"))
        return kind, rng


def truncate(body: bytes) -> bytes:
    """Cut a body in half: a JSON document cut this way is never valid JSON."""
    return body[: max(1, len(body) // 2)]


def wrong_shape(payload: Any) -> Any:
    """A plausible shape drift: lists come back wrapped in an object, objects come back wrapped in
    `data` (so every required top-level field is missing)."""
    if isinstance(payload, list):
        return {"items": payload, "next_cursor": None}
    return {"data": payload}
