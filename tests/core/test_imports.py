"""fedlib's modules import in one direction: no module reaches itself through its imports, and every import goes down
the layers of docs/architecture.md (or is one of its listed exceptions)."""

import ast
import re
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
    assert "fedlib.papers.catalog" in graph["fedlib.archive_cli"]  # `from pkg import mod`
    assert "fedlib.paths" in graph["fedlib.runner"]   # a function-level import is an edge


def test_fedlib_has_no_import_cycle():
    assert find_cycle(fedlib_graph()) is None


#: what the studies may not import: they find, read and train runs through fedlib.results alone
RUN_MACHINERY = {"fedlib.runner", "fedlib.grid", "fedlib.archive", "fedlib.store"}


def test_the_studies_reach_the_runs_only_through_results():
    # a study (or a notebook, through it) that imports the runner, the grid, the archive or the run store would
    # bypass results' order of where a run is looked for (results folder, other placements, the archive)
    graph = fedlib_graph()
    studies = sorted(m for m in graph if m.split(".")[1:2] in (["papers"], ["plans"], ["ledgers"], ["study"]))
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


ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"

#: fedlib's layers, bottom first: a module imports only modules of its own layer or a lower one. ``fedlib.x.*``: the
#: package fedlib.x and every module under it that no other row names. docs/architecture.md, "Layers", states the
#: same table (checked below); a module added to fedlib goes into both.
LAYERS = {
    "foundations": ("fedlib", "fedlib.validation", "fedlib.paths", "fedlib.device", "fedlib.backends",
                    "fedlib.interrupts", "fedlib.logs", "fedlib.counting", "fedlib.metrics", "fedlib.losses",
                    "fedlib.prototypes", "fedlib.mixtures", "fedlib.ranking", "fedlib.plots"),
    "data and models": ("fedlib.data.*", "fedlib.models.*"),
    "methods": ("fedlib.algorithms.*",),
    "privacy": ("fedlib.privacy.*",),
    "engine": ("fedlib.config", "fedlib.store", "fedlib.executors", "fedlib.engine", "fedlib.stacked"),
    "runs": ("fedlib.runner", "fedlib.grid", "fedlib.ray_backend", "fedlib.archive"),
    "results": ("fedlib.results",),
    "judging": ("fedlib.analysis", "fedlib.report", "fedlib.claims", "fedlib.plateau", "fedlib.evidence"),
    "study base": ("fedlib.study.*",),
    "plans": ("fedlib.plans.*",),
    "ledgers": ("fedlib.ledgers.*",),
    "studies": ("fedlib.papers.*",),
    "commands": ("fedlib.papers.catalog", "fedlib.quickstart", "fedlib.yours", "fedlib.reproduce", "fedlib.render",
                 "fedlib.archive_cli", "fedlib.bench",
                 "fedlib.flower", "fedlib.__main__"),
}

#: the layer whose modules do not import each other: a study imports no other study
APART = "studies"

#: the imports that go up a layer or join two studies, each allowed for its reason; docs/architecture.md,
#: "Exceptions", states the same table
LAYER_EXCEPTIONS = {
    ("fedlib.algorithms.loops", "fedlib.privacy.dpsgd"):
        "DP-SGD replaces the local loop's optimiser steps; imported only when a run asks for it",
    ("fedlib.algorithms.checks", "fedlib.engine"):
        "the determinism check (also run on a user's method file) trains a tiny run twice in the engine",
    ("fedlib.study", "fedlib.reproduce"):
        "`Plan.load` reads the profile list at `reproduce.PROFILES` (`params/profiles.yaml`)",
    ("fedlib.papers.fedic", "fedlib.papers.privacy"): "its attack figure is the privacy study's `paper_pictures`",
    ("fedlib.papers.fedmps", "fedlib.papers.privacy"): "its attack figure is the privacy study's `paper_pictures`",
    ("fedlib.papers.gfpl", "fedlib.papers.privacy"): "its attack figure is the privacy study's `paper_pictures`",
    ("fedlib.papers.mpfedcl", "fedlib.papers.privacy"): "its attack figure is the privacy study's `paper_pictures`",
    ("fedlib.papers.protonorm", "fedlib.papers.privacy"): "its attack figure is the privacy study's `paper_pictures`",
}

ADD_IT = "the layer table of docs/architecture.md and LAYERS in tests/core/test_imports.py"


def doc_tables(text: str) -> tuple[dict[str, tuple[str, ...]], dict[tuple[str, str], str]]:
    """The markdown tables ``| layer | modules | ...`` (``{layer: names}``, bottom first) and ``| module | imports |
    why |`` (``{(module, imported): why}``) of ``text``; a name is a backticked cell entry."""
    layers, exceptions, table = {}, {}, None
    for line in text.splitlines():
        if not line.startswith("|"):
            table = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == ["layer", "modules"]:
            table = layers
        elif cells[:3] == ["module", "imports", "why"]:
            table = exceptions
        elif table is None or set(cells[0]) <= set("-: "):
            continue
        elif table is layers:
            layers[cells[0]] = tuple(re.findall(r"`([^`]+)`", cells[1]))
        else:
            exceptions[(cells[0].strip("`"), cells[1].strip("`"))] = cells[2]
    return layers, exceptions


