"""Following upstream: is there a newer toolchain, and does it still build and validate our pairs? (DESIGN §10)

`dflash-bot toolchain check` asks the package index, through pip itself so that the user's index, extra indexes,
find-links and constraints apply, for the newest releases of the OpenVINO stack that satisfy each other's declared
requirements. A candidate is per toolchain profile: optimum-intel gates each model type by a transformers range
pip does not enforce, so each profile's transformers pin is the newest release inside the candidate optimum-intel's
own bounds for the model types the profile is for (read from its `model_configs.py`, as `bot.core.profiles` does for the
installed one). When a profile's pins would change, its candidate environment is built (cached by its pins), the
capability probe runs in it (draft formats the exporter produces, model types and their transformers ranges) and
the tiny oracle pair goes through export, inspect, the GenAI lossless gate and the acceptance check in it.

Asking costs a few pip resolutions and no environment: with no newer release nothing is built. pip's answers are
read from its JSON report, never from what it prints, and pip runs without the PIP_* variables that would change
its answers or its output (`pip_environment`), so `PIP_QUIET=1` cannot turn "newer releases exist" into "none".
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from bot.builder.group import Checkout, DraftBuild, build_group
from bot.core import log, package_data
from bot.core.errors import BotError, Failure, Stage, UsageError
from bot.core.profiles import (
    PROFILES_FILE,
    Bounds,
    Profile,
    ProfileSet,
    _bounds_from_source,
    _canonical,
    _optimum_model_configs,
    detect_in,
    ensure_environment,
    json_from,
    load_profiles,
    transformers_bounds,
)
from bot.core.recipe import load_recipe
from bot.core.settings import Settings
from bot.core.toolchain import Toolchain, detect
from bot.discover.candidates import classify_folders

# The packages the watch follows; every other pin of a profile moves only when a candidate needs it to.
STACK = ("optimum-intel", "optimum", "openvino", "openvino-tokenizers", "openvino-genai", "nncf", "transformers")


def pinned_files() -> tuple[Path, Path]:
    """Where `dflash-bot toolchain check --write` pins a passing candidate: the checkout's `toolchains/profiles.yaml`
    and `pyproject.toml`.

    Raises:
        UsageError: the bot is installed (from a wheel), not run from a checkout: there is no `pyproject.toml`,
            and the installed copy of `profiles.yaml` is not where the project's pins live.
    """
    checkout = package_data.checkout()
    if checkout is None:
        raise UsageError(
            "--write pins the candidate in pyproject.toml and toolchains/profiles.yaml of a checkout of the project, "
            f"and this bot is installed ({package_data.folder(package_data.PACKAGE)}), without a pyproject.toml: "
            "run `dflash-bot toolchain check --write` from a checkout (or leave --write out)"
        )
    return PROFILES_FILE, checkout / "pyproject.toml"


# ---- asking the index ----


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
        installed = _optimum_model_configs()
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


# ---- proposing each profile's pins ----


@dataclass(frozen=True)
class ProfileProposal:
    """One profile's pins now and the candidate's (None when no release fits the candidate's bounds)."""

    profile: str
    model_types: tuple[str, ...]
    current: dict[str, str]  # every pinned requirement of the profile: name -> version
    candidate: dict[str, str] | None
    transformers_range: str  # what the candidate optimum-intel allows for the profile's model types
    note: str | None = None
    # model type -> (installed optimum-intel's transformers range, the candidate's): where a family moves
    bounds: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def changes(self) -> dict[str, tuple[str, str]]:
        if self.candidate is None:
            return {}
        return {
            name: (self.current.get(name, "-"), version)
            for name, version in self.candidate.items()
            if self.current.get(name) != version
        }


def _pins(profile: Profile) -> dict[str, str]:
    return {
        requirement.partition("==")[0].strip(): profile.pin(requirement.partition("==")[0]) or "-"
        for requirement in profile.requirements
    }


def intersect_bounds(table: Mapping[str, tuple[str | None, str | None]], model_types: Iterable[str]) -> Bounds:
    """The transformers range that serves every one of `model_types` (inclusive ends, None: unbounded)."""
    low: str | None = None
    high: str | None = None
    types = list(model_types)
    for model_type in types:
        minimum, maximum = table.get(model_type, (None, None))
        if minimum is not None and (low is None or Version(minimum) > Version(low)):
            low = minimum
        if maximum is not None and (high is None or Version(maximum) < Version(high)):
            high = maximum
    return Bounds(",".join(types) or "any", low, high, "candidate optimum-intel source")


def transformers_range(bounds: Bounds, declared: Requirement | None) -> str | None:
    """`bounds` and optimum-intel's own transformers requirement as one requirement for pip; None when the
    bounds are empty (their minimum is above their maximum), so no release can satisfy them."""
    if bounds.minimum and bounds.maximum and Version(bounds.minimum) > Version(bounds.maximum):
        return None
    parts = [f">={bounds.minimum}" if bounds.minimum else "", f"<={bounds.maximum}" if bounds.maximum else ""]
    specifiers = [p for p in parts if p] + ([str(s) for s in declared.specifier] if declared else [])
    return "transformers" + ",".join(sorted(specifiers))


def propose(profiles: ProfileSet, index: Index, *, work: Path) -> list[ProfileProposal]:
    """Each profile's candidate pins: the newest mutually consistent stack, transformers per profile.

    Raises:
        Failure: the index could not be asked, or pip found no consistent set for the stack at all.
    """
    default = profiles.profiles[0]
    stack = index.resolve([default.torch, *STACK])
    optimum_intel = stack.version("optimum-intel")
    table = _bounds_from_source(index.model_configs(optimum_intel, work))
    declared = stack.requirement_of("optimum-intel", "transformers")
    proposals = []
    for profile in profiles.profiles:
        moved = {
            t: (
                transformers_bounds(t, profiles).requirement(),
                Bounds(t, *table.get(t, (None, None)), "candidate").requirement(),
            )
            for t in profile.model_types
        }
        bounds = intersect_bounds(table, profile.model_types)
        allowed = bounds.requirement().replace("transformers ", "") + (f" and {declared.specifier}" if declared else "")
        current = _pins(profile)
        wanted_range = transformers_range(bounds, declared)
        transformers = index.newest(wanted_range) if wanted_range else None
        if transformers is None:
            note = (
                f"no transformers release satisfies {allowed} (optimum-intel {optimum_intel}, model types "
                f"{list(profile.model_types)})"
            )
            proposals.append(ProfileProposal(profile.name, profile.model_types, current, None, allowed, note, moved))
            continue
        wanted = {name: stack.version(name) for name in STACK if name != "transformers"} | {
            "transformers": transformers
        }
        if all(profile.pin(name) == version for name, version in wanted.items()):
            proposals.append(
                ProfileProposal(profile.name, profile.model_types, current, dict(current), allowed, bounds=moved)
            )
            continue
        proposals.append(
            ProfileProposal(
                profile.name,
                profile.model_types,
                current,
                _resolve_profile(profile, wanted, index),
                allowed,
                bounds=moved,
            )
        )
    return proposals


def _resolve_profile(profile: Profile, wanted: Mapping[str, str], index: Index) -> dict[str, str]:
    """The profile's full pin set around the wanted stack: other pins kept, unless the stack needs them moved."""
    stack_pins = [f"{name}=={version}" for name, version in wanted.items()]
    others = [r for r in profile.requirements if _canonical(r.partition("==")[0]) not in map(_canonical, wanted)]
    try:
        resolution = index.resolve([profile.torch, *stack_pins, *others])
    except Failure:
        log.step("profile %s: its other pins do not fit the candidate stack; letting them move", profile.name)
        resolution = index.resolve([profile.torch, *stack_pins, *(r.partition("==")[0] for r in others)])
    return {name: resolution.version(name) for name in _pins(profile)}


# ---- trying a candidate ----


@dataclass(frozen=True)
class Probe:
    """What an environment's toolchain can do: versions and capabilities (`bot.core.toolchain.CAPABILITY_*`), and
    the transformers range its optimum-intel gives each model type."""

    toolchain: Toolchain
    bounds: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "versions": self.toolchain.versions,
            "capabilities": sorted(self.toolchain.capabilities),
            "bounds": self.bounds,
        }


