"""A batch's drafts are checked with the ledger's bounds read once, and a message without
metadata or ``content.data`` serialises nothing to be checked (docs/decisions/0256)."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from ledger.errors import InvalidInput, TooLarge
from ledger.services import drafts
from ledger.services.drafts import MessageDraft, drafts_check


class _CountedSettings:
    """Django's settings, counting the reads of each name."""

    def __init__(self) -> None:
        self.reads: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        self.reads[name] = self.reads.get(name, 0) + 1
        return getattr(settings, name)


def _batch(count: int, **fields: Any) -> list[MessageDraft]:
    return [
        MessageDraft(topic="AGENT_OUTPUT", sender="a1", content={"text": f"line {n}"}, **fields)
        for n in range(count)
    ]


def test_a_batch_reads_each_bound_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counted = _CountedSettings()
    monkeypatch.setattr(drafts, "settings", counted)

    drafts_check(_batch(100, metadata={"step": 1}))

    assert counted.reads == {
        "LEDGER_MAX_BATCH": 1,
        "LEDGER_MAX_CLOCK_SKEW_MS": 1,
        "LEDGER_MAX_TEXT_BYTES": 1,
        "LEDGER_MAX_JSON_BYTES": 1,
        "LEDGER_MAX_JSON_DEPTH": 1,
    }


def test_only_metadata_and_data_that_are_there_are_serialised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[Any] = []
    encode = drafts.json_encode_checked

    def counted(value: Any, *, max_depth: int) -> str:
        encoded.append(value)
        return encode(value, max_depth=max_depth)

    monkeypatch.setattr(drafts, "json_encode_checked", counted)
    plain = _batch(98)
    with_metadata = MessageDraft(topic="A", sender="a1", metadata={"k": 1})
    with_data = MessageDraft(topic="A", sender="a1", content={"data": [1, 2]})

    drafts_check([*plain, with_metadata, with_data])

    assert encoded == [{"k": 1}, [1, 2]]


@override_settings(LEDGER_MAX_JSON_BYTES=20)
def test_each_message_of_a_batch_is_still_held_to_the_bounds() -> None:
    batch = _batch(3)
    batch[2] = MessageDraft(topic="A", sender="a1", metadata={"long": "x" * 30})

    with pytest.raises(TooLarge) as refused:
        drafts_check(batch)

    assert refused.value.details == {"index": 2, "field": "metadata"}
    assert "messages[2].metadata is larger than 20 bytes" in str(refused.value)


def test_a_message_without_metadata_is_checked_for_everything_else() -> None:
    batch = _batch(2)
    batch[1] = MessageDraft(topic="A", sender="a\x00b")

    with pytest.raises(InvalidInput) as refused:
        drafts_check(batch)

    assert refused.value.details == {"index": 1, "field": "sender"}
