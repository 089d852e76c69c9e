"""The house rules of `bot/`, read from the source with `ast` (nothing is imported, so this runs in a blink).

- Stage folders are layered, lowest first, as `bot/__init__.py` says; a module imports only from its own folder and
  from the layers below it, at module level and inside functions alike.
- No import circle between modules, counting imports inside functions and under `TYPE_CHECKING`: a circle that only
  a lazy import keeps from failing at import time is still a circle for the reader.
- An import inside a function is allowed only for the heavy libraries in `LAZY_ALLOWED`, each with a one-line reason
  on or above it (`# ...`); and in the two entry points that switch telemetry off first (`TELEMETRY_FIRST`).
- Every stage folder's `__init__.py` says what the folder owns and what it may import, and that list agrees with
  the layer order.
- Where things live: planning in `bot/plan/`, the CLI a package; no folder named like a build output (pytest,
  setuptools and editors skip those); a tests folder for every stage folder and none for a stage that is gone.
- Names: no public class name defined twice in `bot/`, no module name used in two folders, and each
  `from bot... import` (in `bot/`, `tests/` and `bench/`) names the module that defines what it imports.
- Size: no function and no module in `bot/` longer than the longest on the day the limit was set (the limits only go
  down; ruff's complexity limits in pyproject.toml are their pair).
- The fast loop (`make test-fast`): the tests that run real builds and the reliability scenarios carry the `slow`
  marker, which pytest checks (`--strict-markers`); the modules known to run real builds mark them.
- The design the code cites is `docs/design.md`, in the repository: every reference to it names a section it has,
  and nothing points at a design or style guide outside the repository.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOT = ROOT / "bot"

# Lowest first: a layer may import only from the layers before it (and from itself).
LAYERS = ("core", "hub", "sandbox", "discover", "plan", "builder", "publish", "status", "run", "cli")
# Packages that take seconds or hundreds of megabytes to import, needed by a few functions only (mostly inside the
# sandboxed children): imported where they are used, so that planning, publishing and the CLI's start stay light.
LAZY_ALLOWED = frozenset(
    {
        "torch",
        "openvino",
        "openvino_genai",
        "openvino_tokenizers",
        "matplotlib",
        "optimum",
        "nncf",
        "transformers",
        "numpy",  # 0.2 s, for the quality and validation measurements only
        "tinymodels",  # imports torch: the demo's and the upstream check's checkpoint factory
    }
)
# `bot.cli.main` and `bot.run.demo.run_demo` switch telemetry off (`bot.sandbox.telemetry.switch_off`) before
# huggingface_hub is imported, whose import otherwise fetches a registry from huggingface.co: the modules of the
# `bot.cli` package and `bot.run.demo` import the rest of the bot, huggingface_hub and the local Hub server inside the
# functions that run after it, and nothing they import at module level may bring huggingface_hub in.
TELEMETRY_FIRST = frozenset(
    {"bot.cli", *(f"bot.cli.{path.stem}" for path in (BOT / "cli").glob("*.py") if path.stem != "__init__")}
    | {"bot.run.demo"}
)
TELEMETRY_FIRST_LAZY = frozenset({"bot", "huggingface_hub", "hubserver"})
_REASON_LINE = re.compile(r"^\s*#\s*\S")


@dataclass(frozen=True)
class Import:
    """One `bot` module an import statement reaches, and where the statement stands."""

    importer: str
    imported: str
    line: int
    nested: bool  # inside a function or class body
    type_checking: bool


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def bot_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(BOT.rglob("*.py"))}


def layer_of(module: str) -> str | None:
    """The layer a `bot` module belongs to; None for the `bot` package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules: set[str]) -> Iterator[str]:
    """The modules an import statement names: a submodule when a `from` names one, else the module itself."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = importer.split(".")
        package = package if is_package else package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        yield sub if sub in modules else base


def _walk(node: ast.AST, nested: bool = False, type_checking: bool = False) -> Iterator[tuple[ast.AST, bool, bool]]:
    for child in ast.iter_child_nodes(node):
        yield child, nested, type_checking
        inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        guarded = type_checking or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
        yield from _walk(child, inner, guarded)


def imports_of(module: str, path: Path, modules: set[str]) -> Iterator[tuple[ast.Import | ast.ImportFrom, Import]]:
    """Every import statement of a module, each with the `bot` modules (or outside top packages) it names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node, nested, type_checking in _walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target in _targets(node, module, path.name == "__init__.py", modules):
                yield node, Import(module, target, node.lineno, nested, type_checking)


