"""Serve a simulated SMR backend until Ctrl-C: `python manage.py simulate_smr --port 8765`."""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Serve an SMR-compatible simulated backend (runs that climb, fail, wedge; optional faults)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, required=True, help="port to listen on (0: any free port)")
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
        parser.add_argument(
            "--api-key", default=None, help="the bearer key clients must send (default: smr-sim-key)"
        )
        parser.add_argument(
            "--project-id", default=None, help="SMR project id(s), comma-separated (default: sim-project)"
        )
        parser.add_argument("--runs", type=int, default=6, help="runs per project (default 6)")
        parser.add_argument(
            "--tick",
            type=float,
            default=1.0,
            help="seconds per world tick (default 1; 0 = only POST /_sim/tick moves it)",
        )
        parser.add_argument("--seed", type=int, default=0, help="world and fault seed (default 0)")
        parser.add_argument(
            "--faults",
            default="",
            help='e.g. "429=0.1,5xx=0.05,slow=0.05,malformed=0.05,'
            'denial=0.05,drop=0.02,usage:5xx=0.3,slow_seconds=35" (see docs/simulator.md)',
        )
        parser.add_argument("--warmup", type=int, default=0, help="ticks to apply before serving")
        parser.add_argument(
            "--shapes",
            default="a",
            help='wire shapes of the free-form fields, e.g. "a,b" (a, b, c, d; c and d: usage entries '
            "name only the actor id): one per run, drawn from the seed (default a)",
        )
        parser.add_argument(
            "--unreadable-every",
            type=int,
            default=0,
            metavar="N",
            help="serve every Nth inference usage entry of a run opaque (default 0: never)",
        )
        parser.add_argument(
            "--metric",
            action="append",
            default=None,
            metavar="NAME:DIRECTION",
            help="experiment metric, repeatable; run i uses the (i mod count)th "
            "(default val_loss:lower_is_better; DIRECTION: lower_is_better|higher_is_better)",
        )
        parser.add_argument(
            "--worker-downgrades",
            action="store_true",
            help="some runs (always index 5) get one worker on a cheaper model than requested",
        )
        parser.add_argument(
            "--shared-experiment",
            action="store_true",
            help="every result of a project's runs belongs to one experiment (past 500, out of every window)",
        )
        parser.add_argument("--verbose", action="store_true", help="log every request")

    def handle(
        self,
        *args,
        port,
        host,
        api_key,
        project_id,
        runs,
        tick,
        seed,
        faults,
        warmup,
        verbose,
        shapes,
        unreadable_every,
        metric,
        worker_downgrades,
        shared_experiment=False,
        **options,
    ):
        from smrweb.simulator.faults import FaultConfig
        from smrweb.simulator.server import DEFAULT_API_KEY, start_simulator
        from smrweb.simulator.world import DEFAULT_METRICS, parse_metrics, parse_shapes

        try:
            shapes = parse_shapes(shapes)
        except ValueError as exc:
            raise CommandError(f"--shapes: {exc}") from None
        try:
            metrics = parse_metrics(metric) if metric else DEFAULT_METRICS
        except ValueError as exc:
            raise CommandError(f"--metric: {exc}") from None
        if unreadable_every < 0:
            raise CommandError("--unreadable-every must be >= 0")

        try:
            fault_config = FaultConfig.parse(faults)
        except ValueError as exc:
            raise CommandError(f"--faults: {exc}") from None
        if runs < 0:
            raise CommandError("--runs must be >= 0")
        key = api_key or DEFAULT_API_KEY
        try:
            sim = start_simulator(
                host=host,
                port=port,
                api_key=key,
                project_ids=project_id,
                runs=runs,
                tick=tick,
                seed=seed,
                faults=fault_config,
                warmup=warmup,
                verbose=verbose,
                shapes=shapes,
                unreadable_every=unreadable_every,
                metrics=metrics,
                worker_downgrades=worker_downgrades,
                shared_experiment=shared_experiment,
            )
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc}") from None
        done = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, lambda *_: done.set())
        self.stdout.write(self.style.SUCCESS(f"SMR simulator listening on {sim.url}"))
        self.stdout.write(f"  api key     {key}")
        self.stdout.write(
            f"  projects    {', '.join(sim.world.project_ids)}  ({runs} runs each, seed {seed})"
        )
        self.stdout.write(f"  tick        {tick} s" + ("" if tick > 0 else " (manual: POST /_sim/tick)"))
        self.stdout.write(
            f"  shapes      {','.join(shapes)}   unreadable every {unreadable_every or 'never'}"
            f"   worker downgrades {'on' if worker_downgrades else 'off'}"
        )
        self.stdout.write(f"  metrics     {', '.join(f'{n}:{d}' for n, d in metrics)}")
        self.stdout.write(
            f"  faults      {fault_config.spec() if fault_config.rates or fault_config.scoped else 'none'}"
        )
        self.stdout.write(f"  control     {sim.url}/_sim/state  /_sim/stats  /_sim/freeze  /_sim/faults")
        self.stdout.flush()
        try:
            while not done.wait(0.5):
                pass
        finally:
            sim.stop()
            self.stdout.write("SMR simulator stopped")
