"""The repository stands alone: no file cites notes that live outside it, and every path the
README and docs/ point at exists.

Checked in README.md, benchmarks/README.md and docs/**/*.md:
- markdown links and images `[text](target)` with a relative target (URLs and anchors on
  the same page are not paths); a link to another .md file's #anchor must name one of its
  headings;
- backticked tokens outside fenced code blocks that look like a path in this repository:
  no spaces or placeholders, first segment a top-level entry of the repository, and a file
  extension or a trailing "/" (so topic names such as `policy/diagnostics` and commands
  are left alone). Globs (`results/policy_*.json`) and brace lists (`{front,wrist}`) must
  match at least one path. A path counts when it exists from the repository root or from
  the markdown file's own folder;
- backticked dotted module paths `arm_act.x.y[.name]`: the module exists, and a trailing
  name is defined in it.
"""
from __future__ import annotations

import fnmatch
import glob
import itertools
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {".venv", ".git", "build", "install", "log", "__pycache__", ".pytest_cache", ".ruff_cache"}
# Built from parts so that this file does not match itself. The team notes' file names are
# matched as written (docs/architecture.md is ours); the phrases in any case.
FORBIDDEN_EXACT = ("ARCHITECTURE" + ".md", "STYLE" + ".md", "../" + "shared", "/work/" + "shared")
FORBIDDEN_PHRASES = ("the " + "contract", "the " + "lesson")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".json", ".toml", ".cfg", ".txt", ".xml", ".ini", ""}

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
BACKTICK = re.compile(r"`([^`]+)`")
FENCE = re.compile(r"^\s*(```|~~~)")
MODULE = re.compile(r"^arm_act(\.[A-Za-z_]\w*)+$")
PATH_EXTENSIONS = {".md", ".py", ".sh", ".json", ".yaml", ".yml", ".toml", ".cfg", ".txt", ".png", ".xml",
                   ".safetensors", ".launch.py"}


