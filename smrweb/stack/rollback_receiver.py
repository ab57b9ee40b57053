"""The demo harness's webhook: what a team's harness does when smrweb tells it to roll back, steers a run
(messages, pause and resume go to the harness's inbox, stack/steering.py) or starts the next run.

It checks the signature (timestamp + body, HMAC-SHA256 with the project's secret), ignores a delivery
it has already applied (Idempotency-Key), "restores" the target, and reports back the way a harness
would — a runtime message on the run, pushed through the REST API with the project's token. A
`smrweb.start` starts a run of the demo harness with the id smrweb chose; it posts the kickoff as the
run's first runtime message and climbs (`smrweb.stack.harness.answer_start`).

    python -m smrweb.stack.rollback_receiver --port 8002 --url http://127.0.0.1:8000 \\
        --token-file var/demo/demo-tokens --secrets-file var/demo/demo-webhook-secrets
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from smrweb.stack import steering

MAX_SKEW_SECONDS = 300


def _read_pairs(path: str) -> dict[str, str]:
    return dict(line.split() for line in open(path, encoding="utf-8") if line.strip())


def make_handler(
    *, url: str, tokens: dict[str, str], secrets: dict[str, str], inbox=None, interval: float = 1.5
):
    applied: set[str] = set()
    lock = threading.Lock()
    start = _starter(url=url, tokens=tokens, interval=interval, inbox=inbox)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(min(int(self.headers.get("Content-Length") or 0), 1_000_000))
            try:
                payload = json.loads(body)
                project = payload["project"]
                stamp = self.headers["X-Smrweb-Timestamp"]
                given = self.headers["X-Smrweb-Signature"].removeprefix("sha256=")
            except (KeyError, ValueError, TypeError):
                return self._answer(400, "not a smrweb rollback")
            secret = secrets.get(project, "")
            expected = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
            if not secret or not hmac.compare_digest(given, expected):
                return self._answer(401, "bad signature")
            if abs(time.time() - int(stamp)) > MAX_SKEW_SECONDS:
                return self._answer(401, "stale timestamp")
            key = self.headers.get("Idempotency-Key", "")
            with lock:
                if key in applied:
                    return self._answer(200, "already applied")
                applied.add(key)
            if payload.get("type") in steering.TYPES:
                return self._steer(payload, key)
            if payload.get("type") == "smrweb.start":  # start the next run (smrweb.stack.harness)
                status, text = start(payload)
                if status >= 300:
                    with lock:
                        applied.discard(key)  # let the retry start it
                return self._answer(status, text)
            target = payload["target"]
            what = (
                f"submission #{target['id']} (score {target.get('score')}, "
                f"{(target.get('artifact_sha256') or '')[:12]})"
                if target["type"] == "submission"
                else f"checkpoint {target['id']}"
            )
            message = {
                "type": "message",
                "topic": "harness.rollback",
                "body": f"Rolled back to {what} as asked by {payload['requested_by']}: {payload['reason']}",
            }
            try:
                httpx.post(
                    f"{url}/api/v1/projects/{project}/runs/{payload['run']}/events",
                    json=[message],
                    headers={"Authorization": f"Bearer {tokens[project]}"},
                    timeout=10,
                ).raise_for_status()
            except (httpx.HTTPError, KeyError) as exc:
                with lock:
                    applied.discard(key)  # let the retry apply it
                return self._answer(503, f"could not report back: {exc}")
            return self._answer(200, "rolled back")

        def _steer(self, payload: dict, key: str):
            """A message, pause or resume: left in the harness's inbox (stack/steering.py)."""
            if inbox is None:
                status, text = 409, "this receiver has no harness inbox to steer"
            else:
                status, text = steering.deliver(payload, inbox)
            if status >= 300:
                with lock:
                    applied.discard(key)  # not taken: a retry may be
            return self._answer(status, text)

        def _answer(self, status: int, text: str):
            data = json.dumps({"status": text}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, fmt, *args):
            print(f"rollback-receiver {self.address_string()} {fmt % args}", flush=True)

    Handler.stop_harness = staticmethod(start.stop)  # the runs it started stop being stepped
    return Handler


def _starter(*, url: str, tokens: dict[str, str], interval: float, inbox=None):
    """`smrweb.start` → a run of the demo harness, stepped by a thread of this process (made on the first
    start, so a receiver that is never asked starts nothing); it reads the same inbox as the harness, so
    the runs it starts can be steered too."""
    state: dict = {}
    made = threading.Lock()
    stopping = threading.Event()

    def start(payload: dict) -> tuple[int, str]:
        from smrweb.stack.harness import Harness, answer_start

        with made:
            if "harness" not in state:
                state["harness"] = Harness(url, tokens, random.Random(), inbox)
                state["thread"] = threading.Thread(
                    target=state["harness"].drive, args=(interval, stopping), daemon=True
                )
                state["thread"].start()
        return answer_start(state["harness"], payload)

    def stop() -> None:
        """Stop stepping the started runs, and wait for a step under way to end (a test tearing its
        database down must not meet a push)."""
        stopping.set()
        if "thread" in state:
            state["thread"].join(timeout=30)

    start.stop = stop
    return start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--url", required=True, help="smrweb's base URL, to report back")
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--secrets-file", required=True)
    args = parser.parse_args(argv)
    handler = make_handler(
        url=args.url.rstrip("/"),
        tokens=_read_pairs(args.token_file),
        secrets=_read_pairs(args.secrets_file),
        inbox=steering.inbox_dir(args.token_file),
    )
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    print(f"rollback receiver on http://127.0.0.1:{args.port}/rollback", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
