"""The reviewer's workbench: what a preview, a diff and an ONNX summary cost, by size.

Pure functions on bytes (no database, no HTTP), timed in this process: `core.preview.render` of Python
source at the first-view cap (200 KB) and at the "show more" cap (2 MB, past the highlighting limit,
so escaped but not highlighted), `core.textdiff.diff` of two versions of a 1,000-line and of a
30,000-line file (the per-side limit) with highlighted lines, and `core.onnx_summary.summarize` of a
demo policy (~15 KB) and of a model at the validator's parameter limit. Min / median / max of N runs.

    .venv/bin/python bench/review.py            # print the table
    .venv/bin/python bench/review.py --append   # also append a dated section to docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smrweb.settings")

import django  # noqa: E402

django.setup()

from smrweb.core import onnx_summary, preview, textdiff  # noqa: E402
from smrweb.stack.harness import onnx_policy  # noqa: E402


def source(lines: int, seed: int) -> str:
    rng = random.Random(seed)
    out = ['"""A generated optimizer module."""', "", "import math", ""]
    while len(out) < lines:
        n = len(out)
        out += [
            f"def step_{n}(params, grads, lr={rng.uniform(1e-4, 1e-2):.5f}):",
            f'    """Update {n}: momentum {rng.random():.3f}."""',
            "    for p, g in zip(params, grads):",
            f"        p -= lr * g * math.sqrt({rng.randint(1, 9)})  # step {n}",
            "    return params",
            "",
        ]
    return "\n".join(out[:lines]) + "\n"


def mutate(text: str, seed: int, changes: int) -> str:
    rng = random.Random(seed)
    lines = text.splitlines()
    for _ in range(changes):
        i = rng.randrange(len(lines))
        choice = rng.random()
        if choice < 0.4:
            lines[i] = lines[i] + "  # tuned"
        elif choice < 0.7:
            lines.insert(i, "    # added by the agent")
        else:
            del lines[i]
    return "\n".join(lines) + "\n"


def timed(fn, runs: int) -> tuple[float, float, float]:
    fn()  # warm-up (lexers and onnx imported once)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return min(times), statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--append", action="store_true")
    args = parser.parse_args()

    first = source(5_600, 1).encode()[: preview.PREVIEW_BYTES + 1]
    full = source(60_000, 2).encode()[: preview.FULL_BYTES + 1]
    small_a = source(1_000, 3)
    small_b = mutate(small_a, 4, 30)
    big_a = source(30_000, 5)
    big_b = mutate(big_a, 6, 300)
    policy = onnx_policy(random.Random(7), flaw="")
    wide = onnx_policy(random.Random(8), flaw="wide")

    def diff(a: str, b: str):
        lexer = preview.lexer_for("opt.py")
        return textdiff.diff(
            a, b, old_html=preview.highlight_lines(a, lexer), new_html=preview.highlight_lines(b, lexer)
        )

    cases = [
        (
            f"preview, first view ({len(first) - 1:,} bytes of Python)",
            lambda: preview.render(first, name="opt.py", size=10**7),
        ),
        (
            f"preview, show more ({len(full) - 1:,} bytes, escaped only)",
            lambda: preview.render(full, name="opt.py", size=10**7, limit=preview.FULL_BYTES),
        ),
        ("diff, 1,000 lines, 30 edits, highlighted", lambda: diff(small_a, small_b)),
        ("diff, 30,000 lines, 300 edits, highlighted", lambda: diff(big_a, big_b)),
        (f"ONNX summary, demo policy ({len(policy):,} bytes)", lambda: onnx_summary.summarize(policy)),
        (
            f"ONNX summary, over the parameter limit ({len(wide):,} bytes)",
            lambda: onnx_summary.summarize(wide),
        ),
    ]
    rows = []
    for name, fn in cases:
        low, mid, high = timed(fn, args.runs)
        rows.append(f"| {name} | {low:,.1f} | {mid:,.1f} | {high:,.1f} |")
        print(rows[-1], flush=True)
    d = diff(big_a, big_b)
    print(f"30,000-line diff: +{d.added} −{d.removed}, {len(d.split):,} side-by-side rows")

    if args.append:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        )
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        section = [
            "",
            "## The reviewer's workbench: preview, diff and ONNX summary costs "
            f"({datetime.now(UTC):%Y-%m-%d})",
            "",
            f"`make bench` → `bench/review.py`, {os.cpu_count()} cores ({cpu}), "
            f"Python {platform.python_version()}, commit {commit.stdout.strip()}. Server-side work per "
            f"request before caching (a blob's preview and highlighted lines are then cached by digest), "
            f"ms (min / median / max of {args.runs}).",
            "",
            "| what | min | median | max |",
            "| --- | ---: | ---: | ---: |",
            *rows,
            "",
            f"The 30,000-line diff: +{d.added} −{d.removed}, {len(d.split):,} side-by-side rows.",
        ]
        with open(ROOT / "docs" / "benchmarks.md", "a") as out:
            out.write("\n".join(section) + "\n")


if __name__ == "__main__":
    main()
