"""A scenario's leaderboard across projects (issue 39, item 3): each project's best verified submission,
ranked in the scenario's direction, with its arena rank where one was recorded. Only the projects the caller
may read are listed; the caller passes them (the dashboard's and the API's own rule for that).

The best of each project is its kept figure (`ProjectFigures.best_id`: the project rule, verified and not
excluded), so the board reads a fixed number of queries whatever the number of submissions: the figure
rows, the best submissions by id, and the arena results of those submissions and of each project's."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Min

from smrweb.tracking.models import ArenaResult, Project, Scenario, Submission
from smrweb.tracking.queries.figures import figure_rows


@dataclass
class BoardRow:
    project: Project
    best: Submission | None  # the project's best verified submission, None when it has none
    place: int | None  # 1 for the leader; ties share a place; None without a verified submission
    arena: ArenaResult | None  # the newest arena result recorded for `best`
    best_arena_rank: int | None  # the best (lowest) arena rank recorded for any of the project's submissions


def scenario_board(scenario: Scenario, projects: list[Project]) -> list[BoardRow]:
    """`projects` (of `scenario`, those the caller may read) best first in the scenario's direction; the
    projects without a verified submission last, by slug."""
    projects = [p for p in projects if p.scenario_id == scenario.pk]
    for p in projects:
        p.scenario = scenario  # one scenario for all: figure_rows reads its direction
    rows = figure_rows(projects)
    best_ids = {p.pk: rows[p.pk].best_id for p in projects if rows.get(p.pk) and rows[p.pk].best_id}
    best = Submission.objects.select_related("run").in_bulk(best_ids.values())
    arena: dict[int, ArenaResult] = {}
    for result in ArenaResult.objects.filter(submission_id__in=best.keys()).order_by("created", "id"):
        arena[result.submission_id] = result  # the newest last
    best_rank = dict(
        ArenaResult.objects.filter(submission__project__in=projects, rank__isnull=False)
        .values("submission__project")
        .annotate(best=Min("rank"))
        .values_list("submission__project", "best")
        .order_by()
    )
    board = [
        BoardRow(
            project=p,
            best=(b := best.get(best_ids.get(p.pk))),
            place=None,
            arena=arena.get(b.pk) if b else None,
            best_arena_rank=best_rank.get(p.pk),
        )
        for p in projects
    ]
    sign = -1 if scenario.maximize else 1

    def order(row: BoardRow) -> tuple:  # the better score first, then who reached it first
        return (sign * row.best.score, row.best.ts, row.project.slug)

    scored = sorted((r for r in board if r.best is not None), key=order)
    for i, row in enumerate(scored):
        same = i and scored[i - 1].best.score == row.best.score
        row.place = scored[i - 1].place if same else i + 1
    return scored + sorted((r for r in board if r.best is None), key=lambda r: r.project.slug)