def probe(python: Path | str, profile: str, model_types: Sequence[str] = ()) -> Probe:
    """Run the capability probe inside the environment of `python` (planning can use this on any profile).

    Raises:
        Skip: the environment cannot import the toolchain.
        Failure: its optimum-intel's bounds could not be read.
    """
    toolchain = detect_in(Path(python), profile)
    code = (
        "import json, sys; from bot.core.profiles import transformers_bounds; "
        "print(json.dumps({t: transformers_bounds(t).requirement() for t in sys.argv[1:]}))"
    )
    bounds, error = json_from(python, code, *model_types)
    if bounds is None:
        raise Failure(f"profile {profile}: reading optimum-intel's bounds failed: {error}", stage=Stage.TOOLCHAIN)
    return Probe(toolchain, bounds)


@dataclass(frozen=True)
class PairResult:
    """The tiny oracle pair through export, inspect and GenAI in one environment."""

    passed: bool
    lossless: bool | None = None
    accept_lengths: dict[int, float] = field(default_factory=dict)  # num_assistant_tokens -> accept length
    draft_format: str | None = None
    reason: str | None = None


def run_tiny_pair(
    toolchain: Toolchain, work: Path, *, sweep: tuple[int, ...] = (3,), settings: Settings | None = None
) -> PairResult:
    """Export, inspect and validate the tiny oracle pair with `toolchain` (its python runs export and GenAI), its
    children confined as `settings` say.

    The oracle draft always agrees with its target, so a toolchain that exports and runs DFlash correctly gives
    an accept length of exactly k + 1 (DESIGN §6); anything less means the candidate broke the draft path.
    """
    from tinymodels import make_tiny  # imports torch: only the tiny-pair trial needs it

    pair = make_tiny("oracle", work / "oracle")
    recipe = load_recipe()
    recipe = recipe.model_copy(
        update={"validation": recipe.validation.model_copy(update={"num_assistant_tokens": list(sweep), "repeats": 1})}
    )
    scratch = work / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    candidate = classify_folders(pair.draft, pair.target, recipe, toolchain=toolchain)
    (outcome,) = build_group(
        Checkout(pair.target),
        [DraftBuild(candidate, Checkout(pair.draft), work / "bundle")],
        recipe,
        work=scratch,
        toolchain=toolchain,
        settings=settings,
    )
    if outcome.bundle is None:
        return PairResult(False, reason=outcome.error.one_line() if outcome.error else "no bundle written")
    validation = outcome.bundle.record.validation
    accepts = {run.num_assistant_tokens: run.accept_length for run in validation.runs}
    wrong = {k: a for k, a in accepts.items() if abs(a - (k + 1)) > 1e-6}
    reason = outcome.error.one_line() if outcome.error else None
    if wrong:
        reason = f"oracle accept length {wrong} instead of k + 1"
    return PairResult(
        passed=outcome.ok and not wrong,
        lossless=validation.lossless,
        accept_lengths=accepts,
        draft_format=outcome.bundle.record.draft.format,
        reason=reason,
    )