def assign(modules, layers: dict) -> tuple[dict[str, str], list[str]]:
    """Each module's layer (``{module: layer}``) and what is wrong with ``layers`` for these modules: a module in no
    layer or named twice, a tie between two ``.*`` names, a name that covers no module."""
    named: dict[str, str] = {}
    problems = []
    for layer, names in layers.items():
        for name in names:
            if name in named:
                problems.append(f"{name} is in two layers ({named[name]}, {layer}): keep one, in {ADD_IT}")
            named.setdefault(name, layer)
    out, used = {}, set()
    for m in sorted(modules):
        if m in named:
            out[m] = named[m]
            used.add(m)
            continue
        under = [(len(p), p) for p in named if p.endswith(".*") and (m == p[:-2] or m.startswith(p[:-1]))]
        if not under:
            problems.append(f"{m} is in no layer: add it to {ADD_IT}")
            continue
        best = max(under)
        if [p for n, p in under if n == best[0]] != [best[1]]:
            problems.append(f"{m} falls under two names of the same length: {sorted(p for _, p in under)}")
        out[m] = named[best[1]]
        used.add(best[1])
    problems += [f"{p} ({named[p]}) names no module of fedlib: remove it from {ADD_IT}" for p in named if p not in used]
    return out, problems


def layer_breaks(graph: dict[str, set[str]], layer_of: dict[str, str], layers: dict) -> set[tuple[str, str]]:
    """The imports ``(module, imported)`` of ``graph`` that go to a higher layer, or stay in the :data:`APART` layer
    (a module in no layer is left to :func:`test_every_fedlib_module_is_in_exactly_one_layer`)."""
    rank = {layer: i for i, layer in enumerate(layers)}
    return {(a, b) for a, targets in graph.items() for b in targets if a in layer_of and b in layer_of
            and (rank[layer_of[b]] > rank[layer_of[a]] or layer_of[a] == layer_of[b] == APART)}


def test_the_architecture_doc_states_the_same_layers_and_exceptions_as_this_test():
    layers, exceptions = doc_tables(ARCHITECTURE.read_text())
    assert layers and exceptions, ("docs/architecture.md has lost its `| layer | modules |` or `| module | imports | "
                                   "why |` table, which this test reads")
    problems = []
    if list(layers) != list(LAYERS):
        problems.append(f"layers, bottom first: the doc has {list(layers)}, LAYERS {list(LAYERS)}")
    for layer in layers.keys() & LAYERS.keys():
        doc, test = set(layers[layer]), set(LAYERS[layer])
        if doc != test:
            problems.append(f"layer {layer!r}: only in the doc {sorted(doc - test)}, "
                            f"only in LAYERS {sorted(test - doc)}")
    for edge in sorted(exceptions.keys() | LAYER_EXCEPTIONS.keys()):
        doc, test = exceptions.get(edge), LAYER_EXCEPTIONS.get(edge)
        if doc != test:
            problems.append(f"exception {edge[0]} -> {edge[1]}: the doc says {doc!r}, LAYER_EXCEPTIONS {test!r}")
    assert problems == [], ("docs/architecture.md and tests/core/test_imports.py state different tables; make them "
                            "the same:\n" + "\n".join(problems))
    assert APART in LAYERS


def test_every_fedlib_module_is_in_exactly_one_layer():
    _, problems = assign(fedlib_graph(), LAYERS)
    assert problems == [], "\n".join(problems)


def test_every_import_goes_down_the_layers_or_is_a_listed_exception():
    graph = fedlib_graph()
    layer_of, _ = assign(graph, LAYERS)
    breaks = layer_breaks(graph, layer_of, LAYERS)
    unlisted = [f"{a} ({layer_of[a]}) imports {b} ({layer_of[b]})" for a, b in sorted(breaks - LAYER_EXCEPTIONS.keys())]
    assert unlisted == [], ("imports that go up a layer or from one study to another (import the other way, or list "
                            "the import with its reason under Exceptions in docs/architecture.md and in "
                            "LAYER_EXCEPTIONS):\n" + "\n".join(unlisted))
    stale = [f"{a} -> {b}" for a, b in sorted(LAYER_EXCEPTIONS.keys() - breaks)]
    assert stale == [], ("exceptions no longer needed (remove them from docs/architecture.md and LAYER_EXCEPTIONS):\n"
                         + "\n".join(stale))


def test_the_layer_rule_catches_an_upward_import_a_study_importing_a_study_and_an_unplaced_module():
    layers = {"low": ("fedlib.a", "fedlib.x.*"), APART: ("fedlib.s.*",), "top": ("fedlib.s.list", "fedlib.b")}
    graph = {"fedlib.a": {"fedlib.b"}, "fedlib.x": set(), "fedlib.x.y": {"fedlib.a"},
             "fedlib.s.one": {"fedlib.s.two", "fedlib.a"}, "fedlib.s.two": set(),
             "fedlib.s.list": {"fedlib.s.one", "fedlib.s.two"}, "fedlib.b": {"fedlib.s.one"}}
    layer_of, problems = assign(graph, layers)
    assert problems == [] and layer_of["fedlib.x.y"] == "low" and layer_of["fedlib.s.list"] == "top"
    assert layer_breaks(graph, layer_of, layers) == {("fedlib.a", "fedlib.b"), ("fedlib.s.one", "fedlib.s.two")}
    _, problems = assign({**graph, "fedlib.new": set()}, {**layers, "low": ("fedlib.a", "fedlib.x.*", "fedlib.gone")})
    assert problems == [f"fedlib.new is in no layer: add it to {ADD_IT}",
                        f"fedlib.gone (low) names no module of fedlib: remove it from {ADD_IT}"]
    text = "| layer | modules | what |\n|---|---|---|\n| low | `fedlib.a`, `fedlib.x.*` | x |\n\n" \
           "| module | imports | why |\n|---|---|---|\n| `fedlib.a` | `fedlib.b` | a reason |\n"
    assert doc_tables(text) == ({"low": ("fedlib.a", "fedlib.x.*")}, {("fedlib.a", "fedlib.b"): "a reason"})


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
