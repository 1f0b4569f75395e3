"""Comparing two builds: what happened to each pack, and the diff of the two prompts."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from dashboard.presentation.labels import tokens_text

ChangeKind = Literal["added", "dropped", "changed", "unchanged"]


@dataclass(frozen=True, slots=True)
class PackChange:
    """How one pack differs between build A and build B."""

    id: str
    kind: ChangeKind
    before: str  # e.g. "full · 1,200 tokens", "skipped", "absent"
    after: str
    notes: tuple[str, ...]


_REASON_WORDS: Final[dict[Any, str]] = {
    "empty": "empty",
    "budget": "did not fit",
    "max_chars": "char guard",
}


def _state(decision: Mapping[str, Any] | None) -> str:
    if decision is None:
        return "absent"
    if decision.get("status") != "included":
        return f"skipped ({_REASON_WORDS.get(decision.get('reason'), 'unknown reason')})"
    look = "truncated" if decision.get("truncated") else decision.get("variant") or "full"
    return f"{look} · {tokens_text(int(decision.get('estimatedTokens', 0)))}"


def pack_diff(
    a: Sequence[Mapping[str, Any]],
    a_texts: Mapping[str, str],
    b: Sequence[Mapping[str, Any]],
    b_texts: Mapping[str, str],
) -> list[PackChange]:
    """Classify every pack of two builds: added, dropped, changed or unchanged (B's order)."""
    before = {str(d.get("id")): d for d in a}
    after = {str(d.get("id")): d for d in b}
    ids = [str(d.get("id")) for d in sorted(b, key=lambda d: int(d.get("order", 0)))]
    ids += [i for i in (str(d.get("id")) for d in a) if i not in after]
    changes = []
    for pack_id in ids:
        old, new = before.get(pack_id), after.get(pack_id)
        was_in = old is not None and old.get("status") == "included"
        is_in = new is not None and new.get("status") == "included"
        notes: list[str] = []
        kind: ChangeKind
        if is_in and not was_in:
            kind = "added"
        elif was_in and not is_in:
            kind = "dropped"
        elif not is_in or old is None or new is None:
            # Left out on both sides, or never there: a different reason is still a change
            # ("empty" then "did not fit" means the source found messages this time).
            before_state, after_state = _state(old), _state(new)
            if before_state != after_state:
                notes.append(f"{before_state} → {after_state}")
            kind = "changed" if notes else "unchanged"
        else:
            if (old.get("variant"), bool(old.get("truncated"))) != (
                new.get("variant"),
                bool(new.get("truncated")),
            ):
                notes.append(f"{_state(old).split(' · ')[0]} → {_state(new).split(' · ')[0]}")
            old_tokens, new_tokens = (
                int(old.get("estimatedTokens", 0)),
                int(new.get("estimatedTokens", 0)),
            )
            if old_tokens != new_tokens:
                notes.append(
                    f"{old_tokens:,} → {new_tokens:,} tokens ({new_tokens - old_tokens:+,})"
                )
            if a_texts.get(pack_id) != b_texts.get(pack_id):
                notes.append("text changed")
            kind = "changed" if notes else "unchanged"
        changes.append(
            PackChange(
                id=pack_id, kind=kind, before=_state(old), after=_state(new), notes=tuple(notes)
            )
        )
    return changes


@dataclass(frozen=True, slots=True)
class DiffLine:
    """One line of a unified diff; ``kind`` is add, del, hunk, file or ctx."""

    kind: str
    text: str


def prompt_diff(a: str, b: str, *, a_name: str = "a", b_name: str = "b") -> list[DiffLine]:
    """The unified diff of two prompts, each line classified (its ``+``/``-`` prefix kept)."""
    lines = []
    for line in difflib.unified_diff(
        a.splitlines(), b.splitlines(), fromfile=a_name, tofile=b_name, lineterm=""
    ):
        if line.startswith(("---", "+++")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        lines.append(DiffLine(kind=kind, text=line))
    return lines
