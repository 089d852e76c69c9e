"""What the speed sweep means for a user: a speed-up, or plainly none, and the recipe's optional speed gate.

A draft that accepts tokens can still make decoding slower when its own step costs too much next to the target's
(tiny targets on CPU, say). A card must not recommend a `num_assistant_tokens` as if it helped then: it says that
there was no speed-up on the machine that validated the pair. `validation.min_speedup` (default: none) turns a
too-small speed-up into a failed gate.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class SweepRow(Protocol):
    """A sweep row as `bot.core.record_checks.SpeedRun` holds it (that module imports this one: no import back)."""

    @property
    def num_assistant_tokens(self) -> int: ...
    @property
    def speedup(self) -> float: ...
    @property
    def speedup_low(self) -> float | None: ...
    @property
    def speedup_high(self) -> float | None: ...
    @property
    def pairs(self) -> int | None: ...


def no_speedup_note(speedups: Sequence[float], *, device: str, cores: int | None) -> str | None:
    """None when some k decodes faster than plain greedy; otherwise the sentence the card and the report show.

    Args:
        speedups: speculative / plain tokens per second, one per `num_assistant_tokens` of the sweep.
        device: the OpenVINO device validated on ("CPU").
        cores: logical cores of the validation machine (None when unknown).
    """
    if not speedups or any(s > 1.0 for s in speedups):
        return None
    machine = f"{device}, {cores} cores" if cores else device
    return f"no speed-up on the validation machine: {machine}"


def speedup_gate(best_speedup: float, min_speedup: float | None) -> str | None:
    """The failed-gate message when the best speed-up is below the recipe's `min_speedup`; None when it passes.

    Args:
        best_speedup: the speed-up at the recommended `num_assistant_tokens`.
        min_speedup: `validation.min_speedup`; None disables the gate.
    """
    if min_speedup is None or best_speedup >= min_speedup:
        return None
    return (
        f"speed-up gate: x{best_speedup:.2f} at the recommended num_assistant_tokens is below the recipe's "
        f"minimum x{min_speedup:.2f}"
    )


# ---- a figure with a spread (docs/design.md §11): the interval, the stopping rule, the choice of k ----

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom; beyond 30 the normal's 1.96 is close enough.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """A speed-up measured over `pairs` interleaved pairs: their median and the 95 % confidence interval.

    The interval is Student's t on the logarithms of the pairs' speed-ups (a ratio's noise is multiplicative), so
    it is never below zero and a halving and a doubling are equally far; with one pair it is the point itself.
    """

    median: float
    low: float
    high: float
    pairs: int

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def contains_median_of(self, other: Interval) -> bool:
        return self.low <= other.median <= self.high

    def above(self, other: Interval) -> bool:
        """Faster beyond the noise: this interval lies wholly above `other`."""
        return self.low > other.high

    def clears(self, other: Interval, margin: float) -> bool:
        """Faster beyond the noise and by more than `margin` (0.1: 10 %): this interval's low end lies above
        `other`'s high end raised by the margin: a spread that stays inside both intervals cannot flip the
        weight-format choice from one run to the next (docs/design.md §11)."""
        return self.low > other.high * (1 + margin)

    def within(self, share: float) -> bool:
        """The interval lies within ±`share` of the median (0.05: ±5 %), from two pairs on."""
        return self.pairs >= 2 and self.low >= self.median * (1 - share) and self.high <= self.median * (1 + share)

    def text(self) -> str:
        return f"x{self.median:.2f} [{self.low:.2f}, {self.high:.2f}], {self.pairs} pairs"


def speedup_interval(ratios: Sequence[float]) -> Interval:
    """The median and 95 % interval of per-pair speed-ups (plain seconds / speculative seconds of one pair).

    Raises:
        ValueError: no ratio, or one that is not positive.
    """
    if not ratios or any(not r > 0 for r in ratios):
        raise ValueError(f"speed-ups must be positive, got {list(ratios)}")
    n = len(ratios)
    median = statistics.median(ratios)
    if n == 1:
        return Interval(median, median, median, 1)
    logs = [math.log(r) for r in ratios]
    centre, spread = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(n)
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    low, high = math.exp(centre - t * spread), math.exp(centre + t * spread)
    # The median of few pairs can sit outside the mean's interval; the interval then reaches it.
    return Interval(median, min(low, median), max(high, median), n)


@dataclass(frozen=True)
class TimingRule:
    """When to stop measuring one setting: at `max_pairs`; otherwise from `min_pairs` on, once the interval is
    within ±`share` of the median or the setting's time budget is spent."""

    min_pairs: int
    max_pairs: int
    share: float
    budget_s: float

    def done(self, interval: Interval | None, elapsed_s: float) -> bool:
        pairs = interval.pairs if interval else 0
        if pairs >= self.max_pairs:
            return True
        if pairs < self.min_pairs:
            return False
        return interval is not None and (interval.within(self.share) or elapsed_s >= self.budget_s)


def recommend_k(intervals: Mapping[int, Interval]) -> tuple[int, str]:
    """The `num_assistant_tokens` to recommend and why: the fastest by median, unless a smaller k is a tie with
    it; then the smallest such k stays (the noise cannot tell them apart, and a smaller k drafts less). A tie is
    each median inside the other's interval: a setting measured too loosely to say anything (a wide interval on a
    loaded machine) overlaps everything, and must not pull the choice to a slow k.

    Raises:
        ValueError: no setting measured.
    """
    if not intervals:
        raise ValueError("no num_assistant_tokens measured")
    fastest = max(intervals, key=lambda k: intervals[k].median)
    best = intervals[fastest]
    tied = sorted(
        k for k, iv in intervals.items() if k < fastest and iv.contains_median_of(best) and best.contains_median_of(iv)
    )
    if not tied:
        return fastest, f"k={fastest}: fastest, {intervals[fastest].text()}"
    kept = tied[0]
    return kept, (
        f"k={kept}: {intervals[kept].text()} is within the noise of the fastest median k={fastest} "
        f"({intervals[fastest].text()}), so the smaller k stays"
    )


def run_interval(run: SweepRow) -> Interval | None:
    """A sweep row's interval (None for a record from before intervals were measured)."""
    if run.speedup_low is None or run.speedup_high is None:
        return None
    return Interval(run.speedup, run.speedup_low, run.speedup_high, run.pairs or 0)


def compare_to_card(here: Sequence[SweepRow], card: SweepRow) -> str:
    """Whether this machine's speed-up interval at the card's recommended k overlaps the card's (`dflash-bot try`).

    Args:
        here: this machine's sweep.
        card: the card's run at its recommended `num_assistant_tokens`.
    """
    k = card.num_assistant_tokens
    mine = next((run for run in here if run.num_assistant_tokens == k), None)
    if mine is None:
        return f"num_assistant_tokens={k} (the card's) was not measured here: no interval to compare"
    ours, theirs = run_interval(mine), run_interval(card)
    if ours is None or theirs is None:
        return (
            f"at num_assistant_tokens={k}: x{mine.speedup:.2f} here, x{card.speedup:.2f} on the card "
            "(a single timing has no interval to compare)"
        )
    if ours.overlaps(theirs):
        verdict = "the intervals overlap: this machine measures what the card says, within the noise"
    elif ours.above(theirs):
        verdict = "no overlap: faster here than on the card, beyond the noise"
    else:
        verdict = "no overlap: slower here than on the card, beyond the noise"
    return f"at num_assistant_tokens={k}: here {ours.text()}; the card {theirs.text()}; {verdict}"
