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


def _module_imports() -> dict[str, set[str]]:
    """arm_act module -> the arm_act modules it imports (anywhere in it, lazy imports too)."""
    import ast

    modules = {}
    for path in sorted((ROOT / "arm_act").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                found |= {base} | {f"{base}.{a.name}" for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_no_import_cycles_between_modules():
    graph = _module_imports()
    cycles, seen = [], set()

    def visit(node, path):
        if node in path:
            cycles.append(path[path.index(node):] + [node])
            return
        if node in seen:
            return
        for nxt in graph[node]:
            visit(nxt, [*path, node])
        seen.add(node)

    for name in sorted(graph):
        visit(name, [])
    assert not cycles, [" -> ".join(c) for c in cycles]


def test_no_function_over_100_lines():
    import ast

    long = []
    for path in sorted((ROOT / "arm_act").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 100:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                            f"({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long