def tracked_files(root: Path = ROOT) -> list[Path]:
    """Tracked files (git ls-files), or every file when this is not a git checkout; never
    .venv or build outputs, and symbolic links are not followed."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True,
                             timeout=30).stdout.decode()
        paths = [root / p for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        paths = []
        for path in root.rglob("*"):
            if not any(part in SKIP_DIRS for part in path.relative_to(root).parts):
                paths.append(path)
    return [p for p in paths if not any(part in SKIP_DIRS for part in p.relative_to(root).parts)
            and p.is_file() and not p.is_symlink()]


def forbidden_mentions(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return []  # binary (weights, images): not prose
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        lowered = line.lower()
        found += [f"{number}: {needle!r}" for needle in FORBIDDEN_EXACT if needle in line]
        found += [f"{number}: {needle!r}" for needle in FORBIDDEN_PHRASES if needle in lowered]
    return found


def doc_files(root: Path = ROOT) -> list[Path]:
    files = [root / "README.md", root / "benchmarks" / "README.md"]
    files += sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else []
    return [f for f in files if f.is_file()]


def _expand_braces(token: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", token)
    if not match:
        return [token]
    head, tail = token[:match.start()], token[match.end():]
    return list(itertools.chain.from_iterable(
        _expand_braces(head + option + tail) for option in match.group(1).split(",")))


def _exists(candidate: str, bases: list[Path]) -> bool:
    for base in bases:
        if any(ch in candidate for ch in "*?["):
            if glob.glob(str(base / candidate)):
                return True
        elif (base / candidate).exists():
            return True
    return False


def _looks_like_repo_path(token: str, top_level: set[str]) -> bool:
    """top_level: the names a path may start with (the repository's top-level entries and
    those beside the markdown file)."""
    if any(ch in token for ch in " <>$=|\\") or "..." in token or token.startswith(("-", "/", "~", "http")):
        return False
    first = token.split("/", 1)[0]
    if "/" not in token and not any(token.endswith(ext) for ext in PATH_EXTENSIONS):
        return False
    if first not in top_level and not fnmatch.filter(top_level, first):
        return False
    name = token.rstrip("/").rsplit("/", 1)[-1]
    return token.endswith("/") or any(name.endswith(ext) for ext in PATH_EXTENSIONS)


def _module_problem(token: str, root: Path) -> str | None:
    parts = token.split(".")
    for cut in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:cut])
        for source in (base.with_suffix(".py"), base / "__init__.py"):
            if source.is_file():
                rest = parts[cut:]
                if not rest:
                    return None
                name = re.escape(rest[0])
                # Defined (def, class, assignment) or imported there (also in a multi-line import).
                pattern = (rf"^\s*(?:async\s+def|def|class)\s+{name}\b|^\s*{name}\s*[:=]"
                           rf"|^\s*(?:from\s+\S+\s+)?import\s+.*\b{name}\b|^\s+{name},?\s*$")
                if re.search(pattern, source.read_text(encoding="utf-8"), re.MULTILINE):
                    return None
                return f"{'.'.join(rest)} is not defined in {source.relative_to(root)}"
    return "no such module"


def heading_anchors(md: Path) -> set[str]:
    """GitHub's anchors for a markdown file's headings: lower case, punctuation dropped,
    spaces to hyphens."""
    anchors = set()
    in_fence = False
    for line in md.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (match := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
            text = re.sub(r"[`*_]", "", match.group(1)).lower()
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


def broken_references(md: Path, root: Path = ROOT) -> list[str]:
    """What in one markdown file points at a path or module that does not exist."""
    name = md.relative_to(root).as_posix() if md.is_relative_to(root) else md.name
    bases = [md.parent, root]
    top_level = {p.name for base in bases for p in base.iterdir() if p.name not in SKIP_DIRS}
    problems = []
    # Fenced code blocks are commands and output, not references: blank them out (keeping
    # the line count), then read inline code spans over the whole text, since a span may
    # continue on the next line.
    lines, in_fence = [], False
    for line in md.read_text(encoding="utf-8").splitlines():
        fence = bool(FENCE.match(line))
        in_fence ^= fence
        lines.append("" if fence or in_fence else line)
    text = "\n".join(lines)
    for span in BACKTICK.finditer(text):
        number = text.count("\n", 0, span.start()) + 1
        token = " ".join(span.group(1).split())
        if MODULE.match(token):
            problem = _module_problem(token, root)
            if problem:
                problems.append(f"{name}:{number}: `{token}`: {problem}")
        elif _looks_like_repo_path(token, top_level):
            if not all(_exists(option, bases) for option in _expand_braces(token)):
                problems.append(f"{name}:{number}: `{token}` does not exist")
    for number, line in enumerate(lines, 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, or an anchor on this page
            path, _, anchor = target.partition("#")
            if path and not _exists(path, [md.parent]):
                problems.append(f"{name}:{number}: link to {target} (no such path)")
            elif anchor and path.endswith(".md") and anchor not in heading_anchors(md.parent / path):
                problems.append(f"{name}:{number}: link to {target} (no such heading)")
    return sorted(problems, key=lambda p: int(p.split(":")[1]))


def test_no_file_cites_notes_outside_the_repository():
    own = Path(__file__).resolve()
    problems = {str(p.relative_to(ROOT)): found for p in tracked_files()
                if p.resolve() != own and p.suffix in TEXT_SUFFIXES and (found := forbidden_mentions(p))}
    assert not problems, f"files citing documents outside the repository: {problems}"


def test_readme_and_docs_point_only_at_paths_that_exist():
    files = doc_files()
    assert ROOT / "README.md" in files and ROOT / "docs" / "architecture.md" in files
    problems = [problem for md in files for problem in broken_references(md)]
    assert not problems, "\n".join(problems)


def test_the_checks_find_what_they_must_and_nothing_else(tmp_path):
    root = tmp_path
    (root / "docs").mkdir()
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "run.sh").write_text("")
    (root / "arm_act" / "bench").mkdir(parents=True)
    (root / "arm_act" / "__init__.py").write_text("")
    (root / "arm_act" / "bench" / "__init__.py").write_text("")
    (root / "arm_act" / "bench" / "suite.py").write_text("def run_all():\n    pass\n")
    (root / "docs" / "a.md").write_text("# Top\n\n## The `cache`, explained\n")
    md = root / "README.md"
    md.write_text("\n".join([
        "[ok](docs/a.md) [ok anchor](docs/a.md#the-cache-explained) [url](https://example.org/x.md) [here](#usage)",
        "`benchmarks/run.sh` `benchmarks/*.sh` `arm_act/bench/` `arm_act.bench.suite` `arm_act.bench.suite.run_all`",
        "`policy/diagnostics` `camera/{front,wrist}/image_raw` `arm-act eval --video DIR` `<out>/../.cache`",
        "```bash",
        "cat docs/missing_in_a_code_block.md `docs/also_missing.md`",
        "```",
        "[broken](docs/missing.md) `benchmarks/gone.py` `arm_act.bench.nothing` `arm_act.bench.suite.absent`",
        "[no such heading](docs/a.md#usage) and a span that `starts here",
        "and ends` before `benchmarks/split_over_lines.json`",
    ]))
    problems = broken_references(md, root)
    assert len(problems) == 6, problems
    expected = ["README.md:7: link to docs/missing.md (no such path)", "README.md:7: `benchmarks/gone.py`",
                "README.md:7: `arm_act.bench.nothing`", "absent is not defined in arm_act/bench/suite.py",
                "README.md:8: link to docs/a.md#usage (no such heading)",
                "README.md:9: `benchmarks/split_over_lines.json` does not exist"]
    for text in expected:
        assert sum(text in problem for problem in problems) == 1, (text, problems)

    cited = root / "notes.py"
    cited.write_text("# see " + "ARCHITECTURE" + ".md\nx = 1  # as " + "the " + "Lesson says\n")
    assert len(forbidden_mentions(cited)) == 2
    ours = root / "ours.py"
    ours.write_text("# docs/architecture.md, \"Threading\"; a contract test; lessons learned\n")
    assert forbidden_mentions(ours) == []
