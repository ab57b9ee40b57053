"""An SMR-compatible HTTP backend for development and tests (never imported by production code).

`python manage.py simulate_smr --port N` serves it; tests call `start_simulator(...)`. See
docs/simulator.md for the world it simulates, the wire conventions and the fault injection.

Exports load lazily, so registering the app (for its management command) imports nothing else.
"""

from importlib import import_module

_EXPORTS = {
    "DEFAULT_API_KEY": "smrweb.simulator.server",
    "ROUTES": "smrweb.simulator.server",
    "SimulatorHandle": "smrweb.simulator.server",
    "start_simulator": "smrweb.simulator.server",
    "FaultConfig": "smrweb.simulator.faults",
    "FaultInjector": "smrweb.simulator.faults",
    "World": "smrweb.simulator.world",
    "pico_to_cents": "smrweb.simulator.world",
}
__all__ = [
    "DEFAULT_API_KEY",
    "ROUTES",
    "FaultConfig",
    "FaultInjector",
    "SimulatorHandle",
    "World",
    "pico_to_cents",
    "start_simulator",
]


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
