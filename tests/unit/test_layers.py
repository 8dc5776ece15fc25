"""The package layers stay one-way and free of cycles: read from the source's imports (ast).

    4  tidegauge.cli                      the command line: dispatches to everything below
    3  tidegauge.local                    local services and the demo (starts all of the below)
    2  jobs | dashboard | tidegauge.traffic | tidegauge.query | tidegauge.alerts
                                       one concern each, never each other
    1  tidegauge.core                     no Spark, no Streamlit: contract, time, metrics, store
    0  sketches                           t-digest, HyperLogLog

A module may import its own component and any lower layer, nothing sideways or upward. Every
import counts, including the ones inside functions (a lazy import is still a dependency). The
checks are functions on a {module: imports} map, so the cases at the end show them failing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sketches", "tidegauge", "jobs", "dashboard")

#: (prefix, component, layer); the longest matching prefix wins.
COMPONENTS = (
    ("sketches", "sketches", 0),
    ("tidegauge.core", "core", 1),
    ("jobs", "jobs", 2),
    ("dashboard", "dashboard", 2),
    ("tidegauge.traffic", "traffic", 2),
    ("tidegauge.query", "query", 2),
    ("tidegauge.alerts", "alerts", 2),
    ("tidegauge.local", "local", 3),
    ("tidegauge", "cli", 4),
)

#: Third-party packages a component must not import: what keeps the core light.
FORBIDDEN = {
    "sketches": ("pyspark", "streamlit", "plotly", "redis", "kafka"),
    "core": ("pyspark", "streamlit", "plotly"),
    "traffic": ("pyspark", "streamlit", "plotly"),
    "query": ("pyspark", "streamlit", "plotly"),
    "alerts": ("pyspark", "streamlit", "plotly", "kafka"),
    "jobs": ("streamlit", "plotly"),
    "dashboard": ("pyspark",),
}


def component(module: str) -> tuple[str, int]:
    best = max(
        (p for p in COMPONENTS if module == p[0] or module.startswith(p[0] + ".")),
        key=lambda p: len(p[0]),
    )
    return best[1], best[2]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(p): p
        for pkg in PACKAGES
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if "static" not in p.parts
    }


def imported(path: Path, name: str, modules: Iterable[str]) -> tuple[set[str], set[str]]:
    """(project modules, top-level third-party names) that the file at `path` imports."""
    known = set(modules)
    is_pkg = path.name == "__init__.py"
    ours: set[str] = set()
    theirs: set[str] = set()

    def resolve(target: str) -> None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target:
            ours.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            top = t.split(".")[0]
            if top in PACKAGES:
                resolve(t)
            elif top:
                theirs.add(top)
    ours.discard(name)
    return ours, theirs


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    modules = project_modules()
    graph, external = {}, {}
    for name, path in modules.items():
        graph[name], external[name] = imported(path, name, modules)
    return graph, external


def direction_violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
    out = []
    for src, targets in graph.items():
        s_comp, s_layer = component(src)
        for dst in targets:
            d_comp, d_layer = component(dst)
            if d_comp != s_comp and d_layer >= s_layer:
                how = "upward" if d_layer > s_layer else "sideways"
                out.append(
                    f"{src} ({s_comp}, layer {s_layer}) imports {dst} "
                    f"({d_comp}, layer {d_layer}): {how}"
                )
    return sorted(out)


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1 or v in graph.get(v, ()):
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def forbidden_imports(external: Mapping[str, Iterable[str]]) -> list[str]:
    out = []
    for src, names in external.items():
        comp, _ = component(src)
        for n in sorted(names):
            if n in FORBIDDEN.get(comp, ()):
                out.append(f"{src} ({comp}) imports {n}")
    return sorted(out)


# --- the tree as it is -------------------------------------------------------------------------


def test_every_package_is_read() -> None:
    graph, _ = import_graph()
    for must in (
        "sketches.hll",
        "tidegauge.core.events",
        "jobs.pipeline",
        "dashboard.app",
        "tidegauge.traffic.generator",
        "tidegauge.local.stack",
        "tidegauge.cli",
    ):
        assert must in graph
    assert "tidegauge.core.windows" in graph["jobs.aggregate"]  # edges are really found


def test_imports_only_go_down_the_layers() -> None:
    graph, _ = import_graph()
    assert direction_violations(graph) == []


def test_no_import_cycles() -> None:
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_no_spark_or_streamlit_below_their_layer() -> None:
    _, external = import_graph()
    assert forbidden_imports(external) == []


# --- the checks fail where they should -----------------------------------------------------------


def test_an_upward_or_sideways_import_is_reported() -> None:
    graph = {
        "tidegauge.core.store": {"jobs.redis_sink", "sketches.hll"},  # up: core -> jobs
        "dashboard.data": {"jobs.spark", "tidegauge.core.store"},  # sideways: dashboard -> jobs
        "jobs.pipeline": {"tidegauge.core.config", "jobs.parse"},  # fine
        "sketches.hll": {"tidegauge.core.windows"},  # up
    }
    assert direction_violations(graph) == [
        "dashboard.data (dashboard, layer 2) imports jobs.spark (jobs, layer 2): sideways",
        "sketches.hll (sketches, layer 0) imports tidegauge.core.windows (core, layer 1): upward",
        "tidegauge.core.store (core, layer 1) imports jobs.redis_sink (jobs, layer 2): upward",
    ]


def test_a_cycle_is_reported() -> None:
    graph = {
        "tidegauge.traffic.generator": {"tidegauge.traffic.producer"},
        "tidegauge.traffic.producer": {"tidegauge.traffic.generator", "tidegauge.core.config"},
        "tidegauge.core.config": set(),
        "jobs.a": {"jobs.b"},
        "jobs.b": {"jobs.c"},
        "jobs.c": {"jobs.a"},
    }
    assert cycles(graph) == [
        ["jobs.a", "jobs.b", "jobs.c"],
        ["tidegauge.traffic.generator", "tidegauge.traffic.producer"],
    ]


def test_lazy_and_relative_imports_count(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import json\n"
        "def f():\n"
        "    from jobs.spark import build_session\n"
        "    from . import store\n"
        "    import pyspark.sql\n"
    )
    modules = ["jobs.spark", "tidegauge.core.store", "tidegauge.core.m"]
    ours, theirs = imported(src, "tidegauge.core.m", modules)
    assert ours == {"jobs.spark", "tidegauge.core.store"}
    assert theirs == {"json", "pyspark"}
    assert forbidden_imports({"tidegauge.core.m": theirs}) == [
        "tidegauge.core.m (core) imports pyspark"
    ]


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("tidegauge", ("cli", 4)),
        ("tidegauge.cli", ("cli", 4)),
        ("tidegauge.core.store", ("core", 1)),
        ("tidegauge.query", ("query", 2)),
        ("sketches", ("sketches", 0)),
    ],
)
def test_components(module: str, expected: tuple[str, int]) -> None:
    assert component(module) == expected
