"""Shared, session-scoped fixtures: tiny checkpoints, real builds and a real local Hub, each made once.

The client settings a local Hub needs are set before anything imports huggingface_hub.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="dflash-bot-tests-hf-"))
for _secret in ("HF_TOKEN", "HF_READ_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
    os.environ.pop(_secret, None)

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from bot.core.recipe import Recipe, load_recipe  # noqa: E402
from bot.hub.transport import configure_client  # noqa: E402
from bot.run.demo import DEMO_REPOS  # noqa: E402
from hubserver import LocalHub  # noqa: E402

configure_client("http://127.0.0.1")  # a local Hub: classic LFS, no progress bars, counted requests

REPO_ROOT = Path(__file__).resolve().parent.parent
# What `pyproject.toml` builds the wheel from.
WHEEL_SOURCES = (
    "pyproject.toml",
    "README.md",
    "bot",
    "workflows",
    "templates",
    "toolchains",
    "schemas",
    "hubserver",
    "tinymodels",
)

HUB_USER = "maintainer"
HUB_TOKEN = "hf_local_maintainer_write"  # the local Hub's write token: it may write to any namespace
# The organisations whoami lists for HUB_USER: the shipped recipe's namespace, so a preflight passes as it would for
# a maintainer of that organisation on the Hub.
HUB_ORGS = ("OpenVINO-drafts",)

# What the tests that run the job seed under the demo's repo names: the demo's repos with its published pair's
# 32-layer `oracle-deep` target and draft swapped for the 4-layer `oracle` pair, which behaves alike (the draft always
# right: accept length k + 1) and builds in about 26 s where the deep one takes 66 s (its target export alone is 37
# s). The deep pair is there for the speed-up the demo's card shows, which these tests do not read; the demo itself
# (`dflash-bot demo`: tests/reliability/test_reliability_egress.py, tests/run/test_try_install.py) keeps it.
SEEDED_KIND = "oracle"
SEEDED_REPOS = tuple(
    dataclasses.replace(repo, kind=SEEDED_KIND) if repo.kind == "oracle-deep" else repo for repo in DEMO_REPOS
)


def fast_recipe(**validation) -> Recipe:
    """The default recipe with a shorter sweep, so each build stays a few seconds."""
    recipe = load_recipe()
    # The timed sweep stops at its two pairs per setting: a tiny pair's figures are noise, and CI time is tight.
    settings = {"num_assistant_tokens": [3, 7], "repeats": 1, "timing_budget_s": 0.01, **validation}
    # One draft weight format: the int4/int8 choice is exercised by its own tests, not by every build.
    return recipe.model_copy(
        update={
            "validation": recipe.validation.model_copy(update=settings),
            "export": recipe.export.model_copy(update={"draft_weight_formats": ["int4"]}),
        }
    )


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """tiny(kind) -> TinyPair, generated once per kind per session."""
    from tinymodels import make_tiny

    made = {}

    def get(kind: str):
        if kind not in made:
            made[kind] = make_tiny(kind, tmp_path_factory.mktemp(f"tiny-{kind}"))
        return made[kind]

    return get


@pytest.fixture(scope="session")
def built(tiny, tmp_path_factory):
    """built(kind, sweep=None) -> DraftBuild (its bundle, or the BotError that stopped it), from one real build per
    kind and sweep (default: fast_recipe's)."""
    from bot.builder.draft_build import Checkout
    from bot.builder.group import build_folders

    results = {}

    def get(kind: str, sweep: tuple[int, ...] | None = None):
        if (kind, sweep) not in results:
            pair = tiny(kind)
            out = tmp_path_factory.mktemp(f"bundle-{kind}") / "bundle"
            recipe = fast_recipe(num_assistant_tokens=list(sweep)) if sweep else fast_recipe()
            results[(kind, sweep)] = build_folders(Checkout(pair.draft), Checkout(pair.target), out, recipe)
        return results[(kind, sweep)]

    return get


@pytest.fixture(scope="module")
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHub]:
    """A real local Hub (`hubserver.LocalHub`: real HTTP on loopback) for one test module, started empty.

    Its user is `HUB_USER` with the write token `HUB_TOKEN`; a module may name another user (`HUB_USER`) or a
    smaller listing page (`HUB_PAGE_SIZE`, to exercise pagination) at its top. A module that needs repos in it
    overrides this fixture with one that takes it and seeds it (`def hub(hub, tmp_path_factory): ...`).
    """
    user = getattr(request.module, "HUB_USER", HUB_USER)
    paging = {"page_size": request.module.HUB_PAGE_SIZE} if hasattr(request.module, "HUB_PAGE_SIZE") else {}
    with LocalHub(tmp_path_factory.mktemp("hub") / "data", user, HUB_TOKEN, orgs=HUB_ORGS, **paging) as server:
        yield server


@pytest.fixture()
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def reliability_rows():
    """Write the hostile suite's rows (tests/reliability/rows.py) for tests/reliability/report.py."""
    yield
    target = os.environ.get("RELIABILITY_ROWS")
    if target:
        import json

        from tests.reliability.rows import ROWS

        Path(target).write_text(json.dumps(ROWS, indent=2))


