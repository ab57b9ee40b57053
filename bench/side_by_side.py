"""One bench, two commits, measured side by side: this tree's bench script serving this tree's code and
then a checkout of another commit (a `git worktree`; the script's `--tree`), alternating round by round
(which goes first alternates too), so that whatever else the machine does weighs on both alike. Each
round is one run of the bench with `--repeat 1`; the figure compared is a number the bench prints as JSON
(`--field`, a dotted path). The bench script must take `--tree` and `--repeat`.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/side_by_side.py --other /tmp/before --rounds 7 \\
        -- bench/ingest.py --events 30000 --batch 1000

Prints each round and the medians, and the ratio this tree / the other (for a time: below 1 is faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def dig(data: dict, path: str) -> float:
    for part in path.split("."):
        data = data[part]
    return float(data)


def one(tree: Path, command: list[str], field: str) -> float:
    """Run the bench serving `tree`'s code (this venv) and read `field` from the JSON it prints."""
    out = subprocess.run(
        [sys.executable, *command, "--repeat", "1", "--tree", str(tree)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dig(json.loads(out[out.index("{") :]), field)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--other", required=True, help="a checkout of the commit to compare with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--field", default="median_server_cpu_ms_per_1k_events", help="a dotted path into the bench's JSON"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the bench script and its arguments")
    args = parser.parse_args()
    command = [a for a in args.command if a != "--"]
    trees = {"this": ROOT, "other": Path(args.other).resolve()}
    commits = {
        name: subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True
        ).stdout.strip()
        for name, tree in trees.items()
    }
    samples: dict[str, list[float]] = {"this": [], "other": []}
    for i in range(args.rounds):
        order = ["this", "other"] if i % 2 == 0 else ["other", "this"]
        for name in order:
            started = time.perf_counter()
            samples[name].append(one(trees[name], command, args.field))
            print(
                f"round {i + 1} {name} ({commits[name]}): {samples[name][-1]:g} "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(
        json.dumps(
            {
                "command": " ".join(command),
                "field": args.field,
                "rounds": args.rounds,
                "commits": commits,
                "samples": samples,
                "medians": medians,
                "this_over_other": round(medians["this"] / medians["other"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
