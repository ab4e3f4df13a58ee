"""The package's layers, from the import graph of every module under arm_act/ (sim/ and
policy/ through their links), read from the source with `ast` so that imports inside
functions count as much as those at the top of a file.

Ranks, lowest first; a module may import its own subpackage and anything of a lower rank:

    sim, policy               the ROS-free cores: nothing else of arm_act, not each other
    common, assist            ROS-free helpers; the hand-written grasp assist (opt-in)
    ros                       message conversions, QoS, node entry
    bags, nodes               rosbag2 files; the ROS nodes (bags never import nodes)
    data, eval, bench, view   datasets and collection, evaluation, benchmarks, viewers
    pipeline                  the whole training recipe (collect, train, evaluate), staged
    cli                       the `arm-act` command line

Subpackages of one rank may import each other only without a cycle. And the cores are
always imported as `arm_act.sim` / `arm_act.policy`: a bare `import sim` would load a
second copy of the module under another name (or nothing at all once installed).
"""
from __future__ import annotations

import ast
import dataclasses
import os
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "arm_act"
RANKS = {
    "sim": 0, "policy": 0,
    "common": 1, "assist": 1,
    "ros": 2,
    "bags": 3, "nodes": 3,
    "data": 4, "eval": 4, "bench": 4, "view": 4, "gym": 4,
    "pipeline": 5,
    "cli": 6,
}
FORBIDDEN = {("sim", "policy"), ("policy", "sim"), ("bags", "nodes")}  # same rank, never
CORES = ("sim", "policy")


@dataclasses.dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. arm_act.eval.in_process
    target: str  # the imported module (or the package a name is taken from)
    path: Path
    line: int

    @property
    def where(self) -> str:
        try:
            path = self.path.relative_to(ROOT)
        except ValueError:
            path = self.path
        return f"{path}:{self.line}"


