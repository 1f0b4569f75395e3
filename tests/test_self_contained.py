"""The suite stands on its own: every file it reads is in the repository, with its origin."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

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


def test_every_zeroshot_fixture_is_listed_in_its_readme_with_its_checksum() -> None:
    # given
    readme = (ZEROSHOT / "README.md").read_text(encoding="utf-8")
    listed = dict(re.findall(r"^\| `([^`]+)` \| [^|]+ \| `([0-9a-f]{64})` \|$", readme, re.M))

    # when
    present = {
        str(p.relative_to(ZEROSHOT)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(ZEROSHOT.rglob("*"))
        if p.is_file() and p.name != "README.md"
    }

    # then
    assert present == listed
    assert len(list((ZEROSHOT / "templates").glob("*.json"))) == 7
    assert "wal-uncheckpointed/emerald-prism-4.db-wal" in present


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