@dataclass(frozen=True)
class CandidateResult:
    profile: str
    environment: str | None
    probe: Probe | None
    pair: PairResult | None
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems


def try_candidate(
    proposal: ProfileProposal,
    base: Profile,
    current: Toolchain,
    *,
    root: Path,
    work: Path,
    settings: Settings | None = None,
) -> CandidateResult:
    """Build (or reuse) the candidate environment of one profile, probe it and run the tiny pair in it."""
    assert proposal.candidate is not None
    candidate = Profile(
        name=f"candidate-{proposal.profile}",
        description=f"candidate of {proposal.profile}",
        requirements=tuple(f"{n}=={v}" for n, v in proposal.candidate.items()),
        torch=base.torch,
        uninstall=base.uninstall,
        model_types=base.model_types,
    )
    try:
        python = ensure_environment(candidate, root=root)
        found = probe(python, candidate.name, candidate.model_types)
    except BotError as error:
        return CandidateResult(proposal.profile, None, None, None, (error.one_line(),))
    problems = []
    lost = current.capabilities - found.toolchain.capabilities
    if lost:
        problems.append(f"loses capabilities {sorted(lost)}")
    pin = proposal.candidate.get("transformers", "")
    for model_type in candidate.model_types:
        bounds = _bounds_in(python, model_type)
        if bounds is not None and not bounds.allows(pin):
            problems.append(f"transformers {pin} is outside {model_type}'s {bounds.requirement()}")
    pair = run_tiny_pair(
        Toolchain(found.toolchain.versions, found.toolchain.capabilities, candidate.name, str(python)),
        work / proposal.profile,
        settings=settings,
    )
    if not pair.passed:
        problems.append(f"tiny oracle pair: {pair.reason}")
    return CandidateResult(proposal.profile, str(python.parent.parent), found, pair, tuple(problems))


