"""Reproducibility bundles over the API (issue 39): a submission's signed bundle, for whoever may read the
submission, and the public key that checks it, for anyone (docs/api.md#reproducibility-bundles)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from smrweb.api.access import submission_for
from smrweb.api.schema import ERROR, ERRORS
from smrweb.sources import bundles

KEY = inline_serializer(
    "BundleKey",
    {
        "algorithm": serializers.CharField(help_text="`ed25519`"),
        "key_id": serializers.CharField(help_text="The first 16 hex digits of the sha256 of the raw key."),
        "public_key": serializers.CharField(help_text="The 32 raw bytes of the public key, base64."),
        "public_key_pem": serializers.CharField(help_text="The same key as a PEM SubjectPublicKeyInfo."),
        "format": serializers.CharField(help_text="The bundle format these keys sign: `smrweb-bundle/1`."),
        "previous": serializers.ListField(
            child=serializers.DictField(),
            help_text="Keys of earlier secrets still accepted (SECRET_KEY_FALLBACKS): older bundles verify.",
        ),
    },
)


class SubmissionBundle(APIView):
    @extend_schema(
        operation_id="submission_bundle",
        summary="A submission's reproducibility bundle (signed tar.gz)",
        description="The artifact's bytes, the validator scripts the scenario runs, the validator's recorded "
        "output, the kickoff text and `manifest.json` (project, run, ids, times, commit, model profile, "
        "scenario key and version, validator name and digest, claimed score, and the sha256 of every file), "
        "signed with Ed25519 in `manifest.json.sig`; check it with `GET /api/v1/bundle-key` and re-score it "
        "with `smrweb rescore`. Whoever may read the submission may download it.",
        responses={
            (200, "application/gzip"): OpenApiTypes.BINARY,
            **ERRORS,
            409: OpenApiResponse(ERROR, description="`no_artifact`: the submission has no stored artifact."),
        },
    )
    def get(self, request, slug: str, submission_id: int):
        sub = submission_for(request, slug, submission_id)
        return bundles.download(sub.project, sub.pk)


class BundleKey(APIView):
    """The public key bundles are signed with: no token or session needed."""

    permission_classes = []
    authentication_classes = []

    @extend_schema(
        operation_id="bundle_key", summary="The public key that signs bundles", responses={200: KEY}
    )
    def get(self, request):
        return Response(bundles.published_keys())