def all_imports() -> list[tuple[ast.Import | ast.ImportFrom, Import]]:
    modules = bot_modules()
    return [found for name, path in modules.items() for found in imports_of(name, path, set(modules))]


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return cycles


def test_layer_order_is_the_one_the_package_docstring_states() -> None:
    doc = ast.get_docstring(ast.parse((BOT / "__init__.py").read_text(encoding="utf-8"))) or ""
    stated = " → ".join(LAYERS)
    assert stated in " ".join(doc.split()), f"bot/__init__.py should list the layers as: {stated}"
    on_disk = {layer for layer in map(layer_of, bot_modules()) if layer is not None}
    assert on_disk == set(LAYERS), f"folders and layers disagree: {sorted(on_disk ^ set(LAYERS))}"


def test_no_import_reaches_a_higher_layer() -> None:
    upward = []
    for _, found in all_imports():
        importer, imported = layer_of(found.importer), layer_of(found.imported)
        if not found.imported.startswith("bot.") or importer is None or imported is None:
            continue
        if LAYERS.index(imported) > LAYERS.index(importer):
            upward.append(f"{found.importer}:{found.line} imports {found.imported} ({importer} < {imported})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_circle() -> None:
    graph: dict[str, set[str]] = {}
    for _, found in all_imports():
        if found.imported.startswith("bot.") and found.imported != found.importer:
            graph.setdefault(found.importer, set()).add(found.imported)
    cycles = find_cycles(graph)
    assert not cycles, "import circles:\n" + "\n".join(" ↔ ".join(cycle) for cycle in cycles)


def _has_reason(lines: list[str], node: ast.Import | ast.ImportFrom) -> bool:
    """A comment on the statement's own lines, or on the line above it (or above the run of imports it ends)."""
    end = node.end_lineno or node.lineno
    if any("#" in line for line in lines[node.lineno - 1 : end]):
        return True
    above = node.lineno - 2
    while above >= 0 and re.match(r"^\s*(import|from)\s", lines[above]):
        if "#" in lines[above]:
            return True
        above -= 1
    return above >= 0 and bool(_REASON_LINE.match(lines[above]))


def test_imports_inside_functions_are_heavy_libraries_with_a_reason() -> None:
    modules = bot_modules()
    found_lazy = []
    seen = set()
    for node, found in all_imports():
        if not found.nested or (found.importer, found.line) in seen:
            continue
        seen.add((found.importer, found.line))
        top = found.imported.split(".")[0]
        where = f"{found.importer}:{found.line} imports {found.imported}"
        if found.importer in TELEMETRY_FIRST and top in TELEMETRY_FIRST_LAZY:
            continue
        if top not in LAZY_ALLOWED:
            found_lazy.append(f"{where} inside a function: move it to the module's imports")
        elif not _has_reason(modules[found.importer].read_text(encoding="utf-8").splitlines(), node):
            found_lazy.append(f"{where} inside a function without a one-line `# why` on or above it")
    assert not found_lazy, "\n".join(found_lazy)


def test_the_entry_points_import_huggingface_hub_only_after_switching_telemetry_off() -> None:
    """What `bot.cli` and `bot.run.demo` import at module level, and everything that imports in turn, stays clear of
    huggingface_hub (imports under `TYPE_CHECKING` and inside functions do not run at import)."""
    hubserver = {module_name(path): path for path in sorted((ROOT / "hubserver").rglob("*.py"))}
    found_all = [*all_imports(), *(f for n, p in hubserver.items() for f in imports_of(n, p, set(hubserver)))]
    at_import: dict[str, set[str]] = {}
    for _, found in found_all:
        if not found.nested and not found.type_checking:
            at_import.setdefault(found.importer, set()).add(found.imported)
    for entry in sorted(TELEMETRY_FIRST):
        chain = {entry: [entry]}
        queue = [entry]
        while queue:
            module = queue.pop()
            for imported in sorted(at_import.get(module, ())):
                path = [*chain[module], imported]
                assert imported.split(".")[0] != "huggingface_hub", " → ".join(path)
                if imported.split(".")[0] in ("bot", "hubserver") and imported not in chain:
                    chain[imported] = path
                    queue.append(imported)


def test_every_stage_folder_says_what_it_owns_and_may_import() -> None:
    problems = []
    for position, layer in enumerate(LAYERS):
        init = BOT / layer / "__init__.py"
        if not init.exists():
            problems.append(f"bot/{layer}/__init__.py: missing (every layer is a folder)")
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        match = re.search(r"May import:(.*?)(?:\n\s*\n|\Z)", doc, re.DOTALL)
        if "TODO" in doc or "Owns" not in doc or match is None:
            problems.append(f"bot/{layer}/__init__.py: its docstring should say `Owns ...` and `May import: ...`")
            continue
        named = {name for name in LAYERS if re.search(rf"\b{name}\b", match.group(1))}
        if named != set(LAYERS[:position]):
            problems.append(f"bot/{layer}/__init__.py: may import {sorted(named)}, the layers say {LAYERS[:position]}")
    assert not problems, "\n".join(problems)


def test_the_checker_sees_circles_and_relative_imports() -> None:
    """The graph code itself: a circle through three modules is found, a chain is not."""
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}}) == []
    sibling, package = ast.parse("from .landlock import restrict\nfrom . import log").body
    assert isinstance(sibling, ast.ImportFrom) and isinstance(package, ast.ImportFrom)
    modules = {"bot.sandbox.landlock", "bot.core.log"}
    assert list(_targets(sibling, "bot.sandbox.child", False, modules)) == ["bot.sandbox.landlock"]
    assert list(_targets(package, "bot.core", True, modules)) == ["bot.core.log"]


