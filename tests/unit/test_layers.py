"""The floors and stages stay one-way and free of cycles: read from the source's imports (ast).

Two pictures, both checked. The top-level folders are floors; a folder imports only the floors
below it, so no two folders ever import each other:

    3  cli/         the `tidegauge` command and the local stack it starts
    2  jobs/        the Spark job          dashboard/   the Streamlit page (never each other)
    1  tidegauge/   the library: contract, time, metrics, store, alerts, producer, query
    0  sketches/    t-digest, HyperLogLog, the stored formats

Inside the floors, components have layers; a module imports its own component and lower
layers, nothing sideways or upward. The job's stages are layers in the order an event crosses
them, so executor code cannot import the sink and a stage cannot reach into a later one:

    13 cli                      the dispatcher
    12 cli.local                local services, cluster, the demo
    11 jobs                     pipeline.py (wires the query), cli.py (`tidegauge job`)
    10 jobs.runtime             Spark session, Java, class archive, worker daemon
     9 jobs.sink                one Redis transaction per batch, roll-ups, status   (driver)
     8 jobs.state               the stateful step and its output rows             (executors)
     7 jobs.summary             the read task: chunks summarised per service      (executors)
     6 jobs.panes               a service's panes, sessions, de-duplication ids   (executors)
     5 jobs.parse               records into event columns                        (executors)
     4 jobs.source | dashboard | tidegauge.traffic | tidegauge.query     (never each other)
     3 tidegauge.alerts         rules, their stored states, evaluator, webhooks
     2 tidegauge.catalog        the service catalog, its versions in event time, SLO budgets
     1 tidegauge.core           no Spark, no Streamlit: contract, time, metrics, store
     0 sketches

Every import counts, including the ones inside functions (a lazy import is still a
dependency). The checks are functions on a {module: imports} map, so the cases at the end show
them failing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sketches", "tidegauge", "jobs", "dashboard", "cli")

#: The top-level folders as floors.
FLOORS = {"sketches": 0, "tidegauge": 1, "jobs": 2, "dashboard": 2, "cli": 3}

#: (prefix, component, layer); the longest matching prefix wins.
COMPONENTS = (
    ("sketches", "sketches", 0),
    ("tidegauge", "tidegauge", 1),
    ("tidegauge.core", "core", 1),
    ("tidegauge.catalog", "catalog", 2),
    ("tidegauge.alerts", "alerts", 3),
    ("tidegauge.traffic", "traffic", 4),
    ("tidegauge.query", "query", 4),
    ("dashboard", "dashboard", 4),
    ("jobs.source", "jobs.source", 4),
    ("jobs.parse", "jobs.parse", 5),
    ("jobs.panes", "jobs.panes", 6),
    ("jobs.summary", "jobs.summary", 7),
    ("jobs.state", "jobs.state", 8),
    ("jobs.sink", "jobs.sink", 9),
    ("jobs.runtime", "jobs.runtime", 10),
    ("jobs", "jobs", 11),
    ("cli.local", "local", 12),
    ("cli", "cli", 13),
)

#: Third-party packages a component must not import: what keeps the lower layers light.
FORBIDDEN = {
    "sketches": ("pyspark", "streamlit", "plotly", "redis", "kafka"),
    "core": ("pyspark", "streamlit", "plotly"),
    "catalog": ("pyspark", "streamlit", "plotly"),
    "alerts": ("pyspark", "streamlit", "plotly", "kafka"),
    "traffic": ("pyspark", "streamlit", "plotly"),
    "query": ("pyspark", "streamlit", "plotly"),
    "dashboard": ("pyspark",),
    # executor stages never talk to Redis; the source's planner reads pause requests from it
    **{
        stage: ("streamlit", "plotly", "redis")
        for stage in ("jobs.parse", "jobs.panes", "jobs.summary", "jobs.state")
    },
    **{c: ("streamlit", "plotly") for c in ("jobs.source", "jobs.sink", "jobs.runtime", "jobs")},
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


def floor_violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports from one top-level folder into another on the same floor or above."""
    out = set()
    for src, targets in graph.items():
        s_top = src.split(".")[0]
        for dst in targets:
            d_top = dst.split(".")[0]
            if d_top != s_top and FLOORS[d_top] >= FLOORS[s_top]:
                how = "upward" if FLOORS[d_top] > FLOORS[s_top] else "sideways"
                out.add(
                    f"{s_top}/ (floor {FLOORS[s_top]}) imports {d_top}/ "
                    f"(floor {FLOORS[d_top]}): {how}, {src} -> {dst}"
                )
    return sorted(out)


def folder_pairs(graph: Mapping[str, Iterable[str]]) -> set[tuple[str, str]]:
    """(importing folder, imported folder) for every import between two top-level folders."""
    return {
        (src.split(".")[0], dst.split(".")[0])
        for src, targets in graph.items()
        for dst in targets
        if src.split(".")[0] != dst.split(".")[0]
    }


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
        "jobs.state.aggregate",
        "dashboard.app",
        "tidegauge.traffic.generator",
        "cli.local.demo",
        "cli.main",
    ):
        assert must in graph
    assert "tidegauge.core.windows" in graph["jobs.state.aggregate"]  # edges are really found


