"""Toolchain profiles: which pinned environment builds which target family (docs/design.md §6).

optimum-intel gates each model type by a transformers range (`MIN_TRANSFORMERS_VERSION` /
`MAX_TRANSFORMERS_VERSION` on its export config classes) that pip does not enforce: optimum-intel 2.2.0 exports
`qwen3_5*` with transformers 5.2.x only and `gemma4*` with >= 5.5 only. So one environment cannot serve every
family. A profile is a named, pinned requirement set in `toolchains/profiles.yaml`; the bounds are read from the
installed optimum-intel's source (without importing it), with a table in the same file as the fallback; a job
runs in the first profile whose transformers pin satisfies its target's bounds. The environment of a profile is
created on demand (venv, torch first, the pins, torchvision removed) and reused while its pins stay the same.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

from bot.core import package_data
from bot.core.errors import RecipeError, Skip, Stage
from bot.core.exporter import ExporterSnapshot, bounds_from_source, load_snapshot, optimum_model_configs
from bot.core.toolchain import TRACKED_PACKAGES, Toolchain, detect

PROFILES_FILE = package_data.folder(package_data.TOOLCHAINS) / "profiles.yaml"
DEFAULT_PROFILE = "default"
_READY = ".dflash-bot-profile.json"


@dataclass(frozen=True)
class Profile:
    """A named, pinned requirement set."""

    name: str
    description: str
    requirements: tuple[str, ...]
    torch: str
    uninstall: tuple[str, ...] = ()
    # The target model types this profile is for; `bot.run.upstream` proposes its transformers pin from their bounds.
    model_types: tuple[str, ...] = ()

    def pin(self, package: str) -> str | None:
        """The version pinned for `package` (`name==version` requirements only)."""
        for requirement in self.requirements:
            name, _, version = requirement.partition("==")
            if _canonical(name) == _canonical(package) and version:
                return version.split(";")[0].strip()
        return None

    @property
    def transformers(self) -> str:
        version = self.pin("transformers")
        if version is None:
            raise ValueError(f"profile {self.name} does not pin transformers")
        return version

    def fingerprint(self) -> str:
        payload = json.dumps([self.torch, list(self.requirements), list(self.uninstall)])
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Bounds:
    """optimum-intel's transformers range for one model type, inclusive at both ends (None: unbounded)."""

    model_type: str
    minimum: str | None
    maximum: str | None
    source: str  # "optimum-intel <version> source" or "profiles.yaml fallback" or "no bounds"

    def allows(self, version: str) -> bool:
        try:
            have = Version(version)
        except InvalidVersion:
            return False
        # optimum-intel compares release numbers; a local tag (+cpu) must not push a version over a bound.
        have = Version(have.base_version)
        if self.minimum is not None and have < Version(self.minimum):
            return False
        return self.maximum is None or have <= Version(self.maximum)

    def requirement(self) -> str:
        """The range as a requirement specifier, e.g. `transformers >=5.2.0,<=5.2.99`."""
        parts = [f">={self.minimum}" if self.minimum else "", f"<={self.maximum}" if self.maximum else ""]
        text = "transformers " + (",".join(p for p in parts if p) or "(any version)")
        if self.minimum and self.maximum and Version(self.minimum) > Version(self.maximum):
            # optimum-intel 2.2.0's gemma4_text: MIN 5.5 of its own, MAX 5.0 inherited from the Gemma config.
            text += " (an empty range: this optimum-intel refuses the type with every transformers)"
        return text


@dataclass(frozen=True)
class ProfileSet:
    profiles: tuple[Profile, ...]
    # What the default profile's environment reports beyond its pins (`toolchains/exporter.yaml`): the bounds used
    # where optimum-intel's source cannot be read, and the toolchain a light install plans with.
    exporter: ExporterSnapshot

    def get(self, name: str) -> Profile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        raise KeyError(f"no toolchain profile named {name!r} (have: {', '.join(p.name for p in self.profiles)})")


def load_profiles(path: Path | None = None) -> ProfileSet:
    """Parse `toolchains/profiles.yaml`.

    Raises:
        ValueError: a profile without requirements or without a transformers pin, or no `default` profile.
    """
    data = yaml.safe_load((path or PROFILES_FILE).read_text(encoding="utf-8"))
    torch = str(data.get("torch", "torch"))
    uninstall = tuple(data.get("uninstall") or ())
    profiles = []
    for name, body in (data.get("profiles") or {}).items():
        requirements = tuple(str(r).split("#")[0].strip() for r in body.get("requirements") or ())
        if not requirements:
            raise ValueError(f"toolchain profile {name} has no requirements")
        profile = Profile(
            name=name,
            description=str(body.get("description", "")),
            requirements=requirements,
            torch=torch,
            uninstall=uninstall,
            model_types=tuple(str(t) for t in body.get("model_types") or ()),
        )
        profile.transformers  # noqa: B018 - validates the pin
        profiles.append(profile)
    if not any(p.name == DEFAULT_PROFILE for p in profiles):
        raise ValueError(f"{path or PROFILES_FILE} has no '{DEFAULT_PROFILE}' profile")
    return ProfileSet(tuple(profiles), load_snapshot())


