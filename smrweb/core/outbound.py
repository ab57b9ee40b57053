"""The one way smrweb sends a request to an address a user gave it (red-team finding 2): rollback webhooks,
a project's own SMR backend, and whatever comes later (alert webhooks).

- http(s) only, no user:password@, a host name or address and an optional port;
- the host is resolved once, and refused if any of its addresses is not a public unicast address
  (loopback, RFC 1918, ULA, link-local including 169.254.169.254, 0.0.0.0/8, CGNAT, multicast, reserved,
  or an IPv4 address of those kinds embedded in IPv6: mapped, NAT64, 6to4, Teredo);
- the connection goes to the vetted address (no second lookup, so a DNS answer that changes after the
  check cannot move it), with the original Host header and TLS server name (the certificate is still
  verified for the name);
- no redirects, no proxies from the environment, timeouts, and a cap on how much of an answer is read;
  callers never show the answer's body back (status and a fixed summary only).

`SMRWEB_WEBHOOK_ALLOWED_HOSTS` names hosts (`host` or `host:port`) an operator trusts although they are
private; `SMRWEB_ALLOW_PRIVATE_WEBHOOKS=true` turns the address check off (labs). Neither lifts the rest.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")
log = logging.getLogger(__name__)


class Refused(Exception):
    """An address smrweb will not send to; the message says why, fit to show the user."""


class Unresolvable(Refused):
    """The host has no address right now (a typo, or DNS is down): at send time, worth retrying."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as written in the URL (lower-cased), brackets removed
    port: int
    address: IPAddress  # the vetted address the connection goes to


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def why_not_public(address: IPAddress) -> str | None:
    """None for a public unicast address; else what kind of address it is."""
    if isinstance(address, ipaddress.IPv6Address) and (inner := _embedded_v4(address)) is not None:
        reason = why_not_public(inner)
        return f"an IPv6 address embedding {inner}, {reason}" if reason else None
    for kind, test in (
        ("unspecified", "is_unspecified"),
        ("loopback", "is_loopback"),
        ("link-local", "is_link_local"),
        ("multicast", "is_multicast"),
        ("private", "is_private"),
        ("reserved", "is_reserved"),
    ):
        if getattr(address, test):
            return f"a {kind} address"
    if not address.is_global:  # what remains: shared address space (CGNAT, 100.64.0.0/10) and the like
        return "not a public address"
    return None


def _allow_listed(host: str, port: int) -> bool:
    allowed = {entry.strip().lower() for entry in settings.SMRWEB_WEBHOOK_ALLOWED_HOSTS if entry.strip()}
    bracketed = f"[{host}]" if ":" in host else host
    return host in allowed or bracketed in allowed or f"{bracketed}:{port}" in allowed


def parse(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an acceptable URL; Refused otherwise. No network."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"Not a valid URL ({exc}).") from None
    if parts.scheme not in ("http", "https"):
        raise Refused("Only http:// and https:// addresses.")
    if parts.username is not None or parts.password is not None:
        raise Refused("An address with a user name or password in it is not accepted.")
    host = (parts.hostname or "").lower()
    if not host:
        raise Refused("The address has no host.")
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80)


def allow_listed(url: str) -> bool:
    """Whether the operator lists this URL's host (SMRWEB_WEBHOOK_ALLOWED_HOSTS); Refused if malformed."""
    _, host, port = parse(url)
    return _allow_listed(host, port)


def vet(url: str) -> Target:
    """Resolve the URL's host once and check every address; the Target to connect to, or Refused.

    A refusal never says what a host name resolved to, nor whether it resolved at all (finding N9):
    whoever may save a webhook would otherwise learn the internal DNS (`minio (172.18.0.3) is a private
    address`). Only an address typed as such is named with its kind; the details go to the log."""
    scheme, host, port = parse(url)
    literal = _is_address(host)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        log.info("outbound: %s does not resolve (%s)", host, exc)
        raise Unresolvable(_not_public(host)) from None
    addresses = []
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])  # drop an IPv6 zone id
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        log.info("outbound: %s has no address", host)
        raise Unresolvable(_not_public(host))
    if not (settings.SMRWEB_ALLOW_PRIVATE_WEBHOOKS or _allow_listed(host, port)):
        for address in addresses:
            if reason := why_not_public(address):
                if literal:
                    raise Refused(f"{host} is {reason}: {_ONLY_PUBLIC}")
                log.warning("outbound: refused %s: it resolves to %s, %s", host, address, reason)
                raise Refused(_not_public(host))
    return Target(scheme=scheme, host=host, port=port, address=addresses[0])


_ONLY_PUBLIC = (
    "smrweb sends only to public addresses, unless the operator lists the host in "
    "SMRWEB_WEBHOOK_ALLOWED_HOSTS."
)


def _not_public(host: str) -> str:
    """One answer for a name that resolves to a non-public address and for one that does not resolve."""
    return f"The host {host} does not resolve to a public address from this server: {_ONLY_PUBLIC}"


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


class GuardedTransport(httpx.HTTPTransport):
    """An httpx transport that vets every request's host and connects to the vetted address."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = vet(str(request.url))
        request.url = request.url.copy_with(host=str(target.address))  # the Host header keeps the name
        if target.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": target.host}
        return super().handle_request(request)


def client(*, timeout: float, **kwargs) -> httpx.Client:
    """An httpx client whose every request goes through the guard: no redirects, no environment proxies."""
    return httpx.Client(
        transport=GuardedTransport(), timeout=timeout, follow_redirects=False, trust_env=False, **kwargs
    )


@dataclass(frozen=True)
class Answer:
    status: int
    headers: httpx.Headers


def post(url: str, *, content: bytes, headers: dict[str, str], timeout: float) -> Answer:
    """POST to a user-supplied URL through the guard. At most SMRWEB_OUTBOUND_MAX_RESPONSE_BYTES of the
    answer are read (and dropped): callers get its status and headers, never its body."""
    with (
        client(timeout=timeout) as http,
        http.stream("POST", url, content=content, headers=headers) as response,
    ):
        read = 0
        for chunk in response.iter_raw():
            read += len(chunk)
            if read >= settings.SMRWEB_OUTBOUND_MAX_RESPONSE_BYTES:
                break
        return Answer(status=response.status_code, headers=response.headers)


def signed_headers(
    secret: str, body: bytes, *, timestamp: int, idempotency_key: str, agent: str
) -> dict[str, str]:
    """The headers of every signed POST smrweb makes (rollback, stop and alert webhooks): an HMAC-SHA256
    over `<timestamp>.<body>` with the receiver's secret, so it can check the sender and refuse replays,
    and an Idempotency-Key that stays the same across retries of one delivery."""
    signature = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Smrweb-Timestamp": str(timestamp),
        "X-Smrweb-Signature": f"sha256={signature}",
        "Idempotency-Key": idempotency_key,
        "User-Agent": agent,
    }
