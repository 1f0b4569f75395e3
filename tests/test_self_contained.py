"""The suite stands on its own: every file it reads is in the repository, with its origin."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from tests.fixtures import ZEROSHOT

ROOT = Path(__file__).resolve().parents[1]


def tracked(*patterns: str) -> list[Path]:
    """The repository's files (tracked or not yet added, never ignored ones) matching patterns."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *patterns],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


@pytest.mark.parametrize("folder", [ZEROSHOT, ROOT / "tests" / "context" / "conformance"])
def test_every_file_kept_from_elsewhere_is_listed_in_its_readme_with_its_checksum(
    folder: Path,
) -> None:
    # given
    readme = (folder / "README.md").read_text(encoding="utf-8")
    listed = dict(re.findall(r"^\| `([^`]+)` \|(?: [^|]+ \|)? `([0-9a-f]{64})` \|$", readme, re.M))

    # when
    present = {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "README.md"
    }

    # then
    assert present == listed
    assert "Where they came from" in readme or "taken from" in readme


def test_the_zeroshot_fixtures_hold_the_seven_templates_and_the_wal_case() -> None:
    # then
    assert len(list((ZEROSHOT / "templates").glob("*.json"))) == 7
    wal = ZEROSHOT / "wal-uncheckpointed"
    assert sorted(p.name for p in wal.iterdir()) == [
        "emerald-prism-4.db",
        "emerald-prism-4.db-shm",
        "emerald-prism-4.db-wal",
    ]
    assert "MIT License" in (ZEROSHOT / "LICENSE").read_text(encoding="utf-8")


def test_no_python_file_reaches_above_the_checkout() -> None:
    # given
    outside: list[str] = []

    # when
    for path in tracked("*.py"):
        if path == Path(__file__).resolve():
            continue
        source = path.read_text(encoding="utf-8")
        if "../shared" in source or re.search(r"""["']shared["']\s*/""", source):
            outside.append(f"{path.relative_to(ROOT)}: ../shared")
        for depth in re.findall(r"\.parents\[(\d+)\]", source):
            if not path.parents[int(depth)].is_relative_to(ROOT):
                outside.append(f"{path.relative_to(ROOT)}: parents[{depth}]")

    # then
    assert outside == []


SPEC = ROOT / "docs" / "SPEC.md"
# "SPEC §5", "(SPEC §5, §6.5)", "SPEC §2-3" (or an en dash): every number in the run is checked.
SPEC_REFERENCE = re.compile(r"SPEC\s*§[\d.]+(?:\s*(?:[-\u2013]|,|and|or)\s*§?\d[\d.]*)*")
DOC_REFERENCE = re.compile(r"\b(SPEC|DESIGN|STYLE|ORCHESTRATION)\.md\b")
STYLE_RULE = re.compile(r"STYLE\.md rule (\d+)")


def texts() -> list[tuple[str, str]]:
    """Every text file of the repository but zeroshot's own, with its path."""
    found = []
    for path in tracked():
        if path.is_relative_to(ZEROSHOT) or path == Path(__file__).resolve():
            continue
        try:
            found.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue
    return found


def spec_sections() -> set[str]:
    headings = re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", SPEC.read_text(encoding="utf-8"), re.M)
    return set(headings)


def test_every_spec_reference_names_a_section_of_docs_spec() -> None:
    # given
    sections = spec_sections()
    assert {"1", "1.1", "3.4", "6.5", "7", "7.8"} <= sections

    # when
    dangling = []
    for name, text in texts():
        for run in SPEC_REFERENCE.findall(text):
            for number in re.findall(r"\d+(?:\.\d+)?", run):
                if number not in sections:
                    dangling.append(f"{name}: {run!r} ({number})")
        if name == "docs/SPEC.md":
            for number in re.findall(r"§(\d+(?:\.\d+)?)", text):
                if number not in sections:
                    dangling.append(f"{name}: §{number}")

    # then
    assert dangling == []


def test_every_design_document_the_code_names_is_in_docs() -> None:
    # given
    rules = re.findall(
        r"^(\d+)\. \*\*", (ROOT / "docs" / "STYLE.md").read_text(encoding="utf-8"), re.M
    )

    # when
    missing = []
    for name, text in texts():
        for document in DOC_REFERENCE.findall(text):
            if not (ROOT / "docs" / f"{document}.md").is_file():
                missing.append(f"{name}: {document}.md")
        missing += [
            f"{name}: STYLE.md rule {n}" for n in STYLE_RULE.findall(text) if n not in rules
        ]

    # then
    assert missing == []
