"""`smrweb rescore BUNDLE`: check a submission's reproducibility bundle and run its validator again here.

    smrweb rescore smrweb-bundle-hill-42.tar.gz --server https://smrweb.example.org
    smrweb rescore smrweb-bundle-hill-42.tar.gz --key bundle-key.pem

1. The bundle is checked before anything in it runs: the manifest's Ed25519 signature against the key
   you trust (`--key`: a file or the text of a PEM key, the base64 raw key, or the JSON of
   `GET /api/v1/bundle-key`; `--server URL`: that endpoint, fetched without an account), then the sha256
   and size of every file against the manifest, and no file the manifest does not list. Any difference
   refuses the bundle (exit 4) and nothing runs.
2. The scenario's validator runs on the artifact through the same code as the server's verification
   (`core.sandbox.run_validator`, the scripts carried in the bundle as `{validators}`), confined by
   bubblewrap: as on a worker when run as root on a host that gives it (a uid and a cgroup of its own),
   else as you, in namespaces of its own (`PersonalConfinement`: no network, a read-only root, limits per
   process). Without bubblewrap it does not run unless you pass `--unconfined`, and the exit is 5.
3. The claim holds when the validator passes, the claimed score is within the scenario's bounds, and,
   when the validator prints a score (a line `score: <number>`), that score equals the claimed one within
   the scenario's tolerance (exact when the scenario states none).

Exit codes: 0 the claim holds; 1 it does not (the validator failed or timed out, or scored otherwise);
2 usage error; 3 the key server is unreachable; 4 the bundle is refused (tampered, signed by another key,
not a bundle); 5 it cannot be re-scored here (no validator, a toolchain or the sandbox missing).

Pure of Django: the format is `core.bundles`, the sandbox `core.sandbox` (tests/test_layers.py lets this
module, and only it, import those two).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

from smrweb.core import bundles, sandbox

EXIT_HOLDS, EXIT_DOES_NOT_HOLD, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_REFUSED, EXIT_CANNOT = 0, 1, 2, 3, 4, 5
KEY_PATH = "/api/v1/bundle-key"
# A validator that scores says so on a line of its own: `score: 0.83` (also `score=0.83`).
SCORE_LINE = re.compile(r"^\s*score\s*[:=]\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$", re.I | re.M)


class Usage(Exception):
    """A usage error (exit 2)."""


class Unreachable(Exception):
    """The key server did not answer (exit 3)."""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "rescore",
        help="check a submission's signed bundle and re-run its validator here",
        description=__doc__.split("\n\n", 2)[2].split("\n\nPure of Django")[0],
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("bundle", metavar="BUNDLE", help="the bundle (.tar.gz) downloaded from smrweb")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("--key", help="the public key you trust: a file, or its text (PEM, base64, or JSON)")
    keys.add_argument(
        "--server", help="fetch the key from this smrweb server's /api/v1/bundle-key [SMRWEB_URL]"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the validator may run (default 300)")
    p.add_argument(
        "--unconfined",
        action="store_true",
        help="run the validator without the bubblewrap sandbox when it is missing (trusted bundles only)",
    )
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON object")


def trusted_keys(args) -> list:
    if args.key:
        text = Path(args.key).read_text() if os.path.isfile(args.key) else args.key
        try:
            return bundles.load_public_keys(text)
        except ValueError as exc:
            raise Usage(f"--key is not a public key: {exc}") from None
    server = args.server or os.environ.get("SMRWEB_URL")
    if not server:
        raise Usage("give the key you trust: --key FILE, or --server URL (or SMRWEB_URL) to fetch it")
    import httpx

    url = server.rstrip("/") + KEY_PATH
    try:
        answer = httpx.get(url, timeout=15.0, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise Unreachable(f"{url}: {exc}") from None
    if answer.status_code != 200:
        raise Unreachable(f"{url} answered {answer.status_code}, not the key")
    try:
        return bundles.load_public_keys(answer.text)
    except ValueError as exc:
        raise Unreachable(f"{url} did not answer a key: {exc}") from None


def claimed_score_holds(manifest: dict, ran: sandbox.SandboxResult) -> tuple[int, str, float | None]:
    """(exit code, why, the score the validator printed or None) for a validator run on the bundle."""
    claimed = manifest.get("claimed_score")
    scenario = manifest.get("scenario") or {}
    if ran.outcome == sandbox.CANNOT_VERIFY:
        return EXIT_CANNOT, f"the validator could not run here: {ran.detail}", None
    if ran.outcome != sandbox.PASSED:
        return EXIT_DOES_NOT_HOLD, f"the validator did not pass ({ran.outcome}: {ran.detail})", None
    if not isinstance(claimed, (int, float)) or not math.isfinite(claimed):
        return EXIT_DOES_NOT_HOLD, "the manifest claims no finite score", None
    low, high = scenario.get("score_min"), scenario.get("score_max")
    if (low is not None and claimed < low) or (high is not None and claimed > high):
        return EXIT_DOES_NOT_HOLD, f"the claimed score {claimed:g} is outside the scenario's bounds", None
    printed = SCORE_LINE.findall(ran.output_tail)
    if not printed:
        return EXIT_HOLDS, "the validator passes (it prints no score of its own to compare)", None
    score = float(printed[-1])
    tolerance = scenario.get("score_tolerance")
    within = abs(score - claimed) <= tolerance if isinstance(tolerance, (int, float)) else score == claimed
    how = f"within {tolerance:g}" if isinstance(tolerance, (int, float)) else "exactly"
    if within:
        return EXIT_HOLDS, f"the validator passes and scores {score:g}, as claimed ({how})", score
    return EXIT_DOES_NOT_HOLD, f"the validator scores {score:g}, not the claimed {claimed:g} ({how})", score


def _kind(confinement) -> str:
    return "worker" if isinstance(confinement, sandbox.Confinement) else "personal"


def sandbox_for(scripts: str):
    """The worker's own confinement when this runs as root and the host gives it (a uid and a cgroup of
    its own), else bubblewrap as the person running it (`PersonalConfinement`)."""
    if os.geteuid() == 0:
        full = sandbox.Confinement(readonly=(scripts,))
        if not full.problem():
            return full
    return sandbox.PersonalConfinement(readonly=(scripts,))


def _readable(folder: Path) -> None:
    """The sandbox runs the validator as a uid of its own: let it read what was extracted."""
    for dirpath, _dirnames, filenames in os.walk(folder):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)


def rescore(args, out=None) -> int:
    out = out or sys.stdout
    keys = trusted_keys(args)
    with tempfile.TemporaryDirectory(prefix="smrweb-rescore-") as tmp:
        folder = Path(tmp)
        try:
            opened = bundles.open_bundle(args.bundle, keys, folder)
        except bundles.BundleRefused as exc:
            print(f"smrweb: bundle refused: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        m = opened.manifest
        sub, scenario, validator = m.get("submission", {}), m.get("scenario", {}), m.get("validator", {})
        if not args.json:
            print(
                f"bundle: signed by key {opened.key_id}; {len(m['files'])} files match the manifest\n"
                f"submission #{sub.get('id')} of project {m.get('project', {}).get('slug')}, run "
                f"{m.get('run', {}).get('external_id')}: claimed {scenario.get('score_metric', 'score')} "
                f"{m.get('claimed_score')}\n"
                f"scenario {scenario.get('key')} (version {scenario.get('version', {}).get('updated')}, "
                f"definition {str(scenario.get('version', {}).get('definition_sha256'))[:12]}); validator "
                f"{validator.get('name')} (digest {str(validator.get('digest'))[:12]})",
                file=out,
            )
        command = validator.get("command") or []
        confinement = None
        if not command:
            ran = sandbox.SandboxResult(sandbox.CANNOT_VERIFY, None, "", 0.0, "the scenario has no validator")
        else:
            _readable(folder)
            scripts = str(folder / "validator")
            confinement = None if args.unconfined else sandbox_for(scripts)
            with open(opened.file(m["artifact"]["file"]), "rb") as artifact:
                ran = sandbox.run_validator(
                    list(command),
                    artifact,
                    artifact_name=str(m["artifact"].get("path") or "artifact"),
                    timeout=args.timeout,
                    extra_placeholders={"validators": scripts},
                    confinement=confinement,
                )
        code, why, score = claimed_score_holds(m, ran)
        if code == EXIT_CANNOT and "safely" in ran.detail and not args.unconfined:
            why += " (--unconfined runs it without the sandbox: only for a bundle you trust)"
        recorded = (m.get("verification") or {}).get("outcome") or "not verified"
        verdict = {
            EXIT_HOLDS: "holds",
            EXIT_DOES_NOT_HOLD: "does not hold",
            EXIT_CANNOT: "cannot re-score here",
        }[code]
        if args.json:
            print(
                json.dumps(
                    {
                        "verdict": verdict,
                        "exit_code": code,
                        "reason": why,
                        "key_id": opened.key_id,
                        "submission": sub.get("id"),
                        "claimed_score": m.get("claimed_score"),
                        "rescored": score,
                        "outcome": ran.outcome,
                        "validator_exit_code": ran.exit_code,
                        "server_outcome": recorded,
                        "sandbox": "none" if confinement is None else _kind(confinement),
                    }
                ),
                file=out,
            )
        else:
            tail = ran.output_tail.strip()
            if tail:
                print("validator output:\n  " + "\n  ".join(tail.splitlines()[-20:]), file=out)
            where = "without a sandbox" if confinement is None else f"in the {_kind(confinement)} sandbox"
            print(
                f"validator here ({where}): {ran.outcome} ({ran.detail}); on the server: {recorded}", file=out
            )
            print(f"{'claimed score ' if code != EXIT_CANNOT else ''}{verdict}: {why}", file=out)
        return code
