"""The signed-in person's in-app inbox: their own notifications, unread @mentions first, the rest grouped
per rule, subject kind and hour ("12 submissions waiting for review"), filterable by kind and project,
and marking them read one by one, per group or per filter."""

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from smrweb.core import markdown
from smrweb.dashboard.inbox import local_link
from smrweb.tracking import services
from smrweb.tracking.errors import InvalidInput
from smrweb.tracking.models import Project, Trigger
from smrweb.tracking.queries import alerts

PER_PAGE = 50  # groups (a group of one is one notification)


def _mention_html(notification, user) -> str:
    """The comment as its thread shows it (Markdown, sanitized), the reader's own name highlighted."""
    comment = notification.comment
    text = comment.body if comment is not None and not comment.deleted_at else notification.body
    name = user.get_username()
    return markdown.render(text[:2000], members={name.lower(): name})


@require_safe
@login_required
@never_cache
def inbox(request):
    status, error = 200, None
    try:
        filt = alerts.inbox_filter(request.user, request.GET)
    except InvalidInput as exc:
        filt, status, error = alerts.InboxFilter(), 400, exc
    page = Paginator(alerts.inbox_groups(request.user, filt), PER_PAGE).get_page(request.GET.get("page"))
    groups = alerts.fill_groups(request.user, page.object_list, filt)
    pinned = alerts.pinned_mentions(request.user, filt)
    for notification in [*pinned, *(n for g in groups for n in g.items)]:
        notification.link = local_link(notification.url)
        if notification.comment_id:
            notification.html = _mention_html(notification, request.user)
    matching = alerts.inbox(request.user).filter(filt.q(), read_at__isnull=True)
    context = {
        "page": page,
        "groups": groups,
        "pinned": pinned,
        "filter": filt,
        "filter_error": error,
        "filter_query": urlencode(filt.params()),
        "unread_matching": matching.count() if filt.active else None,
        "newest": alerts.inbox(request.user).values_list("pk", flat=True).first(),
        "kinds": [
            ("mention", "mentions"),
            ("guard", "spend guards"),
            ("alert", "every alert"),
            *Trigger.choices,
        ],
        "projects": Project.objects.visible_to(request.user).order_by("name").values_list("slug", "name"),
    }
    return render(request, "dashboard/inbox.html", context, status=status)


@require_POST
@login_required
def mark_read(request):
    """Mark read, only ever the person's own: one notification (id=…), a group (group=…), those matching
    a filter (kind, project, unread; filtered=1), or all of them (all=1). Group and filter stop at
    `upto`, the newest the page showed, so what arrived since stays unread."""
    post = request.POST
    back = {k: post[k] for k in ("kind", "project", "unread", "page") if post.get(k)}
    upto = int(post["upto"]) if _whole(post.get("upto", ""), 18) else None
    try:
        if post.get("all"):
            count = services.mark_read(request.user, upto=upto)
        elif post.get("group"):
            count = services.mark_read(request.user, where=alerts.group_q(post["group"]), upto=upto)
        elif post.get("filtered"):
            filt = alerts.inbox_filter(request.user, post)
            count = services.mark_read(request.user, where=filt.q(), upto=upto)
        else:
            ids = [int(i) for i in post.getlist("id") if _whole(i, 18)]
            services.mark_read(request.user, ids)
            count = None
    except InvalidInput as exc:
        messages.error(request, f"Nothing marked read: {exc.field}: {exc.message}")
        count = None
    if count is not None:
        messages.success(request, f"Marked {count:,} notification{'s' if count != 1 else ''} read.")
    if not _whole(back.get("page", ""), 8):
        back.pop("page", None)
    url = reverse("dashboard:inbox")
    return redirect(f"{url}?{urlencode(back)}" if back else url)


def _whole(text: str, digits: int) -> bool:
    return 0 < len(text) <= digits and text.isascii() and text.isdigit()
