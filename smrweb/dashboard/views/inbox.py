"""The signed-in person's in-app inbox: their own notifications, newest first, and marking them read."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from smrweb.dashboard.inbox import local_link
from smrweb.tracking import services
from smrweb.tracking.queries import alerts

PER_PAGE = 50


@require_safe
@login_required
@never_cache
def inbox(request):
    page = Paginator(alerts.inbox(request.user), PER_PAGE).get_page(request.GET.get("page"))
    notifications = list(page)
    for notification in notifications:
        notification.link = local_link(notification.url)
    return render(request, "dashboard/inbox.html", {"page": page, "notifications": notifications})


@require_POST
@login_required
def mark_read(request):
    """Mark one notification (id=…) or all of them (all=1) read; only the person's own are touched."""
    if request.POST.get("all"):
        count = services.mark_read(request.user)
        messages.success(request, f"Marked {count} notification{'s' if count != 1 else ''} read.")
    else:
        ids = [int(i) for i in request.POST.getlist("id") if _whole(i, 18)]
        services.mark_read(request.user, ids)
    url = reverse("dashboard:inbox")
    page = request.POST.get("page", "")
    return redirect(f"{url}?page={page}" if _whole(page, 8) else url)


def _whole(text: str, digits: int) -> bool:
    return 0 < len(text) <= digits and text.isascii() and text.isdigit()
