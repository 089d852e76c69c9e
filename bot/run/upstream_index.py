"""Asking the package index for the toolchain watch (`bot.run.upstream`), through pip itself, so that the user's
index, extra indexes, find-links and constraints apply.

pip's answers are read from its JSON report and the wheels it downloads, never from what it prints, and pip runs
without the PIP_* variables that would change its answers or its output (`pip_environment`), so `PIP_QUIET=1`
cannot turn "newer releases exist" into "none".
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from packaging.requirements import InvalidRequirement, Requirement

from bot.core.errors import Failure, Stage
from bot.core.exporter import optimum_model_configs
from bot.core.profiles import _canonical


@dataclass(frozen=True)
class Resolution:
    """pip's answer for a set of requirements: the install set's versions and declared requirements."""

    versions: Mapping[str, str]  # canonical name -> version
    requires: Mapping[str, tuple[str, ...]]  # canonical name -> Requires-Dist

    @classmethod
    def from_report(cls, report: dict) -> Resolution:
        """Parse `pip install --dry-run --report` JSON (report format version 1)."""
        versions, requires = {}, {}
        for item in report.get("install", []):
            metadata = item.get("metadata", {})
            name = _canonical(str(metadata.get("name", "")))
            versions[name] = str(metadata.get("version", ""))
            requires[name] = tuple(metadata.get("requires_dist") or ())
        return cls(versions, requires)

    def version(self, package: str) -> str:
        """The resolved version without its local tag (torch's `+cpu` is no version difference)."""
        return self.versions[_canonical(package)].split("+")[0]

    def requirement_of(self, package: str, dependency: str) -> Requirement | None:
        """`package`'s own requirement on `dependency` (unconditional ones only), or None."""
        for text in self.requires.get(_canonical(package), ()):
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                continue
            if _canonical(requirement.name) == _canonical(dependency) and requirement.marker is None:
                return requirement
        return None


class Index(Protocol):
    """What the watch asks the package index; `PipIndex` asks pip, tests answer from recorded replies."""

    def resolve(self, requirements: Sequence[str]) -> Resolution: ...

    def newest(self, requirement: str) -> str | None: ...

    def model_configs(self, optimum_intel: str, work: Path) -> Path: ...


# The PIP_* variables that say where releases come from and how to reach them (pip reads `PIP_<OPTION>` for every
# option, aliases included). Every other one is left out of pip's environment: PIP_QUIET or PIP_VERBOSE change what
# pip prints, PIP_NO_DEPS, PIP_PRE, PIP_REQUIREMENT, PIP_PLATFORM or PIP_PYTHON change what it answers.
PIP_SOURCE_VARIABLES = frozenset(
    f"PIP_{name}"
    for name in (
        "INDEX_URL",
        "EXTRA_INDEX_URL",
        "NO_INDEX",
        "FIND_LINKS",
        "TRUSTED_HOST",
        "CERT",
        "CLIENT_CERT",
        "PROXY",
        "RETRIES",
        "TIMEOUT",
        "DEFAULT_TIMEOUT",
        "CONSTRAINT",
        "CACHE_DIR",
        "NO_CACHE_DIR",
        "KEYRING_PROVIDER",
        "CONFIG_FILE",
        "ONLY_BINARY",
        "NO_BINARY",
        "PREFER_BINARY",
    )
)


def pip_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without the PIP_* variables that would change what pip prints or answers (PIP_SOURCE_VARIABLES stay).

    Args:
        env: the environment pip would inherit.

    Returns:
        The environment to run pip in; PIP_NO_INPUT is set, so pip never waits for a prompt.
    """
    kept = {k: v for k, v in env.items() if not k.upper().startswith("PIP_") or k.upper() in PIP_SOURCE_VARIABLES}
    return kept | {"PIP_NO_INPUT": "1"}


@dataclass(frozen=True)
class PipIndex:
    """The package index as pip sees it: `pip install --dry-run --report` and `pip download`.

    Every call runs `python -m pip` with the user's index configuration (pip.conf, the PIP_* variables of
    PIP_SOURCE_VARIABLES), so a mirror, an extra index, find-links or a constraints file apply as they would to an
    install. Answers are read from machine-readable files only (the JSON report, the downloaded wheel), never from
    what pip prints, so its verbosity does not matter.
    """

    python: str = sys.executable
    timeout_s: float = 900

    def _pip(self, *args: str) -> None:
        """Run pip in `pip_environment(os.environ)`.

        Raises:
            Failure: pip failed (its ERROR lines) or ran past `timeout_s`.
        """
        cmd = [self.python, "-m", "pip", "--disable-pip-version-check", *args]
        try:
            done = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
                env=pip_environment(os.environ),
            )
        except subprocess.TimeoutExpired:
            raise Failure(f"pip {args[0]} ran past {self.timeout_s:.0f}s", stage=Stage.TOOLCHAIN) from None
        if done.returncode != 0:
            errors = (
                [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
                or done.stderr.strip().splitlines()[-1:]
                or ["(no output)"]
            )
            raise Failure(f"pip {' '.join(args[:2])}: {' '.join(errors)[:600]}", stage=Stage.TOOLCHAIN)

    def resolve(self, requirements: Sequence[str], *, no_deps: bool = False) -> Resolution:
        """Raises Failure when pip finds no set of releases that satisfies the requirements."""
        with tempfile.TemporaryDirectory(prefix="dflash-bot-resolve-") as tmp:
            report = Path(tmp) / "report.json"
            extra = ("--no-deps",) if no_deps else ()
            self._pip(
                "install", "--dry-run", "--ignore-installed", "--quiet", *extra, "--report", str(report), *requirements
            )
            try:
                return Resolution.from_report(json.loads(report.read_text(encoding="utf-8")))
            except (OSError, ValueError, AttributeError) as exc:
                raise Failure(f"pip wrote no readable --report ({exc})", stage=Stage.TOOLCHAIN) from None

    def newest(self, requirement: str) -> str | None:
        """The release pip would install for `requirement` alone (final releases unless the range names a
        pre-release); None when no release satisfies it.

        Raises:
            Failure: pip cannot ask the index at all (the bare package name finds nothing either).
        """
        name = Requirement(requirement).name
        try:
            return self.resolve([requirement], no_deps=True).version(name)
        except Failure:
            if requirement.strip() == name:
                raise
        self.resolve([name], no_deps=True)  # the index answers for the package: the range is what excludes it
        return None

    def model_configs(self, optimum_intel: str, work: Path) -> Path:
        """optimum-intel's `model_configs.py` of that release: the installed one, or from its wheel."""
        installed = optimum_model_configs()
        if installed is not None and _installed_version("optimum-intel") == optimum_intel:
            return installed
        self._pip(
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            "--dest",
            str(work),
            f"optimum-intel=={optimum_intel}",
        )
        return extract_model_configs(work)


def extract_model_configs(folder: Path) -> Path:
    """Unpack `optimum/exporters/openvino/model_configs.py` from the optimum-intel wheel in `folder`."""
    wheels = sorted(folder.glob("optimum_intel-*.whl"))
    if not wheels:
        raise Failure(f"no optimum-intel wheel was downloaded into {folder}", stage=Stage.TOOLCHAIN)
    member = "optimum/exporters/openvino/model_configs.py"
    with zipfile.ZipFile(wheels[-1]) as wheel:
        if member not in wheel.namelist():
            raise Failure(f"{wheels[-1].name} has no {member}", stage=Stage.TOOLCHAIN)
        out = folder / "model_configs.py"
        out.write_bytes(wheel.read(member))
    return out


def _installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
