"""System checks for the deployment (`manage.py check --deploy`): what a worker needs to contain
validators."""

import ipaddress
import shutil

from django.conf import settings
from django.core.checks import Tags, Warning, register

from smrweb.core import sandbox


@register(Tags.security, deploy=True)
def validator_sandbox(app_configs, **kwargs):
    """Validators run under bubblewrap (finding 4); without it every verification is "cannot verify", and
    SMRWEB_SANDBOX=unconfined runs agents' artifacts with the worker's rights."""
    if settings.SMRWEB_SANDBOX == "unconfined":
        return [
            Warning(
                "Validators run unconfined (SMRWEB_SANDBOX=unconfined): a validator that executes an "
                "artifact runs it with the worker's rights, network and data.",
                hint="Install bubblewrap on every worker and unset SMRWEB_SANDBOX.",
                id="smrweb.W001",
            )
        ]
    if shutil.which("bwrap") is None:
        return [
            Warning(
                "bubblewrap (bwrap) is not installed here: verifications on this machine will answer "
                "'cannot verify'.",
                hint="apt install bubblewrap (the Docker image has it).",
                id="smrweb.W002",
            )
        ]
    # Finding N4: a uid, a cgroup and sized tmpfs per validator, or no validator at all.
    if problem := sandbox.confinement_from(settings).problem():
        return [
            Warning(
                f"Validators cannot be confined safely on this machine: {problem}. Verifications here will "
                "answer 'cannot verify safely'.",
                hint="Run the worker as root with bubblewrap 0.8 or later and a writable cgroup with the "
                'memory and pids controllers (docs/operations.md, "Validator sandbox").',
                id="smrweb.W003",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def sso_issuer_over_https(app_configs, **kwargs):
    """Single sign-on (docs/sso.md) sends the client secret and receives tokens at the issuer's endpoints."""
    if settings.SMRWEB_OIDC_ISSUER.startswith("http://"):
        return [
            Warning(
                f"SMRWEB_OIDC_ISSUER is plain HTTP ({settings.SMRWEB_OIDC_ISSUER}): the client secret and "
                "the tokens that sign people in travel unencrypted.",
                hint="Use the provider's https:// issuer.",
                id="smrweb.W190",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def metrics_open_to_loopback(app_configs, **kwargs):
    """/metrics names every project (finding N6). With loopback allowed and no token, a reverse proxy on the
    same host that does not send X-Forwarded-For (the only sign smrweb has of it) makes every client
    loopback."""
    loopback = [net for net in settings.SMRWEB_METRICS_ALLOW_IPS if net.overlaps(_LOOPBACK[net.version])]
    if settings.PRODUCTION and loopback and not settings.SMRWEB_METRICS_TOKEN:
        return [
            Warning(
                f"/metrics lets in {', '.join(map(str, loopback))} without a token: behind a reverse "
                "proxy on this host that sends no X-Forwarded-For, every client of the proxy is loopback.",
                hint="Set SMRWEB_METRICS_TOKEN and leave SMRWEB_METRICS_ALLOW_IPS empty "
                "(docs/operations.md#metrics-prometheus).",
                id="smrweb.W191",
            )
        ]
    return []


_LOOPBACK = {4: ipaddress.ip_network("127.0.0.0/8"), 6: ipaddress.ip_network("::1/128")}
