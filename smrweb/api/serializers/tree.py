"""The tree of attempts over the API (issue 39): `GET /api/v1/projects/{project}/tree`."""

from __future__ import annotations

from rest_framework import serializers

from smrweb.tracking.queries.tree import DEAD_STATES, EDGE_KINDS, REGRESSED


class TreeRollbackSerializer(serializers.Serializer):
    to = serializers.CharField(help_text="Where the run went back to: a submission or a checkpoint.")
    status = serializers.CharField(help_text="requested, dispatched, accepted, applied or failed.")


class TreeNodeSerializer(serializers.Serializer):
    run = serializers.CharField(help_text="The run's id.")
    name = serializers.CharField(help_text="Its display name, else its id.")
    url = serializers.CharField(help_text="Its page.")
    state = serializers.CharField()
    best_score = serializers.FloatField(allow_null=True, help_text="Its best verified score.")
    spend_usd = serializers.DecimalField(
        18, 6, help_text="What it cost (the source's billed total if stated)."
    )
    turns = serializers.IntegerField()
    parent = serializers.CharField(
        allow_null=True, help_text="The run it comes from in the tree (null: a root)."
    )
    kind = serializers.ChoiceField(
        choices=["", *EDGE_KINDS[:3]],
        allow_blank=True,
        help_text='How it comes from `parent` ("" for a root).',
    )
    via = serializers.CharField(allow_blank=True, help_text="A branch's checkpoint.")
    dead = serializers.ChoiceField(
        choices=["", *[str(s) for s in DEAD_STATES], REGRESSED],
        allow_blank=True,
        help_text="Why the branch is dead: the run failed, was abandoned, or its best verified score is "
        'worse than its parent\'s (`regressed`); "" when it is not.',
    )
    on_best_path = serializers.BooleanField(help_text="On the way from a root to the project's best run.")
    matches = serializers.BooleanField(
        help_text="False: it does not match the filters; a match comes from it."
    )
    size = serializers.IntegerField(help_text="Runs in its subtree, itself included.")
    rollbacks = TreeRollbackSerializer(many=True)


class TreeEdgeSerializer(serializers.Serializer):
    parent = serializers.CharField(help_text="The run it comes from (a rollback's: the run itself).")
    child = serializers.CharField()
    kind = serializers.ChoiceField(choices=EDGE_KINDS)
    via = serializers.CharField(
        allow_blank=True, help_text="A branch's checkpoint, where a rollback went back to."
    )
    status = serializers.CharField(allow_blank=True, help_text="A rollback's status.")


class TreeSerializer(serializers.Serializer):
    project = serializers.CharField()
    metric = serializers.CharField(help_text="The scenario's score metric.")
    maximize = serializers.BooleanField()
    total = serializers.IntegerField(help_text="The project's runs (archived ones with `archived=1`).")
    matched = serializers.IntegerField(help_text="The runs the filters keep (all of them without filters).")
    best_run = serializers.CharField(
        allow_null=True, help_text="The run holding the project's best verified score."
    )
    best_score = serializers.FloatField(allow_null=True)
    nodes = TreeNodeSerializer(
        many=True, help_text="Depth first, each run before the runs that come from it."
    )
    edges = TreeEdgeSerializer(many=True, help_text="Every link between the runs shown, of every kind.")
