"""The simulator's HTTP face: the SMR paths the connector calls, a `/_sim/` control API, and faults.

Stdlib only (`http.server.ThreadingHTTPServer`); no Django. `start_simulator(...)` runs it in a
background thread and returns a handle (`.url`, `.world`, `.stats`, `.faults`, `.stop()`).

Layout: `context` (Ctx, Response, HttpError), `handlers` (one function a route, by noun), `routes` (the
table and matching), `stats` (counters), `httpd` (server, request handler, faults, control API),
`handle` (`start_simulator`, `SimulatorHandle`). This package re-exports the names other code imports
from `smrweb.simulator.server`.
"""

from smrweb.simulator.server.context import Ctx, HttpError, Response
from smrweb.simulator.server.handle import DEFAULT_API_KEY, SimulatorHandle, start_simulator
from smrweb.simulator.server.handlers import ACTIVE_RUNS_CAP
from smrweb.simulator.server.httpd import LOOPBACK, SimulatorServer
from smrweb.simulator.server.routes import ROUTES, Route, match_route
from smrweb.simulator.server.stats import Stats

__all__ = [
    "ACTIVE_RUNS_CAP",
    "DEFAULT_API_KEY",
    "LOOPBACK",
    "ROUTES",
    "Ctx",
    "HttpError",
    "Response",
    "Route",
    "SimulatorHandle",
    "SimulatorServer",
    "Stats",
    "match_route",
    "start_simulator",
]