def test_imports_only_go_down_the_layers_and_stages() -> None:
    graph, _ = import_graph()
    assert direction_violations(graph) == []


def test_top_level_folders_import_only_lower_floors() -> None:
    graph, _ = import_graph()
    assert floor_violations(graph) == []
    pairs = folder_pairs(graph)
    assert not {(a, b) for a, b in pairs if (b, a) in pairs}  # no two folders both ways
    assert ("jobs", "tidegauge") in pairs and ("cli", "jobs") in pairs  # the floors are read


def test_no_import_cycles() -> None:
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_no_spark_or_streamlit_below_their_layer() -> None:
    _, external = import_graph()
    assert forbidden_imports(external) == []


# --- the checks fail where they should -----------------------------------------------------------


def test_an_upward_or_sideways_import_is_reported() -> None:
    graph = {
        "tidegauge.core.store": {"jobs.sink.redis_sink", "sketches.hll"},  # up: core -> jobs
        "dashboard.data": {"jobs.source.kafka_source", "tidegauge.core.store"},  # sideways
        "jobs.pipeline": {"tidegauge.core.config", "jobs.parse.parser"},  # fine
        "sketches.hll": {"tidegauge.core.windows"},  # up
    }
    assert direction_violations(graph) == [
        "dashboard.data (dashboard, layer 4) imports jobs.source.kafka_source "
        "(jobs.source, layer 4): sideways",
        "sketches.hll (sketches, layer 0) imports tidegauge.core.windows (core, layer 1): upward",
        "tidegauge.core.store (core, layer 1) imports jobs.sink.redis_sink (jobs.sink, layer 9): "
        "upward",
    ]


def test_a_stage_importing_a_later_stage_is_reported() -> None:
    graph = {
        # executor code reaching for the sink's dataclasses
        "jobs.state.rows": {"jobs.sink.redis_sink", "jobs.parse.columns"},
        # the read task reaching into the stateful step
        "jobs.summary.read_task": {"jobs.state.aggregate", "jobs.source.kafka_source"},
        # the source parsing (parse comes after it)
        "jobs.source.kafka_source": {"jobs.parse.parser"},
        # the stateful step using the summaries: down, fine
        "jobs.state.aggregate": {"jobs.summary.summarise", "jobs.panes.windows"},
    }
    assert direction_violations(graph) == [
        "jobs.source.kafka_source (jobs.source, layer 4) imports jobs.parse.parser "
        "(jobs.parse, layer 5): upward",
        "jobs.state.rows (jobs.state, layer 8) imports jobs.sink.redis_sink (jobs.sink, layer 9): "
        "upward",
        "jobs.summary.read_task (jobs.summary, layer 7) imports jobs.state.aggregate "
        "(jobs.state, layer 8): upward",
    ]


def test_an_import_between_folders_of_one_floor_or_upward_is_reported() -> None:
    graph = {
        "jobs.state.rows": {"dashboard.data"},  # a lower layer number, but another folder
        "tidegauge.query": {"cli.main"},  # the library reaching up to the command line
        "cli.main": {"jobs.cli", "dashboard.run", "tidegauge.core.config"},  # fine
    }
    assert floor_violations(graph) == [
        "jobs/ (floor 2) imports dashboard/ (floor 2): sideways, jobs.state.rows -> dashboard.data",
        "tidegauge/ (floor 1) imports cli/ (floor 3): upward, tidegauge.query -> cli.main",
    ]
    # the layer check alone would have let the first one pass: dashboard's layer is lower
    assert direction_violations({"jobs.state.rows": {"dashboard.data"}}) == []


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
        "    from jobs.runtime.session import build_session\n"
        "    from . import store\n"
        "    import pyspark.sql\n"
    )
    modules = ["jobs.runtime.session", "tidegauge.core.store", "tidegauge.core.m"]
    ours, theirs = imported(src, "tidegauge.core.m", modules)
    assert ours == {"jobs.runtime.session", "tidegauge.core.store"}
    assert theirs == {"json", "pyspark"}
    assert forbidden_imports({"tidegauge.core.m": theirs}) == [
        "tidegauge.core.m (core) imports pyspark"
    ]
    assert forbidden_imports({"jobs.state.rows": {"redis", "pandas"}}) == [
        "jobs.state.rows (jobs.state) imports redis"
    ]


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("cli", ("cli", 13)),
        ("cli.main", ("cli", 13)),
        ("cli.local.demo", ("local", 12)),
        ("jobs.pipeline", ("jobs", 11)),
        ("jobs.sink.redis_sink", ("jobs.sink", 9)),
        ("jobs.summary.read_task", ("jobs.summary", 7)),
        ("tidegauge.core.store", ("core", 1)),
        ("tidegauge.catalog.join", ("catalog", 2)),
        ("tidegauge.alerts.rules", ("alerts", 3)),
        ("tidegauge.query", ("query", 4)),
        ("sketches", ("sketches", 0)),
    ],
)
def test_components(module: str, expected: tuple[str, int]) -> None:
    assert component(module) == expected