@pytest.fixture(autouse=True)
def _local_hub_client() -> Iterator[None]:
    """`bot.hub.transport.configure_client` is process-wide: a test that runs a command in-process without
    `HF_ENDPOINT` (to see it refuse early) configures the client for huggingface.co, which turns Xet uploads on, and
    the next test of that worker then uploads to a local Hub that speaks LFS only (404 on the Xet write token). Each
    test starts local."""
    configure_client("http://127.0.0.1")
    yield


@pytest.fixture()
def own_logger():
    """Commands run in-process set up the bot's logger on that test's stderr; give later tests the logger as it
    was."""
    import logging

    logger = logging.getLogger("dflash-bot")
    handlers, propagate, level, disabled = list(logger.handlers), logger.propagate, logger.level, logger.disabled
    yield
    logger.handlers[:], logger.propagate, logger.disabled = handlers, propagate, disabled
    logger.setLevel(level)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The bot's wheel, built from a copy of the sources with setuptools' own backend (no network, nothing left in
    the checkout)."""
    root = tmp_path_factory.mktemp("wheel")
    src, dist = root / "src", root / "dist"
    for name in WHEEL_SOURCES:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(REPO_ROOT / name, src / name)
    build = "import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", build, str(dist)], cwd=src, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dist / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh environment with the wheel installed and this environment's packages visible, the bot excepted."""
    folder = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    python = folder / "bin" / "python"
    fresh = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(fresh) / "dependencies-of-the-checkout.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    done = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


# The modules that take longest, longest first: each module's total (setup, call and teardown of its tests) in a full
# run's junit report (`pytest --junitxml`, 2026-12-05), every module over 45 s. With `--dist loadfile` a worker takes
# the next module when it is free; sent first, the long ones start first and the short ones fill in at the end, so
# neither worker waits alone on one long module. pyproject's `--no-loadscope-reorder` keeps this order: by default
# pytest-xdist sends the modules with the most tests first, which left the one-test scenarios (the offline demo,
# the runs-at-once race) to the end of the run, one worker idle.
LONG_MODULES = (
    "tests/run/test_pipeline.py",
    "tests/reliability/test_reliability.py",
    "tests/run/test_fanout.py",
    "tests/reliability/test_reliability_egress.py",
    "tests/builder/test_official_target.py",
    "tests/publish/test_format_names.py",
    "tests/reliability/test_reliability_concurrency.py",
    "tests/builder/test_group.py",
    "tests/builder/test_moe.py",
    "tests/tinymodels/test_vlm.py",
    "tests/run/test_upstream.py",
    "tests/run/test_who_gets_published.py",
    "tests/test_deploy.py",
    "tests/status/test_sync.py",
    "tests/run/test_try_pair.py",
    "tests/sandbox/test_security.py",
    "tests/run/test_light_install.py",
    "tests/builder/test_quality.py",
    "tests/run/test_try_install.py",
    "tests/builder/test_validate_per_row.py",
    "tests/publish/test_card_commands.py",
    "tests/builder/test_per_row_rules.py",
    "tests/reliability/test_reliability_network.py",
    "tests/reliability/test_reliability_cli.py",
)


# The expensive tests carry the `slow` marker, so `make test-fast` (`pytest -m "not slow"`) runs the rest between
# commits; `make test` and CI run everything. A test is slow when it lives in a folder of SLOW_FOLDERS (the
# reliability scenarios), or when it uses, directly or through other fixtures, a fixture that runs real builds: one of
# REAL_BUILD_FIXTURES, or one its module names in `REAL_BUILDS` (a tuple of fixture names, beside the fixtures). A
# test that runs a real build by itself is marked `@pytest.mark.slow` where it is defined. tests/durations.txt shows
# the fast loop's slowest tests (`make durations` writes it).
SLOW_FOLDERS = ("tests/reliability/",)
REAL_BUILD_FIXTURES = frozenset({"built"})


def real_build_fixtures(item: pytest.Item) -> set[str]:
    """The real-build fixtures a test uses, directly or through other fixtures."""
    module = getattr(item, "module", None)
    named = {*REAL_BUILD_FIXTURES, *getattr(module, "REAL_BUILDS", ())}
    return named & set(getattr(item, "fixturenames", ()))


def is_slow(item: pytest.Item) -> bool:
    """Whether the test belongs out of the fast loop: in a slow folder, or using a real-build fixture."""
    path = Path(str(item.path)).resolve().relative_to(REPO_ROOT).as_posix()
    return path.startswith(SLOW_FOLDERS) or bool(real_build_fixtures(item))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `slow` marker on the expensive tests (before `-m` deselects: a conftest's hook runs before pytest's own);
    then long modules first (LONG_MODULES order), every other module after them in collection order."""
    for item in items:
        if is_slow(item) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
    rank = {module: index for index, module in enumerate(LONG_MODULES)}

    def module_rank(item: pytest.Item) -> int:
        module = Path(str(item.path)).resolve().relative_to(REPO_ROOT).as_posix()
        return rank.get(module, len(rank))

    items.sort(key=module_rank)  # stable: a module's tests keep their order
