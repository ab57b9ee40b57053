"""The demo's mail catcher: an SMTP server on loopback (aiosmtpd) that keeps every message it is given
as a file, `<dir>/<timestamp>-<n>.eml`, and sends nothing on. `runstack --demo` starts it and points
the web and worker processes at it (`EMAIL_URL=smtp://127.0.0.1:<port>`), so the demo's email alerts
arrive somewhere a new user can open them.

    python -m smrweb.stack.mailcatcher --dir var/demo/mail      # on its own, until Ctrl-C
"""

from __future__ import annotations

import argparse
import collections
import logging
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email import message_from_bytes, policy
from pathlib import Path

from aiosmtpd.controller import Controller

HOST = "127.0.0.1"
PREFERRED_PORT = 1025


def free_port(host: str = HOST, preferred: int = PREFERRED_PORT) -> int:
    """`preferred` when nothing listens there, else a port the system picks."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError(f"no free port on {host}")


@dataclass(frozen=True)
class Received:
    recipients: list[str]
    subject: str
    trigger: str  # the alert's trigger (X-Smrweb-Trigger), "" for other mail


class _Keeper:
    """aiosmtpd's handler: each message's bytes to a file of its own."""

    def __init__(self, catcher: MailCatcher):
        self.catcher = catcher

    async def handle_DATA(self, server, session, envelope) -> str:
        self.catcher.keep(envelope.original_content or envelope.content, envelope.rcpt_tos)
        return "250 Message accepted for delivery"


class MailCatcher:
    def __init__(self, directory: Path, *, host: str = HOST, port: int | None = None):
        self.directory = Path(directory)
        self.host = host
        self.port = port
        self.count = 0
        # What `news` has not handed out yet (the newest few hundred, if nobody asks).
        self.received: collections.deque[Received] = collections.deque(maxlen=500)
        self._lock = threading.Lock()
        self._controller: Controller | None = None

    @property
    def url(self) -> str:
        """What EMAIL_URL says to send here."""
        return f"smtp://{self.host}:{self.port}"

    def start(self) -> MailCatcher:
        logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd's: a line per SMTP command
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = free_port(self.host)
        self._controller = Controller(
            _Keeper(self), hostname=self.host, port=self.port, enable_SMTPUTF8=True, ready_timeout=10
        )
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> MailCatcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def keep(self, content: bytes, recipients: list[str]) -> Path:
        """Write one message; the name sorts by arrival (UTC time, then the count)."""
        with self._lock:
            self.count += 1
            n = self.count
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        path = self.directory / f"{stamp}-{n}.eml"
        path.write_bytes(content)
        message = message_from_bytes(content, policy=policy.default)
        subject = " ".join(str(message.get("Subject", "")).split())  # unfolded
        trigger = str(message.get("X-Smrweb-Trigger", "")).strip()
        with self._lock:
            self.received.append(Received(list(recipients), subject, trigger))
        return path

    def news(self) -> list[Received]:
        """What arrived since the last call."""
        with self._lock:
            taken = list(self.received)
            self.received.clear()
        return taken


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", default="mail", help="where messages are written")
    parser.add_argument("--port", type=int, default=None, help=f"default {PREFERRED_PORT}, else a free one")
    args = parser.parse_args(argv)
    with MailCatcher(Path(args.dir), port=args.port) as catcher:
        print(f"mail catcher: {catcher.url} → {catcher.directory}/", flush=True)
        try:
            while True:
                time.sleep(1)
                for message in catcher.news():
                    print(f"{', '.join(message.recipients)}: {message.subject}", flush=True)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
