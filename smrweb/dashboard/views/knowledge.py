"""Project knowledge: the carry-forward block (copyable), the entries, and adding / editing them by hand.
Thin: validation, roles and the audit trail live in `tracking.services.knowledge`; the forms only give errors
a
place next to their field (400, never 500)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from smrweb.dashboard.access import project_for_user
from smrweb.dashboard.charts import arena as arena_chart
from smrweb.dashboard.views.shares import share_control
from smrweb.tracking import queries
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import KnowledgeEntry, KnowledgeKind, Role, ShareKind, Submission
from smrweb.tracking.queries.arena import arena_history
from smrweb.tracking.services import knowledge

ENTRIES_SHOWN = 200
REASON_LABELS = {
    "invalid": "invalid",
    "rejected": "rejected",
    "refused": "refused by the arena",
    "regressed": "regressed",
    "failed_approach": "failed approach",
    "arena_regressed": "arena regressed",
    "run_failed": "run failed",
    "run_abandoned": "run abandoned",
}


class EditForm(forms.Form):
    kind = forms.ChoiceField(choices=KnowledgeKind.choices, initial=KnowledgeKind.NOTE)
    title = forms.CharField(max_length=knowledge.TITLE_MAX)
    body = forms.CharField(
        required=False,
        max_length=knowledge.BODY_MAX,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="What was tried, what happened, why it failed — carried into kickoff messages.",
    )


class EntryForm(EditForm):
    submission = forms.IntegerField(
        required=False,
        min_value=1,
        label="Submission #",
        help_text="Optional: the submission it is about (gives the entry a score).",
    )


def _save(form: EditForm, write) -> KnowledgeEntry | None:
    """Run the write; a refusal naming a field becomes that field's error (else a form-wide one)."""
    try:
        return write()
    except InvalidInput as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return None


def _n(request) -> int:
    """The selector's n; a hand-typed bad value shows the default rather than an error page."""
    try:
        return queries.parse_n(request.GET.get("n"))
    except InvalidInput:
        return queries.N_DEFAULT


@require_http_methods(["GET", "POST"])
@login_required
def knowledge_page(request, slug: str):
    project = project_for_user(request, slug, role=Role.REVIEWER if request.method == "POST" else Role.VIEWER)
    form, status = EntryForm(), 200
    if request.method == "POST":
        form, status = EntryForm(request.POST), 400
        if form.is_valid():
            data = dict(form.cleaned_data)
            number = data.pop("submission")
            sub = Submission.objects.filter(project=project, pk=number).first() if number else None
            if number and sub is None:
                form.add_error("submission", f"There is no submission #{number} in {project.slug}.")
            elif entry := _save(
                form, lambda: knowledge.add_entry(project, by=request.user, submission=sub, **data)
            ):
                messages.success(request, f"Added “{entry.title}”.")
                return redirect(reverse("dashboard:knowledge", args=[project.slug]) + f"#entry-{entry.pk}")
    n = _n(request)
    cf = queries.carry_forward(project, n)
    entries = (
        KnowledgeEntry.objects.filter(project=project)
        .select_related("submission__run", "created_by")
        .order_by("-created", "-id")[:ENTRIES_SHOWN]
    )
    arena_x = request.GET.get("arena_x") if request.GET.get("arena_x") in arena_chart.AGAINST else "time"
    arena_points = arena_history(project)
    return render(
        request,
        "dashboard/knowledge.html",
        {
            "project": project,
            "arena_points": arena_points,
            "arena_figure": arena_chart.arena_figure(arena_points, against=arena_x) if arena_points else None,
            "arena_x": arena_x,
            "arena_axes": arena_chart.AGAINST,
            "cf": cf,
            "text": queries.render_carry_forward(cf),
            "n": n,
            "n_choices": range(queries.N_MIN, queries.N_MAX + 1),
            "entries": entries,
            "shown": ENTRIES_SHOWN,
            "total": KnowledgeEntry.objects.filter(project=project).count(),
            "can_edit": project.allows(request.user, Role.REVIEWER),
            "form": form,
            "kinds": KnowledgeKind.choices,
            "reason_labels": REASON_LABELS,
            **share_control(request, ShareKind.ARENA, project=project),
        },
        status=status,
    )


@require_http_methods(["GET", "POST"])
@login_required
def knowledge_edit(request, slug: str, entry_id: int):
    project = project_for_user(request, slug, role=Role.REVIEWER)
    entry = get_object_or_404(
        KnowledgeEntry.objects.select_related("submission__run", "created_by", "project"),
        project=project,
        pk=entry_id,
    )
    form, status = EditForm(initial={"kind": entry.kind, "title": entry.title, "body": entry.body}), 200
    if request.method == "POST":
        form, status = EditForm(request.POST), 400
        if form.is_valid() and _save(
            form, lambda: knowledge.edit_entry(entry, by=request.user, **form.cleaned_data)
        ):
            messages.success(request, "Entry saved.")
            return redirect(reverse("dashboard:knowledge", args=[project.slug]) + f"#entry-{entry.pk}")
    return render(
        request,
        "dashboard/knowledge_edit.html",
        {"project": project, "entry": entry, "form": form, "kinds": KnowledgeKind.choices},
        status=status,
    )
