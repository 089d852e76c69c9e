"""Trying one profile's candidate for the toolchain watch (`bot.run.upstream`): its environment built (cached by its
pins), the capability probe run in it (draft formats the exporter produces, model types and their transformers
ranges), and the tiny oracle pair through export, inspect, the GenAI lossless gate and the acceptance check in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.builder.draft_build import Checkout, DraftBuild
from bot.builder.group import build_group
from bot.core.errors import BotError, Failure, Stage
from bot.core.profiles import Bounds, Profile, detect_in, ensure_environment, json_from
from bot.core.recipe import load_recipe
from bot.core.settings import Settings
from bot.core.toolchain import Toolchain
from bot.discover.candidates import classify_folders
from bot.plan.job import BuildJob
from bot.run.upstream_proposal import ProfileProposal


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
    an accept length of exactly k + 1 (docs/design.md §6); anything less means the candidate broke the draft path.
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
        [DraftBuild(BuildJob.local(candidate), Checkout(pair.draft), work / "bundle")],
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
