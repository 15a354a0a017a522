"""The package's shape (docs/architecture.md): no import cycle among its modules, every parser in the plain list,
every command wired by a plain import, and a missing piece failing loudly instead of vanishing. (The CLI without
the optional extras, torch and ray: test_capture_engine.py and test_packaging.py.)"""
from __future__ import annotations

import ast
import subprocess
import sys
import tomllib

import grimp
import pytest
from conftest import ROOT

PACKAGE = ROOT / "stallscope"


def cycles(graph: grimp.ImportGraph, ignored: set[tuple[str, str]] = frozenset()) -> list[list[str]]:
    """The strongly connected components of two or more modules (each an import cycle), without the `ignored`
    (importer, imported) edges. Tarjan's algorithm, iterative: the package's graph is deep enough to matter."""
    modules = sorted(graph.modules)
    succ = {m: sorted(w for w in graph.find_modules_directly_imported_by(m) if (m, w) not in ignored)
            for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycle_among_the_package_modules():
    graph = grimp.build_graph("stallscope", cache_dir=None)
    assert "stallscope.ingest.orchestrate" in graph.modules  # every package is a regular one (grimp sees it)
    layers = next(c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
                  if c["id"] == "layers")
    assert not layers.get("ignore_imports")  # the layers hold without exceptions
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c", "p.d"):
        g.add_module(m)
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        g.add_import(importer=a, imported=b)
    assert cycles(g) == [["p.a", "p.b", "p.c"]]
    assert cycles(g, {("p.c", "p.a")}) == []


def _defines_parser(path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "PARSER" for t in n.targets)
               for n in tree.body)


def test_every_parser_module_is_in_the_list():
    from stallscope.parsers import all_parsers

    defined = sorted(p.stem for p in (PACKAGE / "parsers").glob("*.py") if _defines_parser(p))
    listed = sorted(type(p).__module__.rsplit(".", 1)[1] for p in all_parsers())
    assert listed == defined and len(defined) >= 5


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_a_parser_that_cannot_be_imported_fails_loudly():
    """It used to be recorded in a list nothing read, and its files became "not an input"."""
    r = _run("import sys; sys.modules['stallscope.parsers.tgi_log'] = None\n"
             "from stallscope.parsers import all_parsers\n"
             "try:\n    all_parsers()\nexcept ImportError as e:\n    print('loud', e)\nelse:\n    print('silent')")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("loud") and "tgi_log" in r.stdout


COMMANDS = {"ingest", "sources", "sql", "steps", "simulate", "analyze", "recommend", "capture", "report",
            "export perfetto", "fleet run", "fleet simulate", "fleet report"}


def _commands(group, prefix="") -> set[str]:
    out = set()
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out |= _commands(cmd, f"{prefix}{name} ")
        else:
            out.add(prefix + name)
    return out


def test_every_command_is_registered():
    import typer.main

    from stallscope.cli import app

    assert _commands(typer.main.get_command(app)) == COMMANDS


@pytest.mark.parametrize("blocked", ["stallscope.fleet.cli", "stallscope.report.cli"])
def test_a_command_module_that_cannot_be_imported_fails_the_cli(blocked):
    """The CLI used to skip a command module whose import failed: its commands were silently missing."""
    r = _run(f"import sys; sys.modules[{blocked!r}] = None\nimport stallscope.cli")
    assert r.returncode != 0 and f"import of {blocked} halted" in r.stderr


def test_the_architecture_page_names_every_part():
    """docs/architecture.md matches the tree: every module and package of stallscope, every ingest module and every
    SQL concept folder is named there (as `name`, `name/` or `name/...`)."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    parts = [p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    parts += [f"{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()]
    parts += [f"ingest/{p.stem}" for p in (PACKAGE / "ingest").glob("*.py") if p.stem != "__init__"]
    parts += [f"queries/{d.name}/" for d in (PACKAGE / "queries").iterdir()
              if d.is_dir() and not d.name.startswith(("_", "."))]
    assert len(parts) > 20
    missing = [p for p in parts if f"`{p}`" not in doc and f"`{p.rstrip('/')}/" not in doc]
    assert not missing, f"docs/architecture.md does not name {missing}"