# ---- bounds from optimum-intel ----


def transformers_bounds(
    model_type: str, profiles: ProfileSet | None = None, model_configs: Path | None = None
) -> Bounds:
    """optimum-intel's transformers range for `model_type`: from its source when installed, else the fallback."""
    path = model_configs or optimum_model_configs()
    if path is not None:
        try:
            table = bounds_from_source(path)
        except (OSError, SyntaxError):
            table = None
        if table is not None:
            low, high = table.get(model_type, (None, None))
            return Bounds(model_type, low, high, f"optimum-intel source ({path.name})")
    exporter = (profiles or load_profiles()).exporter
    low, high = exporter.transformers_bounds.get(model_type, (None, None))
    return Bounds(model_type, low, high, f"toolchains/exporter.yaml (optimum-intel {exporter.optimum_intel})")


def select_profile(
    model_type: str, profiles: ProfileSet | None = None, *, subject: str | None = None, bounds: Bounds | None = None
) -> Profile:
    """The first profile whose transformers pin is inside optimum-intel's bounds for `model_type`.

    Raises:
        Skip: no profile covers the model type (the message names the versions it needs and what exists).
    """
    profiles = profiles or load_profiles()
    bounds = bounds or transformers_bounds(model_type, profiles)
    for profile in profiles.profiles:
        if bounds.allows(profile.transformers):
            return profile
    have = ", ".join(f"{p.name} (transformers {p.transformers})" for p in profiles.profiles)
    raise Skip(
        f"no toolchain profile covers model_type '{model_type}': it needs {bounds.requirement()} "
        f"({bounds.source}); profiles: {have}. Add a profile with such a pin to toolchains/profiles.yaml",
        subject=subject,
        stage=Stage.CLASSIFY,
    )


def check_transformers(
    model_type: str,
    transformers_version: str,
    *,
    profile: str = DEFAULT_PROFILE,
    subject: str | None = None,
    profiles: ProfileSet | None = None,
) -> Bounds:
    """Refuse a target the given transformers cannot export, before any export runs into it.

    Raises:
        Skip: naming the range the model type needs, the version at hand and the profile that has it.
    """
    bounds = transformers_bounds(model_type, profiles)
    if bounds.allows(transformers_version):
        return bounds
    try:
        hint = f"; build it in toolchain profile '{select_profile(model_type, profiles, bounds=bounds).name}'"
    except Skip:
        hint = "; no toolchain profile has such a transformers pin"
    raise Skip(
        f"target model_type '{model_type}' needs {bounds.requirement()} ({bounds.source}), but the toolchain "
        f"(profile '{profile}') has transformers {transformers_version}{hint}",
        subject=subject,
        stage=Stage.CLASSIFY,
    )


# ---- environments ----
# Where they live is `Settings.profiles_dir` (`DFLASH_BOT_PROFILES_DIR`), passed in as `root`.


def is_current(profile: Profile) -> bool:
    """Whether this interpreter's environment already has the profile's pins (then no venv is needed)."""
    for requirement in profile.requirements:
        name, _, version = requirement.partition("==")
        try:
            if Version(importlib.metadata.version(name)).base_version != Version(version).base_version:
                return False
        except (importlib.metadata.PackageNotFoundError, InvalidVersion):
            return False
    return True


def environment_python(profile: Profile, root: Path) -> Path:
    """Path of the python of the profile's environment under `root` (which may not exist yet)."""
    return root / f"{profile.name}-{profile.fingerprint()}" / "bin" / "python"


