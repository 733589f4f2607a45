"""The import rules of the source tree, read from the code itself with ``ast`` (function-local imports and
``TYPE_CHECKING`` blocks included: a dependency is a dependency wherever it is written).

- ``forewarn.core`` imports nothing of forewarn outside ``core``, and nothing outside the standard library.
- No import cycle between packages, nor between the modules of one package.
- No surface imports the store: they see the application's errors, never the database's.
- No module imports a ``_private`` name of another module.
- ``scenarios``, ``recording``, ``sandbox`` and ``testing`` are clients: they never import the engine or a cloud's component or
  model. So is each cloud's ``scenario`` package (its steps of a scenario file, its observer of a run, its checks): it
  imports, of forewarn, only the steps' protocol, the runner's HTTP client and the core's times, durations, errors and
  words.
- A cloud's package imports no other cloud's; outside the clouds, no module imports one: only the registry loads
  them, by name (``registry.py``), and every corridor knows a cloud through ``forewarn/cloud.py``'s protocol.
- The cloud-neutral corridors (``app``, ``server``, ``control``, ``cli``, ``scenarios``, ``waves``) name no cloud: no
  string of their code is a registered cloud's name, a route of its control API or a key of its fleet-file section
  (but the few places listed in ``STILL_NAMED``).
- ``docs/architecture.md`` shows the packages and whom each imports; the picture there is this graph.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src"
PACKAGE = SOURCE / "forewarn"

SURFACES = (
    "forewarn.azure.imds",
    "forewarn.azure.arm",
    "forewarn.azure.maintenance",
    "forewarn.azure.resource_graph.api",
    "forewarn.aws.imds",
    "forewarn.aws.ec2_api",
    "forewarn.aws.sqs",
    "forewarn.gcp.metadata",
    "forewarn.gcp.compute_api",
    "forewarn.control",
)
ENGINE_PARTS = (
    "forewarn.engine",
    "forewarn.azure.component",
    "forewarn.azure.model",
    "forewarn.azure.vms",
    "forewarn.azure.changes",
    "forewarn.aws.component",
    "forewarn.aws.model",
    "forewarn.aws.changes",
    "forewarn.gcp.component",
    "forewarn.gcp.model",
    "forewarn.gcp.changes",
    "forewarn.waves",
)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module imported (for "from X import name", X.name when that is a module, else X)
    names: tuple[str, ...]  # the names taken ("from X import a, b"), empty for "import X"
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(module: str) -> Iterator[Import]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names = tuple(alias.name for alias in node.names)
            submodules = [f"{base}.{name}" for name in names if f"{base}.{name}" in MODULES]
            for target in submodules or [base]:
                yield Import(module, target, names, node.lineno)


ALL_IMPORTS = [found for module in MODULES for found in imports_of(module)]
OURS = [found for found in ALL_IMPORTS if found.target == "forewarn" or found.target.startswith("forewarn.")]


def package_of(module: str) -> str:
    """The package a module belongs to: its directory (``forewarn.azure.arm.router`` → ``azure.arm``; a top-level
    module such as ``forewarn.yamlfile`` is its own package). A cloud's plugin (``forewarn.azure.cloud``) is its own
    too: it stands above every part of its cloud, surfaces included, which it gives the server."""
    if module.endswith(".cloud") and module.count(".") == 2:
        return module.removeprefix("forewarn.")
    path = MODULES[module]
    if path.name == "__init__.py":
        return module.removeprefix("forewarn.")
    parent = module.rpartition(".")[0]
    return parent.removeprefix("forewarn.") if parent != "forewarn" else module.removeprefix("forewarn.")


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def where(found: Import) -> str:
    return f"{MODULES[found.module].relative_to(ROOT)}:{found.line}"


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {package_of(module): set() for module in MODULES if module != "forewarn"}
    for found in OURS:
        if found.module == "forewarn" or found.target not in MODULES or found.target == "forewarn":
            continue
        source, target = package_of(found.module), package_of(found.target)
        if source != target:
            graph[source].add(target)
    return graph


def test_the_core_imports_only_itself_and_the_standard_library():
    wrong = [
        f"{where(found)} imports {found.target}"
        for found in ALL_IMPORTS
        if within(found.module, ("forewarn.core",))
        and not within(found.target, ("forewarn.core",))
        and found.target.split(".")[0] not in sys.stdlib_module_names
        and found.target != "__future__"
    ]
    assert not wrong, "\n".join(wrong)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of packages that reach each other (a group of more than one is a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [group for group in groups if len(group) > 1]


def test_no_import_cycle_between_packages():
    graph = package_graph()
    problems = []
    for group in strongly_connected(graph):
        edges = sorted(
            f"  {where(found)}: {found.module} imports {found.target}"
            for found in OURS
            if package_of(found.module) in group
            and found.target in MODULES
            and package_of(found.target) in group
            and package_of(found.target) != package_of(found.module)
        )
        problems.append(f"packages {', '.join(group)} import each other:\n" + "\n".join(edges))
    assert not problems, "\n".join(problems)


def test_no_import_cycle_between_modules():
    """Within a package too: two modules that import each other (one of them in a function, to get past the cycle
    at import time) are one module's worth of meaning split in two, or a part in the wrong place."""
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for found in OURS:
        if found.target in MODULES and found.target != found.module:
            graph[found.module].add(found.target)
    problems = []
    for group in strongly_connected(graph):
        edges = sorted(
            f"  {where(found)}: {found.module} imports {found.target}"
            for found in OURS
            if found.module in group and found.target in group and found.target != found.module
        )
        problems.append(f"modules {', '.join(group)} import each other:\n" + "\n".join(edges))
    assert not problems, "\n".join(problems)


