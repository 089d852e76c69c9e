"""The draft's weight format (int4, int8), chosen by measurement (docs/design.md §9).

`bot/core/draft_formats.py` is the IR layout.

A draft's quality shows up as acceptance, and int4 is not automatically best for a small draft: int8 may accept
more tokens and be faster end to end. The build exports the draft in each of the recipe's
`export.draft_weight_formats`, runs the lossless gate and the acceptance sweep for each against the same target,
and publishes the format with the best measured speed-up at its own recommended `num_assistant_tokens`.

Choices are made beyond the noise (docs/design.md §11): each speed-up is a median with a 95 % interval
(`bot.builder.timing`), and formats whose intervals overlap are a tie, which the smaller file wins. The choice is also
sticky: a draft already published in one format (its repo is named after it, `bot.core.naming`) moves to another
only when that one's interval lies wholly above the published one's and its median is faster by more than the
recipe's `publish.format_switch_margin`, so the run-to-run noise of a re-validation never moves a draft between
repos.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bot.core.record import Validation
from bot.core.speedup import Interval

# Without intervals (a record from before they were measured), speed-ups within this relative distance are a tie:
# closer than that is run-to-run noise of the sweep on a shared CPU, and the smaller file is the better download.
TIE_TOLERANCE = 0.02
DEFAULT_SWITCH_MARGIN = 0.10  # the recipe's `publish.format_switch_margin` unless it says otherwise


@dataclass(frozen=True)
class FormatResult:
    """One draft weight format, validated against the target.

    Attributes:
        weight_format: "int4" or "int8".
        lossless: the lossless gate passed (speculative output equals plain greedy).
        acceptance_passed: the accept length reached the recipe's minimum.
        accept_length: at `num_assistant_tokens`.
        num_assistant_tokens: this format's recommended k (its fastest in the sweep).
        speedup: over plain greedy at that k (the median of the interleaved pairs).
        ir_bytes: the draft IR's weights file size.
        speedup_low, speedup_high: the speed-up's 95 % interval (None: not measured, a single timing).
        pairs: the interleaved pairs measured.
    """

    weight_format: str
    lossless: bool
    acceptance_passed: bool
    accept_length: float
    num_assistant_tokens: int
    speedup: float
    ir_bytes: int
    speedup_low: float | None = None
    speedup_high: float | None = None
    pairs: int | None = None

    @property
    def interval(self) -> Interval | None:
        if self.speedup_low is None or self.speedup_high is None:
            return None
        return Interval(self.speedup, self.speedup_low, self.speedup_high, self.pairs or 0)

    def ties(self, other: FormatResult) -> bool:
        """The noise cannot tell the two apart: their intervals overlap (without intervals: within
        `TIE_TOLERANCE` of the faster one)."""
        mine, theirs = self.interval, other.interval
        if mine is not None and theirs is not None:
            return mine.overlaps(theirs)
        return min(self.speedup, other.speedup) >= max(self.speedup, other.speedup) * (1 - TIE_TOLERANCE)

    def figure(self) -> str:
        interval = self.interval
        if interval is None:
            return f"×{self.speedup:.2f}"
        return f"×{self.speedup:.2f} [{interval.low:.2f}, {interval.high:.2f}]"

    @classmethod
    def from_validation(cls, weight_format: str, validation: Validation, ir_dir: Path) -> FormatResult:
        """The figures of one format's validation (`validate_pair`) and its exported IR folder."""
        best = validation.best_run
        return cls(
            weight_format=weight_format,
            lossless=validation.lossless,
            acceptance_passed=validation.acceptance_passed,
            accept_length=best.accept_length,
            num_assistant_tokens=best.num_assistant_tokens,
            speedup=best.speedup,
            ir_bytes=(ir_dir / "openvino_model.bin").stat().st_size,
            speedup_low=best.speedup_low,
            speedup_high=best.speedup_high,
            pairs=best.pairs,
        )


@dataclass(frozen=True)
class FailedFormat:
    """A weight format that never got figures: its export, inspection or validation failed (the card says so)."""

    weight_format: str
    reason: str


@dataclass(frozen=True)
class FormatChoice:
    """Which format is published (`chosen` is None when none is eligible) and why, with every format's figures
    and every format that failed before it could be measured."""

    chosen: str | None
    reason: str
    results: tuple[FormatResult, ...]
    failed: tuple[FailedFormat, ...] = ()
    published: str | None = None  # the format the draft was published in before this build (None: new)
    margin: float = DEFAULT_SWITCH_MARGIN

    def as_provenance(self) -> dict:
        return {
            "chosen": self.chosen,
            "reason": self.reason,
            "formats": [asdict(r) for r in self.results],
            "failed": [asdict(f) for f in self.failed],
            "published_before": self.published,
            "switch_margin": self.margin,
        }


