"""The draft's weight format (int4, int8), chosen by measurement (docs/design.md §9).

`bot/core/draft_formats.py` is the IR layout.

A draft's quality shows up as acceptance, and int4 is not automatically best for a small draft: int8 may accept
more tokens and be faster end to end. The build exports the draft in each of the recipe's
`export.draft_weight_formats`, runs the lossless gate and the acceptance sweep for each against the same target,
and measures each one's speed-up at its own recommended `num_assistant_tokens`.

One format is held: the published one (its repo is named after it, `bot.core.naming`), or for a new draft the
smaller file (int4). Another replaces it only when faster beyond the noise and by more than the recipe's
`publish.format_switch_margin`: its 95 % interval's low end (`bot.builder.timing`) above the held one's high end
raised by the margin (docs/design.md §11). One interval test used to decide a new draft's format, so near a tie
two honest runs of one pair published int8 and int4 (issue 41.6); now both keep the held format, and only a gap
wider than the noise and the margin moves either, on the first publication as on later ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bot.core.record_checks import Validation
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

    def gain_over(self, other: FormatResult) -> float:
        """How much faster than `other` by the medians (0.1: 10 %)."""
        return self.speedup / other.speedup - 1 if other.speedup > 0 else float("inf")

    def beats(self, held: FormatResult, margin: float) -> bool:
        """Replaces the `held` format: faster beyond the noise and by more than `margin` (`Interval.clears`); without
        intervals, the median faster by more than the margin and the tie tolerance."""
        if held.speedup <= 0:
            return self.speedup > 0
        mine, theirs = self.interval, held.interval
        if mine is not None and theirs is not None:
            return mine.clears(theirs, margin)
        return self.speedup > held.speedup * (1 + max(margin, TIE_TOLERANCE))

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
    held: str | None = None  # the format that stays unless beaten: `published`, or the smaller file (None: none)

    def as_provenance(self) -> dict:
        return {
            "chosen": self.chosen,
            "reason": self.reason,
            "formats": [asdict(r) for r in self.results],
            "failed": [asdict(f) for f in self.failed],
            "published_before": self.published,
            "switch_margin": self.margin,
            "held": self.held,
        }


def choose_draft_format(
    results: list[FormatResult],
    failed: list[FailedFormat] | None = None,
    *,
    published: str | None = None,
    margin: float = DEFAULT_SWITCH_MARGIN,
) -> FormatChoice:
    """The format to publish: the held one (the published format, or for a new draft the smaller file) unless another
    is faster beyond the noise and by more than `margin` (`FormatResult.beats`).

    Formats that passed the acceptance gate come before those that did not, and only lossless ones are eligible; a
    published format that fails a gate, or was not measured, is held no more (the smaller eligible file is).
    `failed` formats are listed, never chosen. Near a tie two honest runs of one pair both keep the held format;
    only a gap wider than their intervals and the margin moves either.

    Args:
        results: every measured format's figures.
        failed: the formats that could not be measured.
        published: the weight format the draft's published repo holds (its record's), or None for a new draft.
        margin: how much faster (0.1: 10 %) another format must be than the held one, its interval's low end above
            the held one's high end raised by this share.

    Returns:
        The choice, its reason and every figure (`as_provenance` is the record's `draft_formats`).
    """
    measured = tuple(results)
    eligible = [r for r in measured if r.lossless]
    if not eligible:
        names = ", ".join(r.weight_format for r in measured) or "none measured"
        choice = FormatChoice(None, f"no draft format passed the lossless gate ({names})", measured)
    else:
        accepted = [r for r in eligible if r.acceptance_passed]
        held, note = _held(measured, accepted or eligible, published)
        choice = _decide(held, accepted or eligible, measured, margin, as_published=held.weight_format == published)
        if not accepted:
            note += "; no format passed the acceptance gate"
        choice = replace(choice, reason=choice.reason + note)
    choice = replace(choice, published=published, margin=margin)
    if failed:
        names = ", ".join(f"{f.weight_format} (failed: {f.reason})" for f in failed)
        choice = replace(choice, reason=f"{choice.reason}; not measured: {names}", failed=tuple(failed))
    return choice


def _held(
    measured: tuple[FormatResult, ...], pool: list[FormatResult], published: str | None
) -> tuple[FormatResult, str]:
    """The format that stays unless beaten, and why the published one does not: the published format while it is
    measured and passes the gates the pool was drawn by, else the smallest file of the pool (int4 before int8 when
    the files weigh the same)."""
    smallest = min(pool, key=lambda r: (r.ir_bytes, r.weight_format))
    if published is None:
        return smallest, ""
    held = next((r for r in measured if r.weight_format == published), None)
    if held is None:
        return smallest, f"; the published {published} was not measured: replaced"
    if held not in pool:
        gate = "lossless" if not held.lossless else "acceptance"
        return smallest, f"; the published {published} failed the {gate} gate: replaced"
    return held, ""


def _decide(
    held: FormatResult,
    pool: list[FormatResult],
    measured: tuple[FormatResult, ...],
    margin: float,
    *,
    as_published: bool,
) -> FormatChoice:
    """The held format, or the fastest of the pool that beats it, with the reason the card gives (`Why:`)."""
    role = "published" if as_published else "smaller"
    beating = [r for r in pool if r is not held and r.beats(held, margin)]
    if beating:
        winner = max(beating, key=lambda r: r.speedup)
        gain = winner.gain_over(held)
        noise = ""
        if winner.interval is not None and held.interval is not None:
            noise = (
                f" beyond the noise (its low end {winner.interval.low:.2f} > {held.interval.high * (1 + margin):.2f})"
            )
        reason = (
            f"{_headline(winner)}; {gain:.0%} faster than the {role} {held.weight_format} {held.figure()}, more than "
            f"the {margin:.0%} margin{noise}{': replaced' if as_published else ''}"
        )
        rest = [r for r in measured if r is not winner and r is not held]
    else:
        winner = held
        rivals = [r for r in pool if r is not held]
        reason = _headline(held)
        if rivals or as_published:
            stays = "kept as published" if as_published else "the smaller file stays"
            reason = reason.replace(": ", f": {stays}, ", 1)
        reason += "".join(f"; {_kept_over(r, held, margin, as_published)}" for r in rivals)
        rest = [r for r in measured if r not in pool]
    if rest:
        reason += "; also measured: " + ", ".join(_why_not(r, pool) for r in rest)
    return FormatChoice(winner.weight_format, reason, measured, held=held.weight_format)


def _headline(result: FormatResult) -> str:
    return (
        f"{result.weight_format}: speed-up {result.figure()} at num_assistant_tokens={result.num_assistant_tokens} "
        f"(accept length {result.accept_length:.2f})"
    )


def _kept_over(rival: FormatResult, held: FormatResult, margin: float, as_published: bool) -> str:
    """Why `rival` did not replace the held format."""
    text = f"{rival.weight_format} {rival.figure()} is {rival.gain_over(held):+.0%}"
    mine, theirs = rival.interval, held.interval
    if rival.speedup <= held.speedup:
        return text
    tie = "" if as_published else " and the smaller file wins the tie"
    if mine is not None and theirs is not None and mine.overlaps(theirs):
        return f"{text}, the intervals overlap: the noise cannot tell them apart{tie}"
    if (mine is None or theirs is None) and rival.ties(held):
        return f"{text}, within {TIE_TOLERANCE:.0%}: the noise cannot tell them apart{tie}"
    return f"{text}, within the {margin:.0%} margin a switch needs" + (" beyond the noise" if mine and theirs else "")


def _why_not(result: FormatResult, accepted: list[FormatResult]) -> str:
    if not result.lossless:
        return f"{result.weight_format} (failed the lossless gate)"
    if accepted and not result.acceptance_passed:
        return f"{result.weight_format} (failed the acceptance gate, {result.figure()})"
    return f"{result.weight_format} {result.figure()}"