def test_no_surface_imports_the_store():
    wrong = [
        f"{where(found)} imports {found.target}"
        for found in OURS
        if within(found.module, SURFACES) and within(found.target, ("forewarn.store",))
    ]
    assert not wrong, "\n".join(wrong)


def test_no_module_takes_another_modules_private_names():
    wrong = [
        f"{where(found)} takes {name} from {found.target}"
        for found in OURS
        for name in found.names
        if name.startswith("_") and not name.startswith("__") and found.target != found.module
    ]
    assert not wrong, "\n".join(wrong)


CLOUDS = ("forewarn.azure", "forewarn.aws", "forewarn.gcp")
# Each cloud's steps of a scenario file, given through its plugin (Cloud.scenario_steps).
SCENARIO_STEPS = tuple(f"{cloud}.scenario" for cloud in CLOUDS)
CLIENTS = ("forewarn.scenarios", "forewarn.recording", "forewarn.sandbox", "forewarn.testing", *SCENARIO_STEPS)


def test_clients_never_import_the_engine():
    wrong = [
        f"{where(found)} imports {found.target}"
        for found in OURS
        if within(found.module, CLIENTS) and within(found.target, ENGINE_PARTS)
    ]
    assert not wrong, "\n".join(wrong)


# What a cloud's scenario steps, observer and checks may import of forewarn besides their own package: they speak
# HTTP and JSON, and read times, durations and counts as the core writes them.
STEPS_MAY_IMPORT = (
    "forewarn.scenario_steps",
    "forewarn.scenarios.api",
    "forewarn.core.times",
    "forewarn.core.durations",
    "forewarn.core.errors",
    "forewarn.core.words",
)


def test_a_clouds_scenario_steps_stay_a_client():
    packages = [package for package in SCENARIO_STEPS if package in MODULES]
    assert packages == list(SCENARIO_STEPS), "every built-in cloud gives its scenario steps from its scenario package"
    wrong = [
        f"{where(found)} imports {found.target}"
        for found in OURS
        for package in SCENARIO_STEPS
        if within(found.module, (package,)) and not within(found.target, (package, *STEPS_MAY_IMPORT))
    ]
    assert not wrong, "a cloud's scenario steps are a client of the server:\n" + "\n".join(wrong)


