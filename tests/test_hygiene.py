"""Rules about the code itself that a test can check: comments and docstrings say what code
does and why, so they carry no issue numbers (those belong to commit messages and docs)."""
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
CODE = ("arm_act", "policy", "sim", "tests", "launch", "config", "benchmarks")
SUFFIXES = {".py", ".yaml", ".json", ".sh"}
ISSUE = re.compile(r"\bissues? ?#?\d+\b", re.IGNORECASE)
UPSTREAM = re.compile(r"[\w.-]+/[\w.-]+#\d+")  # another project's issue (eProsima/Fast-DDS#5053) may be cited


def code_files():
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in SUFFIXES and "results" not in path.parts and path.is_file():
                yield path


def issue_references(text: str) -> list[str]:
    return [m.group(0) for m in ISSUE.finditer(UPSTREAM.sub("", text))]


def test_no_issue_numbers_in_code_or_config():
    found = [f"{p.relative_to(ROOT)}: {ref}" for p in code_files() if p.name != "test_hygiene.py"
             for ref in issue_references(p.read_text(errors="replace"))]
    assert not found, found


def test_the_check_finds_issue_numbers_and_spares_upstream_ones():
    assert issue_references("as in issue 15, and Issue #7; issues 3") == ["issue 15", "Issue #7", "issues 3"]
    assert issue_references("eProsima/Fast-DDS#5053 and act#25 stay; tissue 3 is not one") == []
