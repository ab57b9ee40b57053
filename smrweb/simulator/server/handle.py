"""In process: `start_simulator(...)` builds (or takes) a world, serves it from a background thread,
ticks it on a timer, and returns a `SimulatorHandle` to read and stop it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Self

from smrweb.simulator.faults import FaultConfig, FaultInjector
from smrweb.simulator.server.httpd import SimulatorServer
from smrweb.simulator.server.stats import Stats
from smrweb.simulator.world import DEFAULT_METRICS, DEFAULT_PROJECT_ID, World

DEFAULT_API_KEY = "smr-sim-key"


@dataclass
class SimulatorHandle:
    server: SimulatorServer
    world: World
    faults: FaultInjector
    stats: Stats
    api_key: str
    _threads: list[threading.Thread] = field(default_factory=list)
    _ticker_stop: threading.Event = field(default_factory=threading.Event)

    @property
    def host(self) -> str:
        return self.server.server_address[0]

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        host = self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def project_id(self) -> str:
        return self.world.project_ids[0]

    def set_faults(self, spec: FaultConfig | str) -> FaultConfig:
        return self.faults.set(spec)

    def stop(self) -> None:
        """Stop ticking and serving; the world stays readable (and can be served again)."""
        self._ticker_stop.set()
        self.server.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_simulator(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str = DEFAULT_API_KEY,
    project_ids: list[str] | tuple[str, ...] | str | None = None,
    runs: int = 6,
    tick: float = 1.0,
    seed: int = 0,
    faults: FaultConfig | str | None = None,
    warmup: int = 0,
    auto_tick: bool = True,
    world: World | None = None,
    start_time: datetime | None = None,
    verbose: bool = False,
    shapes: list[str] | tuple[str, ...] | str = ("a",),
    unreadable_every: int = 0,
    metrics: list | tuple = DEFAULT_METRICS,
    worker_downgrades: bool = False,
    shared_experiment: bool = False,
) -> SimulatorHandle:
    """Serve a simulated SMR backend from a background thread.

    `tick` is both the virtual time one tick stands for and, with `auto_tick`, the wall-clock period
    of the ticker thread (`tick <= 0` or `auto_tick=False`: the world moves only through `world.tick()`
    or `POST /_sim/tick`). `warmup` ticks are applied before serving, with the start time moved back
    so that virtual time matches the wall clock. Pass an existing `world` to serve it again (e.g. on
    the same port after `stop()`, to simulate a backend restart or a refused connection meanwhile).
    `shapes`, `unreadable_every`, `metrics`, `worker_downgrades` and `shared_experiment` are passed to
    `World` (see there).
    """
    if world is None:
        if isinstance(project_ids, str):
            project_ids = [p.strip() for p in project_ids.split(",") if p.strip()]
        tick_seconds = tick if tick > 0 else 1.0
        if start_time is None:
            start_time = datetime.now(UTC) - timedelta(seconds=warmup * tick_seconds)
        world = World(
            seed=seed,
            project_ids=project_ids or [DEFAULT_PROJECT_ID],
            runs=runs,
            tick_seconds=tick_seconds,
            start_time=start_time,
            shapes=shapes,
            unreadable_every=unreadable_every,
            metrics=metrics,
            worker_downgrades=worker_downgrades,
            shared_experiment=shared_experiment,
        )
        world.tick(warmup)
    injector = faults if isinstance(faults, FaultInjector) else FaultInjector(faults, seed=seed)
    stats = Stats()
    server = SimulatorServer(
        (host, port), world=world, api_key=api_key, faults=injector, stats=stats, verbose=verbose
    )
    handle = SimulatorHandle(server=server, world=world, faults=injector, stats=stats, api_key=api_key)
    serve = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="smr-simulator-http", daemon=True
    )
    serve.start()
    handle._threads.append(serve)
    if auto_tick and tick > 0:

        def ticker():
            while not handle._ticker_stop.wait(tick):
                world.tick()

        ticking = threading.Thread(target=ticker, name="smr-simulator-ticker", daemon=True)
        ticking.start()
        handle._threads.append(ticking)
    return handle