def ensure_environment(
    profile: Profile,
    *,
    root: Path,
    log_path: Path | None = None,
    timeout_s: float = 1800,
    pip_args: tuple[str, ...] = (),
) -> Path:
    """Create (or reuse) the profile's environment and return its python.

    Steps: `python -m venv`; `pip install <torch pin>` first, so the CPU wheel resolves; `pip install <pins>`;
    `pip uninstall -y torchvision`. A marker written last makes a half-built environment count as absent.

    Args:
        root: the folder of the environments (`Settings.profiles_dir`).

    Raises:
        Skip: the environment could not be set up (the message names the profile, its pins and the pip error).
    """
    python = environment_python(profile, root)
    venv = python.parent.parent
    marker = venv / _READY
    if marker.is_file() and python.is_file():
        return python
    log_path = log_path or venv.with_suffix(".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", *pip_args]
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [*pip, "install", "--quiet", profile.torch],
        [*pip, "install", "--quiet", profile.torch, *profile.requirements],
    ]
    if profile.uninstall:
        steps.append([*pip, "uninstall", "--quiet", "-y", *profile.uninstall])
    with log_path.open("w", encoding="utf-8") as log:
        for cmd in steps:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            try:
                done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired:
                raise Skip(
                    f"toolchain profile '{profile.name}' could not be set up: '{' '.join(cmd[-3:])}' ran "
                    f"past {timeout_s:.0f}s",
                    stage=Stage.TOOLCHAIN,
                ) from None
            if done.returncode != 0:
                raise Skip(
                    f"toolchain profile '{profile.name}' could not be set up (needs "
                    f"{profile.torch}, {', '.join(profile.requirements)}): {_last_line(log_path)}",
                    stage=Stage.TOOLCHAIN,
                )
    marker.write_text(
        json.dumps(
            {"profile": profile.name, "fingerprint": profile.fingerprint(), "requirements": list(profile.requirements)}
        )
        + "\n",
        encoding="utf-8",
    )
    return python


def child_env(env: dict[str, str], python: str | None) -> dict[str, str]:
    """Let another environment's python import this `bot` package (for `-m bot.sandbox.child`), and nothing else
    of this environment (`import_path`); PYTHONSAFEPATH keeps the working folder off its `sys.path` (a checkout's
    `bot/` there lacks the data packages, and nothing a child runs is to be imported from where it happens to run)."""
    if python is not None and Path(python) != Path(sys.executable):
        path = os.pathsep.join(p for p in (str(import_path()), env.get("PYTHONPATH")) if p)
        env = {**env, "PYTHONPATH": path, "PYTHONSAFEPATH": "1"}
    return env