def choose_draft_format(
    results: list[FormatResult],
    failed: list[FailedFormat] | None = None,
    *,
    published: str | None = None,
    margin: float = DEFAULT_SWITCH_MARGIN,
) -> FormatChoice:
    """The format to publish: the best speed-up at its recommended k among those that passed the lossless gate,
    unless the draft is published in another format that still passes them and is not beaten by more than `margin`.

    Formats that also passed the acceptance gate come before those that did not; a format whose speed-up interval
    overlaps the fastest one's is a tie (`FormatResult.ties`), which the smaller IR wins. `failed` formats are
    listed, never chosen.

    Args:
        results: every measured format's figures.
        failed: the formats that could not be measured.
        published: the weight format the draft's published repo holds (its record's), or None for a new draft.
        margin: how much faster (0.1: 10 %) another format's median must be to replace `published`, its interval
            also wholly above the published one's.

    Returns:
        The choice, its reason and every figure (`as_provenance` is the record's `draft_formats`).
    """
    choice = replace(_choose(tuple(results)), published=published, margin=margin)
    if published is not None:
        choice = _sticky(choice, published, margin)
    if failed:
        names = ", ".join(f"{f.weight_format} (failed: {f.reason})" for f in failed)
        choice = replace(choice, reason=f"{choice.reason}; not measured: {names}", failed=tuple(failed))
    return choice


def _choose(measured: tuple[FormatResult, ...]) -> FormatChoice:
    eligible = [r for r in measured if r.lossless]
    if not eligible:
        failed = ", ".join(r.weight_format for r in measured) or "none measured"
        return FormatChoice(None, f"no draft format passed the lossless gate ({failed})", measured)
    accepted = [r for r in eligible if r.acceptance_passed]
    pool = accepted or eligible
    fastest = max(pool, key=lambda r: r.speedup)
    tied = [r for r in pool if r is fastest or r.ties(fastest)]
    chosen = min(tied, key=lambda r: (r.ir_bytes, -r.speedup))
    others = [r for r in measured if r is not chosen]
    reason = (
        f"{chosen.weight_format}: speed-up {chosen.figure()} at num_assistant_tokens="
        f"{chosen.num_assistant_tokens} (accept length {chosen.accept_length:.2f})"
    )
    if len(tied) > 1:
        rivals = ", ".join(f"{r.weight_format} {r.figure()}" for r in tied if r is not chosen)
        beside = "its interval overlaps" if chosen.interval and fastest.interval else f"within {TIE_TOLERANCE:.0%} of"
        reason += f", {beside} {rivals}; the noise cannot tell them apart and the smaller file wins the tie"
    elif others:
        reason += ", ahead of " + ", ".join(_why_not(r, accepted) for r in others)
    if not accepted:
        reason += "; no format passed the acceptance gate"
    return FormatChoice(chosen.weight_format, reason, measured)


def _sticky(choice: FormatChoice, published: str, margin: float) -> FormatChoice:
    """Keep the published format unless the fresh choice beats it by more than `margin`, or it no longer passes
    the gates the choice was made by (or was not measured at all)."""
    if choice.chosen is None or choice.chosen == published:
        return choice
    held = next((r for r in choice.results if r.weight_format == published), None)
    if held is None:
        return replace(choice, reason=f"{choice.reason}; the published {published} was not measured: replaced")
    winner = next(r for r in choice.results if r.weight_format == choice.chosen)
    if not held.lossless or (winner.acceptance_passed and not held.acceptance_passed):
        gate = "lossless" if not held.lossless else "acceptance"
        return replace(choice, reason=f"{choice.reason}; the published {published} failed the {gate} gate: replaced")
    gain = winner.speedup / held.speedup - 1 if held.speedup > 0 else float("inf")
    measured_spread = winner.interval is not None and held.interval is not None
    beyond_noise = not winner.ties(held) if measured_spread else True
    if held.speedup <= 0 or (beyond_noise and winner.speedup > held.speedup * (1 + margin)):
        noise = ", its interval wholly above" if measured_spread else ""
        reason = (
            f"{choice.reason}; {gain:.0%} faster than the published {published} {held.figure()}, more than the "
            f"{margin:.0%} margin{noise}: replaced"
        )
        return replace(choice, reason=reason)
    why = (
        f"within the {margin:.0%} margin a switch needs"
        if beyond_noise
        else "and the intervals overlap: the noise cannot tell them apart"
    )
    reason = (
        f"{published}: kept as published, speed-up {held.figure()} at num_assistant_tokens="
        f"{held.num_assistant_tokens} (accept length {held.accept_length:.2f}); {winner.weight_format} "
        f"{winner.figure()} is {gain:+.0%}, {why}"
    )
    return replace(choice, chosen=published, reason=reason)


def _why_not(result: FormatResult, accepted: list[FormatResult]) -> str:
    if not result.lossless:
        return f"{result.weight_format} (failed the lossless gate)"
    if accepted and not result.acceptance_passed:
        return f"{result.weight_format} (failed the acceptance gate, {result.figure()})"
    return f"{result.weight_format} {result.figure()}"
