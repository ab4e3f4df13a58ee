"""Lint comments mean something: ruff (run by `make lint` and `make test`, configured in
pyproject.toml) reports a `# noqa` that suppresses nothing or names a rule it does not check
(RUF100); this test adds that every `# noqa` names its rules and says why after a dash."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("arm_act", "sim", "policy", "tests", "benchmarks", "launch", "setup.py")
NOQA = re.compile(r"#\s*noqa\b", re.IGNORECASE)
EXPLAINED = re.compile(r"#\s*noqa: [A-Z]+[0-9]+(, [A-Z]+[0-9]+)* - \S")


def unexplained_noqa(source: str) -> list[tuple[int, str]]:
    """(line, comment) of each `# noqa` comment without rule codes and a reason."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and NOQA.search(token.string):
            comment = token.string[NOQA.search(token.string).start():]
            if not EXPLAINED.match(comment):
                found.append((token.start[0], token.string))
    return found


def test_every_noqa_names_its_rules_and_says_why():
    problems = []
    for name in SOURCES:
        top = ROOT / name
        for path in sorted(top.rglob("*.py")) if top.is_dir() else [top]:
            for line, comment in unexplained_noqa(path.read_text()):
                problems.append(f"{path.relative_to(ROOT)}:{line}: {comment}")
    assert not problems, "\n".join(problems)


def test_the_check_tells_explained_from_bare_noqa():
    source = (
        "import os  # noqa\n"
        "x = 1  # noqa: E731\n"
        "y = 2  # reason first # noqa: F401 - re-exported\n"
        "z = 3  # noqa: BLE001, E501 - two rules, one reason\n"
        "s = '# noqa inside a string is not a comment'\n"
    )
    assert [line for line, _ in unexplained_noqa(source)] == [1, 2]
