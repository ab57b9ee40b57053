"""`{% artifact_actions artifact %}`: Download, Copy link (a signed link that works without signing in)
and Copy sha256 for one artifact; `compact=True` gives just the two copy buttons, styled as links, for
table rows. The copy behaviour and its confirmation are `data-copy` in static/js/smrweb.js."""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.html import format_html

from smrweb.core.signed_links import default_ttl
from smrweb.dashboard.artifacts import signed_artifact_path, signed_bundle_path
from smrweb.dashboard.templatetags.smrweb import basename

register = template.Library()


def _lifetime(seconds: int) -> str:
    """Rounded down: a link lives at least its TTL, so the page never promises more than it keeps."""
    if seconds >= 3600:
        hours = seconds // 3600
        return f"{hours} hour{'s' if hours != 1 else ''}"
    minutes = max(1, seconds // 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


@register.simple_tag
def artifact_actions(artifact, *, run=None, compact: bool = False):
    """Pass the row's already loaded `run` where `artifact.run` is not cached (submissions, leaderboard),
    so that a table of N artifacts costs no query per row."""
    if run is not None and artifact.run_id == run.pk:
        artifact.run = run
    link = signed_artifact_path(artifact)
    sha = artifact.blob.sha256
    name = basename(artifact.path)
    link_title = (
        f"Copy a signed download link to {name}: it works without signing in (curl -OJ <link>) and "
        f"expires in {_lifetime(int(default_ttl().total_seconds()))}"
    )
    if compact:
        return format_html(
            '<button type="button" class="link" data-copy="{}" data-copy-label="signed link" title="{}" '
            'aria-label="Copy signed link to {}">link</button> · '
            '<button type="button" class="link" data-copy="{}" data-copy-label="sha256" title="Copy the '
            'sha256 {}" '
            'aria-label="Copy sha256 of {}">sha</button>',
            link,
            link_title,
            name,
            sha,
            sha,
            name,
        )
    download = reverse(
        "dashboard:artifact-download", args=[artifact.run.project.slug, artifact.run.external_id, artifact.pk]
    )
    return format_html(
        '<a class="btn small" href="{}" download>Download</a>\n'
        '<button type="button" class="btn small" data-copy="{}" data-copy-label="signed link" '
        'title="{}">Copy link</button>\n'
        '<button type="button" class="btn small" data-copy="{}" data-copy-label="sha256" title="Copy the '
        'sha256 {}">'
        "Copy sha256</button>",
        download,
        link,
        link_title,
        sha,
        sha,
    )


@register.simple_tag
def bundle_actions(sub):
    """Download bundle and Copy bundle link for a submission with an artifact (its blob loaded): the signed
    reproducibility bundle (`smrweb rescore` checks and re-runs it), the link working without signing in."""
    link = signed_bundle_path(sub)
    lifetime = _lifetime(int(default_ttl().total_seconds()))
    title = (
        "Copy a signed link to this submission's reproducibility bundle: it works without signing in "
        f"(curl -OJ <link>; smrweb rescore FILE) and expires in {lifetime}"
    )
    download = reverse("dashboard:submission-bundle", args=[sub.project.slug, sub.pk])
    return format_html(
        '<a class="btn small" href="{}" download data-bundle-download title="The artifact, validator, its '
        'output, kickoff and a signed manifest, as one tar.gz to re-score with smrweb rescore">Download '
        "bundle</a>\n"
        '<button type="button" class="btn small" data-copy="{}" data-copy-label="bundle link" title="{}">'
        "Copy bundle link</button>",
        download,
        link,
        title,
    )