def _modules(package_dir: Path) -> dict[str, Path]:
    """{module name: file} for every .py below package_dir, following the sim/policy links."""
    modules = {}
    for folder, dirs, files in os.walk(package_dir, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                parts = list(Path(folder, name).relative_to(package_dir.parent).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                modules[".".join(parts)] = Path(folder, name)
    return modules


def _imports_of(module: str, path: Path, is_package: bool, known: set[str]) -> list[Import]:
    """Every import in the file, at any depth (functions, methods, try blocks), and
    importlib.import_module("...") with a constant name; relative imports resolved, and
    `from P import name` counted as an import of P.name where that is a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) in ("import_module", "__import__"))):
            targets = [node.args[0].value]
        found += [Import(module, t, path, node.lineno) for t in targets
                  if t == PACKAGE or t.startswith(PACKAGE + ".")]
    return found


def import_graph(package_dir: Path) -> list[Import]:
    """The imports of arm_act's own modules by arm_act's modules."""
    imports, modules = [], _modules(package_dir)
    for module, path in modules.items():
        imports += _imports_of(module, path, path.name == "__init__.py", set(modules))
    return imports


def _subpackage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the package's own __init__


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on_stack, result = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return result


def layer_violations(imports: list[Import]) -> list[str]:
    """One line per broken rule: an import pointing up (or across a forbidden pair), a
    subpackage that has no rank, a cycle between subpackages."""
    problems, edges = [], {}
    for imp in imports:
        src, dst = _subpackage(imp.source), _subpackage(imp.target)
        for name in (src, dst):
            if name is not None and name not in RANKS:
                problems.append(f"{imp.where}: subpackage {PACKAGE}.{name} has no rank in tests/test_layers.py")
        if src is None or dst is None or src == dst or src not in RANKS or dst not in RANKS:
            continue  # arm_act/__init__.py, `import arm_act`, and imports within a subpackage
        edges.setdefault(src, set()).add(dst)
        if RANKS[dst] > RANKS[src]:
            problems.append(f"{imp.where}: {imp.source} imports {imp.target}: "
                            f"{src} (rank {RANKS[src]}) must not import {dst} (rank {RANKS[dst]})")
        elif (src, dst) in FORBIDDEN:
            problems.append(f"{imp.where}: {imp.source} imports {imp.target}: {src} must not import {dst}")
    for cycle in _cycles(edges):
        links = ", ".join(f"{u} -> {v}" for u in cycle for v in sorted(edges[u]) if v in cycle)
        problems.append(f"import cycle between the subpackages {', '.join(cycle)} ({links})")
    return sorted(set(problems))


def bare_core_imports(paths: list[Path]) -> list[str]:
    """`import sim`, `from policy.model import ...` and the like in any .py below paths."""
    problems = []
    for top in paths:
        for path in sorted(top.rglob("*.py")) if top.is_dir() else [top]:
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    if name.split(".")[0] in CORES:
                        problems.append(f"{path}:{node.lineno}: bare `{name}`; import it as {PACKAGE}.{name}")
    return problems


def test_every_import_points_down_and_no_subpackages_form_a_cycle():
    imports = import_graph(ROOT / PACKAGE)
    sources = {i.source for i in imports}
    # The walk followed the links: the cores' modules are in the graph.
    assert any(s.startswith("arm_act.sim.") for s in sources)
    assert any(s.startswith("arm_act.policy.") for s in sources)
    problems = layer_violations(imports)
    assert not problems, "\n".join(problems)


def test_every_subpackage_has_a_rank():
    subpackages = {p.name for p in (ROOT / PACKAGE).iterdir() if (p / "__init__.py").is_file()}
    assert subpackages == set(RANKS), "give each subpackage a rank in tests/test_layers.py"


@pytest.mark.slow
def test_the_cores_are_never_imported_by_their_bare_names():
    problems = bare_core_imports([ROOT / PACKAGE, ROOT / "tests", ROOT / "benchmarks"])
    assert not problems, "\n".join(problems)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root / PACKAGE


def test_the_checker_finds_each_kind_of_violation(tmp_path):
    package = _tree(tmp_path, {
        "arm_act/__init__.py": "",
        **{f"arm_act/{name}/__init__.py": "" for name in RANKS},
        "arm_act/sim/env.py": """
            import numpy as np
            from . import config  # within the subpackage: fine
            def render():
                from arm_act.policy import model  # a core importing the other core
            """,
        "arm_act/sim/config.py": "",
        "arm_act/common/paths.py": """
            def default():
                import arm_act.cli.main  # upward, inside a function
            """,
        "arm_act/bags/episode.py": "from arm_act.nodes.sim_node import SimNode\n",
        "arm_act/data/dataset.py": "from arm_act import eval as evaluation\n",
        "arm_act/eval/report.py": """
            import importlib
            from ..data import dataset
            importlib.import_module("arm_act.ros.conversions")  # downward: fine
            """,
        "arm_act/nodes/sim_node.py": "from ..ros import conversions\nfrom arm_act.sim.env import render\n",
        "arm_act/ros/conversions.py": "from arm_act.common import paths\n",
        "arm_act/extra/__init__.py": "from arm_act.sim import env\n",
    })
    problems = layer_violations(import_graph(package))
    expected = [
        "arm_act/bags/episode.py:1: arm_act.bags.episode imports arm_act.nodes.sim_node: bags must not import nodes",
        "arm_act/common/paths.py:3: arm_act.common.paths imports arm_act.cli.main: common (rank 1) must not "
        "import cli (rank 6)",
        "arm_act/extra/__init__.py:1: subpackage arm_act.extra has no rank in tests/test_layers.py",
        "arm_act/sim/env.py:5: arm_act.sim.env imports arm_act.policy: sim must not import policy",
        "import cycle between the subpackages data, eval (data -> eval, eval -> data)",
    ]
    assert [p.replace(str(tmp_path) + os.sep, "") for p in problems] == expected

    # The clean parts alone pass: the checker does not flag downward imports.
    clean = [i for i in import_graph(package)
             if i.source.split(".")[1] in ("nodes", "ros") or i.source == "arm_act.eval.report"]
    assert clean and layer_violations(clean) == []


def test_the_checker_finds_bare_core_imports(tmp_path):
    _tree(tmp_path, {
        "tests/test_x.py": """
            import simulator  # another name: fine
            from arm_act.sim import ArmEnv  # fine
            def helper():
                import sim.env
                from policy import model
            """,
    })
    problems = [p.replace(str(tmp_path) + os.sep, "") for p in bare_core_imports([tmp_path / "tests"])]
    assert problems == ["tests/test_x.py:5: bare `sim.env`; import it as arm_act.sim.env",
                        "tests/test_x.py:6: bare `policy`; import it as arm_act.policy"]