def clouds_imported() -> dict[str, set[str]]:
    """Module -> the clouds it imports, for every module outside those clouds' packages."""
    found_by_module: dict[str, set[str]] = {}
    for found in OURS:
        for cloud in CLOUDS:
            if within(found.target, (cloud,)) and not within(found.module, (cloud,)):
                found_by_module.setdefault(found.module, set()).add(cloud.removeprefix("forewarn."))
    return found_by_module


def test_no_cloud_imports_another():
    crossing = {module: names for module, names in clouds_imported().items() if within(module, CLOUDS)}
    assert not crossing, crossing


def test_outside_the_clouds_no_module_imports_one():
    corridors = {module: names for module, names in clouds_imported().items() if not within(module, CLOUDS)}
    assert not corridors, (
        f"these modules import a cloud; reach it through the registry and the Cloud protocol: {corridors}"
    )


# The cloud-neutral corridors: they reach the clouds through the registry and the Cloud protocol, and never name one.
CORRIDORS = (
    "forewarn.app",
    "forewarn.server",
    "forewarn.control",
    "forewarn.cli",
    "forewarn.scenarios",
    "forewarn.waves",
)
# What the corridors still name, each a place a plugin's part does not reach yet (docs/architecture.md, "Adding a
# cloud", step 10). The list only shrinks: an entry found no more fails the test too, so that it is taken out.
STILL_NAMED = {
    # a wave's default cloud, and the names a wave request gives the clouds that have waves
    ("forewarn.cli.waves", "cloud name azure"),
    ("forewarn.control.waves", "cloud name azure"),
    ("forewarn.waves.model", "cloud name azure"),
    # the `with` keys of steps whose values are fleet members, checked when a scenario file is read
    ("forewarn.scenarios.spec", "fleet key vms"),
    # `forewarn scenario generate`: scenarios of Azure's VMs
    ("forewarn.scenarios.generate", "fleet key vms"),
}


@functools.cache
def cloud_words() -> dict[str, dict[str, str]]:
    """What names each registered cloud, by kind: its name, the routes of its control API (as FastAPI's OpenAPI
    document lists them), the top-level keys of its fleet-file section; each word with its cloud."""
    from fastapi import FastAPI

    from forewarn.cloud import registered

    words: dict[str, dict[str, str]] = {"cloud name": {}, "route": {}, "fleet key": {}}
    for cloud in registered():
        words["cloud name"][cloud.name] = cloud.name
        router = cloud.control_router({cloud.name: object()})
        if router is not None:
            app = FastAPI()
            app.include_router(router)
            words["route"].update(dict.fromkeys(app.openapi()["paths"], cloud.name))
        words["fleet key"].update(dict.fromkeys(cloud.fleet_section().spec_fields(), cloud.name))
    return words


def named_cloud(text: str) -> str | None:
    """What of a cloud a string of the code names: the whole string one of the cloud's words (a docstring that
    mentions a route names none), or the start of a path of the cloud's routes and of no other (``/v1/gce/``, as
    ``f"/v1/gce/instances/{name}"`` begins); None: nothing of a cloud."""
    words = cloud_words()
    for kind, found in words.items():
        if text in found:
            return f"{kind} {text}"
    path = text.split("?")[0]
    if path.endswith("/") and path.count("/") >= 3 and any(route.startswith(path) for route in words["route"]):
        return f"route {path}"
    return None