def test_the_test_command_collects_every_test_module() -> None:
    """`make test` runs what pytest collects; a folder it skips is tests nobody runs. pytest's default
    `norecursedirs` holds `build`: the builder's tests once lived in tests/build/ and went uncollected for a round."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    collected = {line.split("::", 1)[0] for line in done.stdout.splitlines() if "::" in line}
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py")}
    assert modules - collected == set()


# ---- the fast loop ----

# The modules that request the session's real-build fixture (`built`, tests/conftest.py) or name fixtures of their
# own in `REAL_BUILDS`, and the reliability folder: `make test-fast` (`pytest -m "not slow"`) leaves their real
# builds out, `make test` and CI run them.


def _fixture_names(tree: ast.Module) -> set[str]:
    """The fixtures a test module defines: functions decorated with `pytest.fixture` (called or not)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Attribute) and target.attr == "fixture":
                    names.add(node.name)
    return names


def _real_builds(tree: ast.Module) -> tuple[str, ...] | None:
    """The module's `REAL_BUILDS = (...)`, or None without one."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["REAL_BUILDS"]:
            return tuple(ast.literal_eval(node.value))
    return None


def test_real_builds_name_fixtures_of_their_module() -> None:
    """A misspelt name in `REAL_BUILDS` would put that module's real builds back in the fast loop, silently."""
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared = _real_builds(tree)
        if declared is not None:
            assert declared, f"{path.relative_to(ROOT)}: an empty REAL_BUILDS"
            assert set(declared) <= _fixture_names(tree), f"{path.relative_to(ROOT)}: REAL_BUILDS names no fixture"


def test_every_module_that_runs_real_builds_marks_them_slow() -> None:
    """The modules conftest's LONG_MODULES lists (they run real builds) each keep their real builds out of the fast
    loop: in the reliability folder, through `built` or `REAL_BUILDS`, or with `@pytest.mark.slow` on a test."""
    from tests.conftest import LONG_MODULES, REAL_BUILD_FIXTURES, SLOW_FOLDERS

    unmarked = []
    for module in LONG_MODULES:
        source = (ROOT / module).read_text(encoding="utf-8")
        tree = ast.parse(source)
        requested = {arg.arg for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for arg in node.args.args}
        if not (
            module.startswith(SLOW_FOLDERS)
            or requested & REAL_BUILD_FIXTURES
            or _real_builds(tree)
            or "pytest.mark.slow" in source
        ):
            unmarked.append(module)
    assert unmarked == []


