"""Following upstream: is there a newer toolchain, and does it still build and validate our pairs? (docs/design.md §10)

`dflash-bot toolchain check` asks the package index (`upstream_index`, through pip, so that the user's index
configuration applies) for the newest releases of the OpenVINO stack that satisfy each other's declared
requirements, proposes each toolchain profile's candidate pins (`upstream_proposal`), and when a profile's pins would
change, tries its candidate in an environment of its own (`upstream_trial`: the capability probe and the tiny oracle
pair). This module holds the check, its report and table, and the pinning of a candidate that passed.

Asking costs a few pip resolutions and no environment: with no newer release nothing is built.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from bot.core import package_data
from bot.core.errors import UsageError
from bot.core.profiles import PROFILES_FILE, ProfileSet, _canonical, load_profiles
from bot.core.settings import Settings
from bot.core.toolchain import detect
from bot.run.upstream_index import Index, PipIndex
from bot.run.upstream_proposal import STACK, ProfileProposal, propose
from bot.run.upstream_trial import CandidateResult, Probe, try_candidate


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
