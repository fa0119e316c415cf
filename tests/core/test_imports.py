"""fedlib's modules import in one direction: no module reaches itself through its imports."""

import ast
from pathlib import Path

import fedlib

ROOT = Path(fedlib.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, known: set[str], text: str | None = None) -> set[str]:
    """The fedlib modules ``path`` imports (or ``text``, read as if it were that file), at module level or inside
    functions (a lazy import is still an edge: it only hides the cycle until the call)."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out |= {n for n in names if n in known and n != here}
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def fedlib_graph() -> dict[str, set[str]]:
    files = sorted(ROOT.rglob("*.py"))
    known = {module_name(f) for f in files}
    return {module_name(f): imports(f, known) for f in files}


def test_the_cycle_finder_finds_a_cycle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_lazy_and_package_imports():
    graph = fedlib_graph()
    assert "fedlib.algorithms.registry" in graph["fedlib.algorithms.fedproto"]   # `from ... import register`
    assert {"fedlib.papers.fedmps", "fedlib.papers.gfpl"} <= graph["fedlib.papers.catalog"]  # `from pkg import mod`
    assert "fedlib.paths" in graph["fedlib.runner"]   # a function-level import is an edge


def test_fedlib_has_no_import_cycle():
    assert find_cycle(fedlib_graph()) is None


#: what the studies may not import: they find, read and train runs through fedlib.results alone
RUN_MACHINERY = {"fedlib.runner", "fedlib.grid", "fedlib.archive", "fedlib.store"}


def test_the_studies_reach_the_runs_only_through_results():
    # a study (or a notebook, through it) that imports the runner, the grid, the archive or the run store would
    # bypass results' order of where a run is looked for (results folder, other placements, the archive)
    graph = fedlib_graph()
    studies = sorted(m for m in graph if m == "fedlib.papers" or m.startswith("fedlib.papers."))
    assert len(studies) > 5
    reaching = {m: sorted(graph[m] & RUN_MACHINERY) for m in studies if graph[m] & RUN_MACHINERY}
    assert reaching == {}, "import fedlib.results instead: " + "; ".join(f"{m} imports {', '.join(v)}"
                                                                       for m, v in reaching.items())


def test_the_import_rule_sees_every_form_of_import():
    known = RUN_MACHINERY | {"fedlib", "fedlib.papers", "fedlib.papers.study", "fedlib.results"}
    study = ROOT / "papers" / "study.py"   # a study's path (not read: its text is given)
    forms = {"from fedlib import runner": "fedlib.runner", "import fedlib.grid": "fedlib.grid",
             "from fedlib.archive import only": "fedlib.archive", "from fedlib import store as s": "fedlib.store",
             "def f():\n    from fedlib.runner import load_state": "fedlib.runner",
             "from .. import grid": "fedlib.grid"}
    for code, target in forms.items():
        assert imports(study, known, code) & RUN_MACHINERY == {target}, code
    assert imports(study, known, "from fedlib import results") == {"fedlib.results"}


def test_the_notebooks_imports_leave_torchvision_until_a_model_needs_it():
    # torchvision (and the torch._dynamo it pulls in) costs seconds per kernel and per worker process;
    # only the heterogeneous model builders need it, and they import it when called
    import subprocess
    import sys

    code = ("import sys; import fedlib.runner, fedlib.papers.fedmps, fedlib.papers.protonorm, fedlib.analysis; "
            "print('torchvision' in sys.modules); from fedlib.models.hetero import hetero_model; "
            "hetero_model('resnet4', (1, 28, 28)); print('torchvision' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