def test_tests_using_a_real_build_fixture_carry_the_slow_marker(request: pytest.FixtureRequest) -> None:
    """In this session (whole suite or fast loop alike), every test that uses a real-build fixture, directly or
    through other fixtures, or lives in a slow folder carries `slow`: under `-m "not slow"` none of them is left."""
    from tests.conftest import is_slow

    unmarked = [
        item.nodeid for item in request.session.items if is_slow(item) and item.get_closest_marker("slow") is None
    ]
    assert unmarked == []


def test_the_slow_marker_is_registered_and_markers_are_strict() -> None:
    """`--strict-markers`: a misspelt `@pytest.mark.slwo` is an error, not a test left in the fast loop."""
    pytest_config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]
    options = pytest_config["ini_options"]
    assert "--strict-markers" in options["addopts"].split()
    assert any(marker.startswith("slow:") for marker in options["markers"])
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert '-m pytest -q -m "not slow"' in makefile  # make test-fast
    assert re.search(r"^test: .*\n\t\$\(PY\) -m pytest -q\n", makefile, re.M)  # make test: everything


# ---- where things live ----

# Folder names that tools take for build output and skip: pytest's default `norecursedirs`, setuptools' and
# editors' excludes. `bot/build/` was one: tests/build/ went uncollected for a round.
BUILD_OUTPUT_NAMES = ("build", "dist", "_build", "*.egg", "*.egg-info", "wheelhouse", "venv", "node_modules", "{arch}")
# Folders of tests/ that mirror no stage of bot/: fixtures, and the packages beside the product.
TESTS_BESIDE_STAGES = frozenset({"data", "hubserver", "reliability", "tinymodels"})


def _folders(top: Path) -> Iterator[Path]:
    yield from (path for path in sorted(top.rglob("*")) if path.is_dir() and "__pycache__" not in path.parts)


def test_no_folder_is_named_like_a_build_output() -> None:
    named = [
        path.relative_to(ROOT).as_posix()
        for top in (BOT, ROOT / "tests")
        for path in _folders(top)
        if any(fnmatch.fnmatch(path.name, pattern) for pattern in BUILD_OUTPUT_NAMES)
    ]
    assert not named, f"folders that pytest, setuptools or editors skip as build output: {named}"


def test_every_package_in_bot_is_in_the_wheel() -> None:
    """setuptools installs only the packages pyproject.toml lists: a new package (bot/hub/ was one) left out works from
    the checkout and fails with ModuleNotFoundError from every installed copy (the wheel, `try`'s plain install)."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in BOT.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert packages - listed == set(), f"add to [tool.setuptools] packages in pyproject.toml: {packages - listed}"


def test_planning_lives_in_plan() -> None:
    """The plan step of a run is planning, so it lives in `bot/plan/`, not in the orchestration (`bot/run/`)."""
    assert not (BOT / "run" / "planning.py").exists(), "bot/run/planning.py: the plan step belongs in bot/plan/"
    planners = [
        path.relative_to(ROOT).as_posix()
        for path in sorted(BOT.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name == "plan_run"
    ]
    assert planners and all(where.startswith("bot/plan/") for where in planners), planners


def test_the_cli_is_a_package() -> None:
    assert (BOT / "cli" / "__init__.py").is_file(), "the CLI is the package bot/cli/, one module per command group"
    assert not (BOT / "cli.py").exists(), "bot/cli.py beside bot/cli/: the module shadows nothing but misleads"


def test_tests_mirror_the_stage_folders() -> None:
    """Each layer's tests sit where its code sits: `tests/<layer>/` for a folder (or `tests/test_<layer>.py` for a
    single module), and every tests folder is a layer's or one of the few beside them."""
    missing = [
        layer
        for layer in LAYERS
        if not (ROOT / "tests" / layer).is_dir() and not (ROOT / "tests" / f"test_{layer}.py").is_file()
    ]
    assert not missing, f"layers without tests/<layer>/ or tests/test_<layer>.py: {missing}"
    stray = sorted(
        path.name
        for path in (ROOT / "tests").iterdir()
        if path.is_dir() and path.name != "__pycache__" and path.name not in {*LAYERS, *TESTS_BESIDE_STAGES}
    )
    assert not stray, f"tests folders that mirror no stage of bot/: {stray}"


