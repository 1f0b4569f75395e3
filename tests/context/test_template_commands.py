"""``import_template`` and ``validate_template`` (SPEC §6.5)."""

from __future__ import annotations

import copy
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from context.cluster_templates import template_builtin_list
from context.services.templates import template_get, template_versions
from ledger.errors import NotFound

pytestmark = pytest.mark.django_db


def a_template(name: str = "Imported worker") -> dict[str, Any]:
    body = copy.deepcopy(template_builtin_list()["single-worker"])
    body["name"] = name
    return body


def write(path: Path, body: Any) -> Path:
    path.write_text(json.dumps(body) if not isinstance(body, str) else body, encoding="utf-8")
    return path


def run(command: str, *args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_import_then_reimport(tmp_path: Path) -> None:
    # given a template file
    path = write(tmp_path / "worker.json", a_template())
    # when it is imported twice
    first, _ = run("import_template", str(path))
    second, _ = run("import_template", str(path))
    # then it is created once, named by its name field, and the second run changes nothing
    assert "created template 'Imported worker' (version 1" in first
    assert "unchanged template 'Imported worker' (version 1" in second
    assert len(template_versions(name="Imported worker")) == 1
    # when the file changes and is imported again
    changed = a_template()
    changed["description"] = "changed"
    write(path, changed)
    third, _ = run("import_template", str(path))
    # then the previous body is kept as a version
    assert "updated template 'Imported worker' (version 2" in third
    versions = template_versions(name="Imported worker")
    assert [v.version for v in versions] == [2, 1]
    assert versions[0].note == "imported from worker.json"
    assert template_get(name="Imported worker").description == "changed"


def test_bad_files_fail_and_good_ones_are_imported(tmp_path: Path) -> None:
    # given a good file, a file that is not JSON, a missing one and an invalid template
    good = write(tmp_path / "good.json", a_template("Good"))
    broken = write(tmp_path / "broken.json", "{not json")
    invalid_body = a_template("Invalid")
    invalid_body["agents"][0]["contextStrategy"]["sources"][0]["strategy"] = "newest"
    invalid = write(tmp_path / "invalid.json", invalid_body)
    missing = tmp_path / "missing.json"
    # when they are imported together
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match="3 of 4 files failed"):
        call_command(
            "import_template",
            str(good),
            str(broken),
            str(missing),
            str(invalid),
            stdout=out,
            stderr=err,
        )
    # then each failure is reported and the good file is imported
    errors = err.getvalue()
    assert f"{broken}: {broken} is not valid JSON" in errors
    assert f"{missing}: cannot read {missing}" in errors
    assert 'source 0, field "strategy": unknown strategy "newest"' in errors
    assert template_get(name="Good").version_count == 1
    assert "created template 'Good'" in out.getvalue()
    with pytest.raises(NotFound):
        template_get(name="Invalid")


def test_validate_template_exit_codes(tmp_path: Path) -> None:
    # a valid template: warnings may be printed, exit code 0
    good = write(tmp_path / "good.json", a_template())
    out, _ = run("validate_template", str(good))
    assert out.strip().splitlines()[-1].startswith(f"{good}: 0 errors, ")
    # an invalid one: the errors are printed and the exit code is 1
    body = a_template()
    body["agents"][0]["contextStrategy"]["sources"][0]["priority"] = "urgent"
    body["agents"][0]["contextStrategy"]["sources"][0]["amount"] = 0
    bad = write(tmp_path / "bad.json", body)
    output = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("validate_template", str(bad), stdout=output)
    assert raised.value.returncode == 1
    assert "2 errors" in str(raised.value)
    printed = output.getvalue()
    assert 'field "priority": unknown priority "urgent"' in printed
    assert 'field "amount": must be a positive integer, got 0' in printed
    # a file that is not JSON is an error too
    with pytest.raises(CommandError) as not_json:
        call_command("validate_template", str(write(tmp_path / "x.json", "[")))
    assert not_json.value.returncode == 1


def test_validate_template_prints_warnings(tmp_path: Path) -> None:
    # given a template reading a topic no agent publishes
    body = a_template()
    body["agents"][0]["contextStrategy"]["sources"].append(
        {"topic": "NOBODY_SENDS_THIS", "strategy": "latest", "amount": 1}
    )
    out, _ = run("validate_template", str(write(tmp_path / "warn.json", body)))
    assert "warning:" in out
    assert "NOBODY_SENDS_THIS" in out
    assert "0 errors" in out