@functools.cache
def import_path() -> Path:
    """A folder from which another environment's python imports this `bot` package and nothing else.

    The folder that holds `bot` here will not do: installed from a wheel it is site-packages, whose packages would
    shadow the profile's own pins; in a checkout the data packages (`bot.toolchains`, ...) sit beside `bot/`, mapped
    in by the editable install only, so `bot.core.profiles` could not even be imported there. This folder holds
    `bot/` laid out as a wheel installs it, in links: each entry of the package and each data package's folder.
    Made once per process, removed at its exit.
    """
    package = package_data.folder(package_data.PACKAGE)
    root = Path(tempfile.mkdtemp(prefix="dflash-bot-import-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    mirror = root / package_data.PACKAGE
    mirror.mkdir()
    for entry in package.iterdir():
        (mirror / entry.name).symlink_to(entry)
    for name in package_data.DATA_PACKAGES:
        link = mirror / name.rpartition(".")[2]
        if not link.exists():  # a wheel has them inside the package already
            link.symlink_to(package_data.folder(name))
    return root


def _canonical(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["(no output)"])[-1][:400]


# ---- the toolchain a build runs in ----


def toolchain_for(
    model_type: str | None,
    *,
    root: Path,
    profiles: ProfileSet | None = None,
    log_path: Path | None = None,
):
    """The `Toolchain` (versions, capabilities, profile, python) that builds a target of `model_type`.

    The default profile runs in this environment when it has the profile's pins; any other profile runs in its
    own environment under `root` (`Settings.profiles_dir`), created on first use, and its versions and
    capabilities are detected there.

    Raises:
        Skip: no profile covers the model type, or the profile's environment could not be set up.
    """
    profiles = profiles or load_profiles()
    profile = select_profile(model_type, profiles) if model_type else profiles.get(DEFAULT_PROFILE)
    if profile.name == DEFAULT_PROFILE and is_current(profile):
        current = detect()
        return Toolchain(versions=current.versions, capabilities=current.capabilities, profile=profile.name)
    python = ensure_environment(profile, root=root, log_path=log_path)
    toolchain = detect_in(python, profile.name)
    _record_capabilities(python, toolchain.capabilities)
    return toolchain


def planned_toolchain(model_type: str | None, *, profiles: ProfileSet | None = None, root: Path | None = None):
    """The `Toolchain` a build of this target family will run in, known without creating any environment.

    Versions are the profile's pins; capabilities are those recorded when its environment under `root`
    (`Settings.profiles_dir`; None: none is looked at) was last created, or (never created yet) this environment's,
    since every profile pins the same exporter. Planning compares published builds with this; the build itself
    detects the real toolchain.

    Raises:
        Skip: no profile covers the model type.
    """
    profiles = profiles or load_profiles()
    profile = select_profile(model_type, profiles) if model_type else profiles.get(DEFAULT_PROFILE)
    current = planning_toolchain(profiles)
    if profile.name == DEFAULT_PROFILE and (is_current(profile) or not exporter_installed()):
        return Toolchain(versions=current.versions, capabilities=current.capabilities, profile=profile.name)
    versions = {name: profile.pin(dist) or "not pinned" for name, dist in TRACKED_PACKAGES.items()}
    versions["torch"] = _torch_version(profile.torch, profiles.exporter) or current.versions["torch"]
    recorded = None if root is None else recorded_capabilities(environment_python(profile, root))
    return Toolchain(
        versions=versions, capabilities=current.capabilities if recorded is None else recorded, profile=profile.name
    )


def exporter_installed() -> bool:
    """Whether this environment has the export toolchain (`make install`), not only the light install."""
    return detect().versions["optimum-intel"] != "not installed"


def planning_toolchain(profiles: ProfileSet | None = None) -> Toolchain:
    """The toolchain this checkout's default builds run in, as planning compares published builds with it.

    With the export toolchain installed it is what `detect()` finds. The light install (`make install-light`, the
    Actions plan and publish jobs) has no optimum-intel or torch: there it is the default profile's pins and what
    `toolchains/exporter.yaml` says an environment with those pins reports, the same values a build job detects.

    Raises:
        RecipeError: the snapshot was made for another optimum-intel than the default profile pins.
    """
    return detect() if exporter_installed() else light_toolchain(profiles)


def light_toolchain(profiles: ProfileSet | None = None) -> Toolchain:
    """`planning_toolchain` where the export toolchain is not installed (see there).

    Raises:
        RecipeError: the snapshot was made for another optimum-intel than the default profile pins.
    """
    current = detect()
    profiles = profiles or load_profiles()
    default = profiles.get(DEFAULT_PROFILE)
    exporter = profiles.exporter
    if default.pin("optimum-intel") != exporter.optimum_intel:
        raise RecipeError(
            f"toolchains/exporter.yaml was made with optimum-intel {exporter.optimum_intel}, but the default profile "
            f"pins {default.pin('optimum-intel')}: run `make install && .venv/bin/python -m bot.core.exporter --write`"
        )
    versions = {name: default.pin(dist) or current.versions[name] for name, dist in TRACKED_PACKAGES.items()}
    versions["torch"] = _torch_version(default.torch, exporter) or current.versions["torch"]
    return Toolchain(versions=versions, capabilities=exporter.capabilities, profile=DEFAULT_PROFILE)


def _torch_version(requirement: str, exporter: ExporterSnapshot) -> str | None:
    """The version a torch pin installs as: the snapshot's, local label included (`2.13.0+cpu`), when it is that
    release."""
    pinned = requirement.partition("==")[2]
    if pinned and Version(exporter.torch).base_version == Version(pinned).base_version:
        return exporter.torch
    return pinned or None


def recorded_capabilities(python: Path) -> frozenset[str] | None:
    """The capabilities detected in a profile environment when it was created (None: not recorded)."""
    marker = python.parent.parent / _READY
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    capabilities = data.get("capabilities") if isinstance(data, dict) else None
    return frozenset(map(str, capabilities)) if isinstance(capabilities, list) else None


def _record_capabilities(python: Path, capabilities: frozenset[str]) -> None:
    marker = python.parent.parent / _READY
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        data["capabilities"] = sorted(capabilities)
        marker.write_text(json.dumps(data) + "\n", encoding="utf-8")
    except (OSError, ValueError):
        pass  # a marker we cannot update only costs the next plan a fallback


def json_from(python: Path | str, code: str, *args: str) -> tuple[Any, str]:
    """Run `code` in another environment's python (which can import this `bot`, `child_env`) and parse the JSON on
    its last output line; returns (value, "") or (None, the last error line)."""
    done = subprocess.run(
        [str(python), "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(dict(os.environ), str(python)),
        check=False,
    )
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
    return json.loads(done.stdout.strip().splitlines()[-1]), ""


def detect_in(python: Path, profile: str):
    """Run `bot.core.toolchain.detect()` inside another environment.

    Raises:
        Skip: the environment's python cannot import the toolchain (a broken or half-removed environment).
    """
    code = (
        "import json; from bot.core.toolchain import detect; t = detect(); "
        "print(json.dumps({'versions': t.versions, 'capabilities': sorted(t.capabilities)}))"
    )
    data, error = json_from(python, code)
    if data is None:
        raise Skip(
            f"toolchain profile '{profile}' environment at {python.parent.parent} does not work: {error}",
            stage=Stage.TOOLCHAIN,
        )
    return Toolchain(
        versions=data["versions"], capabilities=frozenset(data["capabilities"]), profile=profile, python=str(python)
    )