# ---- names ----

# Folders whose `from bot... import` lines are read for where each name comes from.
IMPORTING_FOLDERS = ("bot", "tests", "bench")


def module_level_names(tree: ast.Module) -> set[str]:
    """The names a module defines itself (classes, functions, assignments, also under `if` and `try`), not the ones
    it imports."""
    names: set[str] = set()
    statements: list[ast.stmt] = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {name.id for target in node.targets for name in ast.walk(target) if isinstance(name, ast.Name)}
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.If):
            statements += [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            statements += [*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)]
    return names


def test_no_public_class_name_is_defined_twice() -> None:
    """One class name means one class across `bot/` (`Measured`, `Memory` and `SpeedRun` each meant two, issue 42):
    a reader who meets the name, or greps for it, finds the one thing it holds."""
    where: dict[str, list[str]] = {}
    for name, path in bot_modules().items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(name)
    twice = {name: modules for name, modules in where.items() if len(modules) > 1}
    assert not twice, f"public class names defined in more than one module (rename one to say what it holds): {twice}"


def test_no_two_modules_share_a_name() -> None:
    """One module name means one module across `bot/`, packages included (`pipeline`, `commands`, `demo`,
    `official`, `signals`, `toolchain`, `step` and `status` each named two, issue 42): a name in an import, a log
    line or a traceback says which module it is."""
    where: dict[str, list[str]] = {}
    for path in sorted(BOT.rglob("*.py")):
        name = path.parent.name if path.stem == "__init__" else path.stem
        if path.stem != "__main__" and path.parent != BOT:
            where.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice, f"module names used twice in bot/ (rename one to say what it holds): {twice}"


JOB_CLASSES = frozenset({"BuildJob", "JobError", "_JobList"})  # the plan's job, the error and the list reading one


def test_a_job_is_the_plans_build_job() -> None:
    """The word job names one thing in `bot/`, the plan's `BuildJob` (issue 42: `BuildJob`, `DraftBuild`'s `BuildJob |
    Candidate`, `DraftJob` and the `build_job` command were four things called job): no other class says job, and
    the builder's record of a draft holds the job itself, never a union standing in for one."""
    classes = {
        f"{name}.{node.name}"
        for name, path in bot_modules().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and "job" in node.name.lower() and node.name not in JOB_CLASSES
    }
    assert not classes, f"classes called job that are not the plan's BuildJob (say what they hold): {sorted(classes)}"
    modules = bot_modules().items()
    unions = [name for name, path in modules if "BuildJob | Candidate" in path.read_text(encoding="utf-8")]
    assert not unions, f"a BuildJob | Candidate union (a build without a plan makes BuildJob.local): {unions}"


def test_each_name_is_imported_from_the_module_that_defines_it() -> None:
    """`from bot.x import Name` names a submodule of `bot.x` or something `bot.x` defines, never a name it only
    imports itself (`RunOptions` through `bot.run.pipeline`, issue 42): the import line says where the thing is."""
    modules = bot_modules()
    defined = {name: module_level_names(ast.parse(path.read_text(encoding="utf-8"))) for name, path in modules.items()}
    through: list[str] = []
    for folder in IMPORTING_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom) or node.level or node.module not in defined:
                    continue
                through += [
                    f"{path.relative_to(ROOT).as_posix()}:{node.lineno}: {alias.name} from {node.module}"
                    for alias in node.names
                    if alias.name not in defined[node.module] and f"{node.module}.{alias.name}" not in modules
                ]
    assert not through, f"names imported through a module that does not define them: {through}"


def test_the_name_checks_see_what_they_look_for() -> None:
    tree = ast.parse("from x import a\nB = 1\nif c:\n    def d(): ...\ntry:\n    e: int = 1\nexcept E:\n    f = 2\n")
    assert module_level_names(tree) == {"B", "d", "e", "f"}


# ---- size ----

# The longest function and module in bot/ on the day the limits were set (issue 34; ruff's C901/PLR09xx limits in
# pyproject.toml were set the same day). Lower them when the longest gets shorter; never raise them.
MAX_FUNCTION_LINES = 86
MAX_MODULE_LINES = 556  # bot/publish/publisher.py, once bot/hub.py was split (issue 42)