def names_in(module: str) -> set[tuple[int, str]]:
    tree = ast.parse(MODULES[module].read_text())
    strings = [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return {(node.lineno, what) for node in strings if (what := named_cloud(node.value)) is not None}


def test_the_corridors_name_no_cloud():
    found = {(module, what): line for module in MODULES if within(module, CORRIDORS) for line, what in names_in(module)}
    new = sorted(
        f"{MODULES[module].relative_to(ROOT)}:{line}: {what}"
        for (module, what), line in found.items()
        if (module, what) not in STILL_NAMED
    )
    assert not new, "a corridor names a cloud; ask the cloud's plugin (forewarn/cloud.py) instead:\n" + "\n".join(new)
    gone = sorted(f"{module}: {what}" for module, what in STILL_NAMED if (module, what) not in found)
    assert not gone, "no longer named; take them out of STILL_NAMED:\n" + "\n".join(gone)


def test_what_names_a_cloud_is_told_precisely():
    """The words are the clouds' own, and a string names a cloud only when it is one of them: the check can fail,
    and text about a route (a docstring, a help) does not trip it."""
    assert named_cloud("/v1/gce/instances") == "route /v1/gce/instances"
    assert named_cloud("/v1/vms/") == "route /v1/vms/"  # f"/v1/vms/{name}" begins so
    assert named_cloud("ec2_instances") == "fleet key ec2_instances"
    assert named_cloud("azure") == "cloud name azure"
    for neutral in ("/v1/fleet/machines", "/v1/journal", "/v1/", "GET /v1/gce/instances lists them", "Azure"):
        assert named_cloud(neutral) is None, neutral
    planted = "def machines(api):\n    return api.get('/v1/ec2/instances')\n"
    strings = [node.value for node in ast.walk(ast.parse(planted)) if isinstance(node, ast.Constant)]
    assert [named_cloud(text) for text in strings] == ["route /v1/ec2/instances"]


def test_the_rules_see_function_local_imports():
    """The rules read imports wherever they are written: a cycle hidden in a function is still found."""
    tree = ast.parse("def f():\n    from forewarn.store import open_store\n")
    assert any(isinstance(node, ast.ImportFrom) for node in ast.walk(tree))
    local = [found for found in OURS if found.module == "forewarn.store" and found.target == "forewarn.store.postgres"]
    assert local, "store/__init__.py imports its PostgreSQL module inside a function; the reader must see it"


PICTURE = re.compile(r"<!-- imports: begin -->\n```text\n(?P<body>.*?)```\n<!-- imports: end -->", re.S)


def picture() -> str:
    """One line a package with code (``data`` holds files, ``__main__`` only starts the CLI), fewest imports first."""
    graph = {name: targets for name, targets in package_graph().items() if name not in ("data", "__main__")}
    width = max(map(len, graph))
    return "".join(
        f"{package:<{width}}  → {', '.join(sorted(graph[package])) or '(nothing of forewarn)'}\n"
        for package in sorted(graph, key=lambda name: (len(graph[name]), name))
    )


def test_the_architecture_page_shows_the_real_import_graph():
    page = (ROOT / "docs" / "architecture.md").read_text()
    shown = PICTURE.search(page)
    assert shown, "docs/architecture.md has no <!-- imports: begin --> ... <!-- imports: end --> picture"
    assert shown.group("body") == picture(), (
        "docs/architecture.md's import picture is out of date; it should read:\n" + picture()
    )


# The documents forewarn was first specified from are not part of the repository: code, tests and docs name the
# public page a fact comes from ("Scheduled Events in Event Grid"), never a document number or a path outside.
PRIVATE_CITATION = re.compile(r"\b[Ss]eeds? ?0\d\d\b|\.\./shared\b|design-sketch|reference/[a-z-]+\.md|reference §")


def test_sources_are_cited_by_their_public_names():
    files = [ROOT / "README.md", *ROOT.glob("docs/**/*.md")]
    for folder in ("src", "tests", "bench", "scripts"):
        files += [path for path in (ROOT / folder).rglob("*") if path.suffix in {".py", ".md", ".yaml", ".yml", ""}]
    found = []
    for path in files:
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if PRIVATE_CITATION.search(line) and "PRIVATE_CITATION" not in line:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "cite the public page instead:\n" + "\n".join(found)
