"""The signed-in user's own display preferences: which clock pages and charts use."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from smrweb.dashboard import clock
from smrweb.dashboard.models import Clock


class PreferencesForm(forms.Form):
    clock = forms.ChoiceField(choices=Clock.choices, widget=forms.RadioSelect, label="Show times in")
    # Filled in by the page script with the browser's IANA zone (Intl.DateTimeFormat).
    local_zone = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)

    def clean(self):
        data = super().clean()
        if data.get("clock") == Clock.LOCAL and clock.valid_zone(data.get("local_zone")) is None:
            raise forms.ValidationError(
                "Your browser did not report a time zone (is JavaScript off?); times stay in UTC."
            )
        return data


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def preferences(request):
    current = clock.clock_for(request.user)
    form = PreferencesForm(request.POST or None, initial={"clock": current.mode, "local_zone": ""})
    if request.method == "POST" and form.is_valid():
        pref = clock.set_clock(
            request.user, clock=form.cleaned_data["clock"], local_zone=form.cleaned_data["local_zone"]
        )
        messages.success(request, "Times are now shown in " + (pref.local_zone or "UTC") + ".")
        return redirect("dashboard:preferences")
    return render(request, "dashboard/preferences.html", {"form": form, "current": current})