def _bounds_in(python: Path, model_type: str) -> Bounds | None:
    code = (
        "import json, sys; from bot.core.profiles import transformers_bounds; b = transformers_bounds(sys.argv[1]); "
        "print(json.dumps([b.minimum, b.maximum]))"
    )
    bounds, _ = json_from(python, code, model_type)
    if bounds is None:
        return None
    low, high = bounds
    return Bounds(model_type, low, high, "candidate environment")


# ---- the check ----


@dataclass(frozen=True)
class CheckReport:
    """The answer of `dflash-bot toolchain check`."""

    proposals: list[ProfileProposal]
    current: Probe
    results: list[CandidateResult]

    @property
    def newer(self) -> bool:
        return any(p.changes for p in self.proposals)

    @property
    def passed(self) -> bool:
        """Every profile whose pins would move has a candidate that was tried and passed."""
        tried = {r.profile: r.passed for r in self.results}
        return all(tried.get(p.profile, False) for p in self.proposals if p.changes)

    @property
    def exit_code(self) -> int:
        return 0 if not self.newer or self.passed else 1

    @property
    def status(self) -> str:
        if not self.newer:
            return "no newer release"
        if not self.results:
            return "newer release, candidate not tried"
        return "candidate passes" if self.passed else "candidate fails"

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "newer": self.newer,
            "passed": self.passed,
            "current": self.current.as_dict(),
            "profiles": [asdict(p) | {"changes": {k: list(v) for k, v in p.changes.items()}} for p in self.proposals],
            "candidates": [
                {
                    "profile": r.profile,
                    "environment": r.environment,
                    "passed": r.passed,
                    "problems": list(r.problems),
                    "probe": r.probe.as_dict() if r.probe else None,
                    "pair": asdict(r.pair) if r.pair else None,
                }
                for r in self.results
            ],
        }


