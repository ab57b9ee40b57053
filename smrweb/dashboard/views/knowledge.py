"""Project knowledge and the carry-forward block (being built)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse


@login_required
def knowledge_page(request, slug: str):
    return HttpResponse("not built yet", status=501)


@login_required
def knowledge_edit(request, slug: str, entry_id: int):
    return HttpResponse("not built yet", status=501)