def _lengths() -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    functions, modules = [], []
    for path in sorted(BOT.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT).as_posix()
        modules.append((len(text.splitlines()), where))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append(((node.end_lineno or node.lineno) - node.lineno + 1, f"{where}:{node.lineno}"))
    return functions, modules


def test_no_function_or_module_grows_past_the_longest() -> None:
    functions, modules = _lengths()
    long_functions = [f"{where} ({lines} lines)" for lines, where in functions if lines > MAX_FUNCTION_LINES]
    long_modules = [f"{where} ({lines} lines)" for lines, where in modules if lines > MAX_MODULE_LINES]
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: split them: {long_functions}"
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: split them by what they do: {long_modules}"


# ---- the design the code cites ----

DESIGN = ROOT / "docs" / "design.md"
# What a reference to the design looks like: `docs/design.md §3`, `docs/design.md §5, §6`, `design §2`.
_DESIGN_REFERENCE = re.compile(r"design(?:\.md)?((?:,?\s*(?:and\s+)?§\d+)+)")
# References to files outside the repository, which a clone does not have (spelled in pieces so that this file
# does not match itself).
_OUTSIDE = re.compile("|".join((r"\bDESIGN\b", r"\bSTYLE(?:\.md| §)", re.escape("../" + "shared"))))
# Where references can stand: code, tests, docs, templates, recipes, workflows and the project's own files.
_SCANNED = ("bot", "tests", "bench", "hubserver", "tinymodels", "docs", "templates", "workflows", "toolchains",
            "schemas", ".github", ".ci")  # fmt: skip
_SCANNED_FILES = ("README.md", "RELIABILITY.md", "pyproject.toml", "Makefile")
_TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".json", ".j2", ".txt", ""}


def _scanned_texts() -> Iterator[tuple[str, str]]:
    paths = [ROOT / name for name in _SCANNED_FILES]
    for top in _SCANNED:
        paths += [p for p in sorted((ROOT / top).rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    for path in paths:
        if path.suffix not in _TEXT_SUFFIXES or path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        yield path.relative_to(ROOT).as_posix(), text.replace("\\u00a7", "§")  # JSON escapes § in the schema


def design_sections() -> set[int]:
    return {int(number) for number in re.findall(r"^## (\d+)\. ", DESIGN.read_text(encoding="utf-8"), re.MULTILINE)}


def test_every_design_reference_names_a_section_of_docs_design_md() -> None:
    found = _DESIGN_REFERENCE.search("(docs/design.md §5, §6 and §10)")
    assert found is not None and re.findall(r"§(\d+)", found.group(1)) == ["5", "6", "10"]  # the pattern itself
    sections = design_sections()
    assert sections == set(range(1, max(sections) + 1)), f"docs/design.md's sections are not 1..n: {sorted(sections)}"
    broken, outside = [], []
    for where, text in _scanned_texts():
        for number, line in enumerate(text.splitlines(), 1):
            for match in _DESIGN_REFERENCE.finditer(line):
                missing = {int(n) for n in re.findall(r"§(\d+)", match.group(1))} - sections
                if missing:
                    broken.append(f"{where}:{number}: §{', §'.join(map(str, sorted(missing)))}")
            if _OUTSIDE.search(line):
                outside.append(f"{where}:{number}: {line.strip()[:100]}")
    assert not broken, "references to sections docs/design.md does not have:\n" + "\n".join(broken)
    assert not outside, "references outside the repository (point them at docs/design.md):\n" + "\n".join(outside)


def test_the_design_describes_the_layers_as_they_are() -> None:
    """docs/design.md §1 states the layer order and a row for each layer's folder (or module)."""
    text = DESIGN.read_text(encoding="utf-8")
    stated = " → ".join(LAYERS)
    assert stated in text, f"docs/design.md §1 should state the layers as: {stated}"
    unnamed = [layer for layer in LAYERS if f"`bot/{layer}/`" not in text and f"`bot/{layer}.py`" not in text]
    assert not unnamed, f"docs/design.md §1 names no folder for: {unnamed}"