def check(
    profiles: ProfileSet | None = None,
    index: Index | None = None,
    *,
    build: bool = True,
    root: Path | None = None,
    settings: Settings | None = None,
) -> CheckReport:
    """Ask the index for newer releases and, for each profile whose pins would move, try the candidate.

    Args:
        profiles: the pinned profiles (default: toolchains/profiles.yaml).
        index: where to ask (default: pip with the user's configuration).
        build: build and try the candidate environments (False: only propose).
        root: where candidate environments are cached (default: `settings.profiles_dir / "candidates"`).
        settings: the CLI's (profile environments, the tiny pair's confinement; default `Settings()`).

    Raises:
        Failure: the index could not be asked or gave no consistent stack.
    """
    profiles = profiles or load_profiles()
    index = index or PipIndex()
    settings = settings or Settings()
    installed = detect()
    current = Probe(installed, {})
    work = Path(tempfile.mkdtemp(prefix="dflash-bot-upstream-"))
    try:
        proposals = propose(profiles, index, work=work)
        results = []
        if build:
            for proposal in proposals:
                if proposal.changes:
                    results.append(
                        try_candidate(
                            proposal,
                            profiles.get(proposal.profile),
                            installed,
                            root=root or settings.profiles_dir / "candidates",
                            work=work,
                            settings=settings,
                        )
                    )
        return CheckReport(proposals, current, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def table(report: CheckReport, *, markdown: bool = False) -> str:
    """Versions and capabilities, current against candidate, per profile (plain text or Markdown)."""
    rows = [("profile", "package", "current", "candidate", "")]
    for proposal in report.proposals:
        for name in [n for n in STACK if n in proposal.current] + [n for n in proposal.current if n not in STACK]:
            new = (proposal.candidate or {}).get(name, "-")
            changed = "newer" if new != proposal.current[name] and proposal.candidate else ""
            if name in STACK or changed:
                rows.append((proposal.profile, name, proposal.current[name], new, changed))
        for model_type, (now, then) in proposal.bounds.items():
            rows.append(
                (
                    proposal.profile,
                    f"bounds {model_type}",
                    now.replace("transformers ", ""),
                    then.replace("transformers ", ""),
                    "moved" if now != then else "",
                )
            )
        rows.append((proposal.profile, "transformers range", "", proposal.transformers_range, proposal.note or ""))
    by_profile = {r.profile: r for r in report.results}
    current_caps = ", ".join(sorted(report.current.toolchain.capabilities)) or "none"
    for proposal in report.proposals:
        result = by_profile.get(proposal.profile)
        if result and result.probe:
            caps = ", ".join(sorted(result.probe.toolchain.capabilities)) or "none"
        else:
            caps = "(unchanged)" if not proposal.changes else "-"
        rows.append((proposal.profile, "capabilities", current_caps, caps, ""))
        if result:
            pair = result.pair
            rows.append(
                (
                    proposal.profile,
                    "tiny oracle pair",
                    "",
                    (f"lossless {pair.lossless}, accept {pair.accept_lengths}" if pair else "-"),
                    "pass" if result.passed else "FAIL: " + "; ".join(result.problems),
                )
            )
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
        return "\n".join(lines) + f"\n\n**{report.status}**\n"
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in rows]
    return "\n".join(lines) + f"\n\n{report.status}\n"


# ---- applying a candidate that passed ----

_REQUIREMENT_LINE = re.compile(r"^(?P<lead>\s*-\s*|\s*\")(?P<name>[A-Za-z0-9_.\-]+)==(?P<version>[^\s\",#;]+)")
_PROFILE_HEADER = re.compile(r"^  (?P<name>[A-Za-z0-9_\-]+):\s*$")


def apply_pins(report: CheckReport, *, profiles_file: Path, pyproject: Path) -> list[str]:
    """Write each passing candidate's pins into `profiles.yaml` (its profile's section) and, for the default
    profile, into `pyproject.toml`; comments and layout stay. Returns the files changed."""
    passed = {r.profile for r in report.results if r.passed}
    pins = {p.profile: p.candidate for p in report.proposals if p.changes and p.profile in passed and p.candidate}
    changed = []
    text = profiles_file.read_text(encoding="utf-8")
    section: str | None = None
    lines = []
    for line in text.splitlines(keepends=True):
        header = _PROFILE_HEADER.match(line)
        if header:
            section = header["name"]
        elif line and not line.startswith(" "):
            section = None
        lines.append(_repin(line, pins.get(section or "", {})))
    if "".join(lines) != text:
        profiles_file.write_text("".join(lines), encoding="utf-8")
        changed.append(str(profiles_file))
    default = pins.get(load_profiles(profiles_file).profiles[0].name)
    if default:
        text = pyproject.read_text(encoding="utf-8")
        new = "".join(_repin(line, default) for line in text.splitlines(keepends=True))
        if new != text:
            pyproject.write_text(new, encoding="utf-8")
            changed.append(str(pyproject))
    return changed


def _repin(line: str, pins: Mapping[str, str]) -> str:
    match = _REQUIREMENT_LINE.match(line)
    if not match or not pins:
        return line
    wanted = {_canonical(n): v for n, v in pins.items()}.get(_canonical(match["name"]))
    if wanted is None or wanted == match["version"]:
        return line
    return line[: match.start("version")] + wanted + line[match.end("version") :]
