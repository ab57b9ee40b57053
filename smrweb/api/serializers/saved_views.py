from __future__ import annotations

from django.http import QueryDict
from django.urls import reverse
from rest_framework import serializers

from smrweb.tracking.models import SavedView
from smrweb.tracking.services.saved_views import NAME_MAX, QUERY_MAX


class SavedViewSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.get_username", read_only=True)
    params = serializers.SerializerMethodField(
        help_text="The view's query read out: each parameter with its values (`col` in column order)."
    )
    page_url = serializers.SerializerMethodField(help_text="The project page showing this view.")
    runs_url = serializers.SerializerMethodField(help_text="This API's runs list through this view.")

    class Meta:
        model = SavedView
        fields = [
            "id",
            "name",
            "owner",
            "shared",
            "query",
            "params",
            "page_url",
            "runs_url",
            "created",
            "updated",
        ]
        read_only_fields = fields

    def get_params(self, view: SavedView) -> dict[str, list[str]]:
        return {key: values for key, values in QueryDict(view.query).lists()}

    def get_page_url(self, view: SavedView) -> str:
        return f"{view.project.get_absolute_url()}?view={view.pk}"

    def get_runs_url(self, view: SavedView) -> str:
        return f"{reverse('api:run-list', args=[view.project.slug])}?view={view.pk}"


class SavedViewIn(serializers.Serializer):
    name = serializers.CharField(max_length=NAME_MAX, help_text="Saving a name you already have replaces it.")
    shared = serializers.BooleanField(default=False, help_text="Shown to every member (reviewers may share).")
    query = serializers.CharField(
        max_length=QUERY_MAX,
        allow_blank=True,
        default="",
        help_text="The runs list's query string: filters (`state`, `tag`, `param`, `q`…), `archived`, "
        "`col` (repeatable, in order), `sort` and `group`; anything else is left out.",
    )
