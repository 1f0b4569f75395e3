"""The query strings of the dashboard's pages, read through Django forms.

A bad value never breaks a page: the field's error is shown on the page and the value is left
out, while the other fields still apply (``FilterForm.values``).
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from ledger.interfaces import (
    INT64_MAX,
    ClusterState,
    InvalidInput,
    MessageFilter,
    labels_text,
    timestamp_problem,
)
from runs.models import TaskState
from runs.services import GUIDANCE_TEXT_MAX

MAX_TOKENS_CEILING = 10_000_000


class WholeNumberField(forms.Field):
    """A positive whole number; ``1,000`` and ``1_000`` are read as 1000."""

    def __init__(self, *, label: str, ceiling: int = INT64_MAX, **kwargs: Any) -> None:
        super().__init__(required=False, label=label, **kwargs)
        # No database column holds more than 64 bits: a larger number matches nothing.
        self.ceiling = ceiling

    def to_python(self, value: Any) -> int | None:
        raw = str(value or "").strip().replace(",", "").replace("_", "")
        if not raw:
            return None
        try:
            number = int(raw)
        except ValueError:
            raise ValidationError(
                f"{self.label} must be a whole number, not “{raw[:40]}”."
            ) from None
        if number < 1:
            raise ValidationError(f"{self.label} must be at least 1 (got {number:,}).")
        if number > self.ceiling:
            raise ValidationError(f"{self.label} can be at most {self.ceiling:,} (got {number:,}).")
        return number


# "-30m", "-2h", "-1d": that long before now.
_RELATIVE = re.compile(r"^-\s*(\d{1,6})\s*([smhd])$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class MillisecondsField(forms.Field):
    """A moment: epoch milliseconds, a time before now (``-30m``, ``-2h``, ``-1d``), or an
    ISO 8601 date and time (``2026-02-02 09:15``; UTC unless it says).

    The page's script sends what the operator typed in their own time zone as milliseconds;
    these forms are for links written by hand and pages without the script.
    """

    def __init__(self, *, name: str) -> None:
        super().__init__(required=False, label=name)

    def to_python(self, value: Any) -> int | None:
        raw = str(value or "").strip()
        if not raw:
            return None
        if raw.isdigit():
            ms = int(raw)
        elif relative := _RELATIVE.match(raw.lower()):
            ms = int(time.time() * 1000) - int(relative[1]) * _UNIT_MS[relative[2]]
        else:
            try:
                moment = datetime.fromisoformat(raw)
            except ValueError:
                raise ValidationError(
                    f"“{self.label}” is not a date and time (try 2026-02-02 09:15 or -2h); "
                    "it was ignored."
                ) from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            ms = int(moment.timestamp() * 1000)
        # The ledger's own bounds (0 … 9999-12-31): a moment outside them cannot be shown.
        if timestamp_problem(ms) is not None:
            raise ValidationError(
                f"“{self.label}” is outside 1970-01-01 … 9999-12-31; it was ignored."
            )
        return ms


class FilterForm(forms.Form):
    """A form over a query string whose bad fields are reported and left out."""

    def values(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The clean values of the fields that passed, and one message per field that did not."""
        self.is_valid()
        errors = {name: " ".join(str(e) for e in errs) for name, errs in self.errors.items()}
        values = {name: self.cleaned_data.get(name) for name in self.fields}
        return values, errors


class ClusterListForm(FilterForm):
    q = forms.CharField(required=False, max_length=128)
    state = forms.ChoiceField(required=False, choices=[("", "any"), *ClusterState.choices])


class TimelineForm(FilterForm):
    """The cluster page's search, filters and paging cursors (sequences)."""

    q = forms.CharField(required=False, max_length=200, label="Search")
    topic = forms.CharField(required=False, max_length=64)
    sender = forms.CharField(required=False, max_length=128)
    since = MillisecondsField(name="since")
    until = MillisecondsField(name="until")
    before = WholeNumberField(label="The before cursor")
    after = WholeNumberField(label="The after cursor")

    def clean_q(self) -> str:
        q = str(self.cleaned_data.get("q") or "").strip()
        if q and not MessageFilter(q=q).search_terms:
            raise ValidationError("A search needs a word: letters or digits.")
        return q

    @staticmethod
    def message_filter(values: dict[str, Any]) -> MessageFilter:
        return MessageFilter(
            topic=values["topic"] or None,
            sender=values["sender"] or None,
            since=values["since"],
            until=values["until"],
            q=values["q"] or None,
        )


class WhatIfForm(FilterForm):
    """The inspector's what-if: another budget, another point in time."""

    max_tokens = WholeNumberField(label="Max tokens", ceiling=MAX_TOKENS_CEILING)
    as_of = WholeNumberField(label="The as-of point")
    trigger = WholeNumberField(label="The triggering message")


class DiffForm(FilterForm):
    a = WholeNumberField(label="Build A")
    b = WholeNumberField(label="Build B")


class IssueForm(forms.Form):
    """The issue a cluster is started with (``ISSUE_OPENED``)."""

    title = forms.CharField(required=False, max_length=300, label="Title")
    text = forms.CharField(
        max_length=100_000, label="Issue", widget=forms.Textarea(attrs={"rows": 4})
    )


class GuidanceForm(forms.Form):
    """Guidance to one agent of a running cluster, or to all (SPEC §7.8)."""

    text = forms.CharField(max_length=GUIDANCE_TEXT_MAX, label="Guidance", strip=False)
    agent = forms.CharField(required=False, max_length=128, label="To")


DEMO_LABELS = "pool=demo"


class LaunchForm(IssueForm):
    """Start a new cluster from a template, with its issue."""

    template = forms.ChoiceField(label="Template")
    # Which runner pool serves the cluster: ``make run``'s demo runner serves ``pool=demo``
    # only, so the default keeps pressing Start running live with the demo agents.
    labels = forms.CharField(
        required=False, max_length=2000, initial=DEMO_LABELS, label="Runner labels"
    )

    def __init__(self, *args: Any, templates: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        template = self.fields["template"]
        assert isinstance(template, forms.ChoiceField)
        template.choices = [(name, name) for name in templates]
        self.order_fields(["template", "title", "text", "labels"])

    def clean_labels(self) -> dict[str, str]:
        try:
            return labels_text(self.cleaned_data.get("labels") or "")
        except InvalidInput as error:
            raise ValidationError(error.message) from None


class TaskListForm(FilterForm):
    agent = forms.CharField(required=False, max_length=64)
    state = forms.ChoiceField(required=False, choices=[("", "any"), *TaskState.choices])
    before = forms.CharField(required=False, max_length=40)
