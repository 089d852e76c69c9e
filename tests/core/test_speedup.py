"""The speed-up wording and the optional speed gate (`validation.min_speedup`)."""

from __future__ import annotations

from bot.core.recipe import load_recipe
from bot.core.record_checks import Gates, SpeedRun, Validation
from bot.core.speedup import no_speedup_note, speedup_gate


def test_no_speedup_is_said_plainly_and_min_speedup_gates():
    assert (
        no_speedup_note([0.55, 0.71, 0.4], device="CPU", cores=2)
        == "no speed-up on the validation machine: CPU, 2 cores"
    )
    assert no_speedup_note([0.9, 1.3], device="CPU", cores=2) is None
    assert speedup_gate(0.9, None) is None
    assert speedup_gate(1.3, 1.2) is None
    assert speedup_gate(0.9, 1.2) == (
        "speed-up gate: x0.90 at the recommended num_assistant_tokens is below the recipe's minimum x1.20"
    )


def test_min_speedup_leaves_the_fingerprint_alone_until_it_is_set():
    recipe = load_recipe()
    assert recipe.validation.min_speedup is None
    gated = recipe.model_copy(update={"validation": recipe.validation.model_copy(update={"min_speedup": 1.1})})
    assert gated.fingerprint() != recipe.fingerprint()
    # The fingerprint of a recipe without min_speedup is what it was before the option existed.
    import hashlib
    import json

    payload = {
        "export": recipe.export.model_dump(exclude={"timeout_s"}),
        "validation": recipe.validation.model_dump(exclude={"timeout_s", "min_speedup"}),
    }
    assert recipe.fingerprint() == hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def report(speedups: list[float], min_speedup: float | None) -> Validation:
    """What the validation child reports (`bot.builder.validate._validation`): the figures and each gate."""
    runs = [
        SpeedRun(
            num_assistant_tokens=k,
            max_new_tokens=33,
            accept_length=2.0,
            tokens_per_s=10 * s,
            baseline_tokens_per_s=10.0,
            speedup=s,
        )
        for k, s in zip((3, 7), speedups, strict=False)
    ]
    best = max(runs, key=lambda run: run.tokens_per_s)
    speedup_passed = speedup_gate(best.speedup, min_speedup) is None
    return Validation(
        lossless=True,
        mismatches=[],
        prompts=["a", "b", "c"],
        runs=runs,
        recommended_num_assistant_tokens=best.num_assistant_tokens,
        accept_length=2.0,
        min_accept_length=1.5,
        acceptance_passed=True,
        device="CPU",
        hardware="test CPU",
        pipeline="LLMPipeline",
        cores=2,
        speedup_note=no_speedup_note(speedups, device="CPU", cores=2),
        min_speedup=min_speedup,
        speedup_passed=speedup_passed,
        gates=Gates(lossless=True, acceptance=True, speedup=speedup_passed if min_speedup is not None else None),
    )


def test_a_slow_pair_passes_without_the_gate_but_says_so_and_fails_with_it():
    ungated = report([0.55, 0.7], None)
    assert ungated.passed and ungated.best_run.speedup == 0.7 and ungated.failed_gates() == []
    assert ungated.speedup_note == "no speed-up on the validation machine: CPU, 2 cores"
    assert ungated.model_dump(mode="json")["gates"]["speedup"] is None
    gated = report([0.55, 0.7], 1.0)
    assert not gated.passed and gated.model_dump(mode="json")["gates"]["speedup"] is False
    assert gated.failed_gates() == [
        "speed-up gate: x0.70 at the recommended num_assistant_tokens is below the recipe's minimum x1.00"
    ]
    fast = report([1.4, 2.2], 1.0)
    assert fast.passed and fast.speedup_note is None
    # The child writes the record's own JSON and the builder reads it back with the same model.
    assert Validation.model_validate_json(fast.model_dump_json()) == fast
    # A record written before these fields existed still loads.
    old = {
        k: v
        for k, v in fast.model_dump(mode="json").items()
        if k not in ("cores", "speedup_note", "min_speedup", "speedup_passed")
    }
    assert Validation.model_validate(old).speedup_passed


# ---- the interval, the stopping rule and the choice of k, on plain numbers ----


def test_the_interval_is_the_median_with_a_t_interval_on_the_log_speedups():
    from bot.core.speedup import speedup_interval

    steady = speedup_interval([2.0, 2.0, 2.0, 2.0])
    assert (steady.median, steady.low, steady.high, steady.pairs) == (2.0, 2.0, 2.0, 4)
    noisy = speedup_interval([1.8, 2.2, 2.0, 1.9, 2.1])
    assert noisy.median == 2.0 and noisy.low < 2.0 < noisy.high and noisy.pairs == 5
    # Five pairs: t(4) = 2.776 on the logs' standard error.
    import math
    import statistics

    logs = [math.log(r) for r in (1.8, 2.2, 2.0, 1.9, 2.1)]
    half = 2.776 * statistics.stdev(logs) / math.sqrt(5)
    assert math.isclose(noisy.high, math.exp(statistics.fmean(logs) + half), rel_tol=1e-9)
    # More pairs with the same spread: a narrower interval.
    wider = speedup_interval([1.8, 2.2, 2.0])
    assert wider.high - wider.low > noisy.high - noisy.low
    assert speedup_interval([1.5]).low == speedup_interval([1.5]).high == 1.5


def test_the_interval_refuses_what_is_not_a_speedup():
    import pytest

    from bot.core.speedup import speedup_interval

    for bad in ([], [1.2, 0.0], [-1.0]):
        with pytest.raises(ValueError, match="positive"):
            speedup_interval(bad)


def test_timing_stops_when_the_interval_is_tight_or_the_budget_is_spent_never_before_min_pairs():
    from bot.core.speedup import Interval, TimingRule

    rule = TimingRule(min_pairs=3, max_pairs=10, share=0.05, budget_s=60.0)
    tight2 = Interval(2.0, 1.98, 2.02, 2)
    tight3 = Interval(2.0, 1.95, 2.04, 3)
    loose3 = Interval(2.0, 1.5, 2.6, 3)
    assert not rule.done(None, 0.0)
    assert not rule.done(tight2, 1000.0)  # fewer than min_pairs: neither a tight interval nor the clock stops it
    assert rule.done(tight3, 1.0)  # within ±5 % of the median
    assert not rule.done(loose3, 59.0)
    assert rule.done(loose3, 60.0)  # the budget is spent
    assert rule.done(Interval(2.0, 1.0, 4.0, 10), 0.0)  # max_pairs
    assert not Interval(2.0, 1.89, 2.05, 5).within(0.05) and Interval(2.0, 1.9, 2.1, 5).within(0.05)


def test_k_moves_to_the_fastest_only_beyond_the_noise():
    from bot.core.speedup import Interval, recommend_k

    # k=7 has the best median, but its interval overlaps k=3's: the smaller k stays, and the reason says why.
    k, why = recommend_k({3: Interval(1.9, 1.7, 2.1, 6), 7: Interval(2.0, 1.8, 2.2, 6), 15: Interval(1.2, 1.1, 1.3, 6)})
    assert k == 3 and "within the noise of the fastest median k=7" in why and "smaller k stays" in why
    # Beyond the noise the fastest wins.
    k, why = recommend_k({3: Interval(1.5, 1.4, 1.6, 6), 7: Interval(2.0, 1.9, 2.1, 6)})
    assert (k, why) == (7, "k=7: fastest, x2.00 [1.90, 2.10], 6 pairs")
    # A larger k that overlaps the fastest does not pull the choice up.
    k, _ = recommend_k({3: Interval(2.4, 2.3, 2.5, 6), 7: Interval(2.0, 1.9, 2.35, 6)})
    assert k == 3
    # A setting timed too loosely to say anything (bench/repeatability.py under load: x0.96 [0.69, 2.32]) overlaps
    # the fastest but is no tie with it: the fastest is recommended.
    k, _ = recommend_k({3: Interval(0.965, 0.692, 2.323, 12), 15: Interval(1.86, 1.73, 1.96, 12)})
    assert k == 15


def test_try_says_whether_its_interval_overlaps_the_cards():
    from bot.core.speedup import compare_to_card

    def run(k: int, median: float, low: float | None, high: float | None) -> SpeedRun:
        return SpeedRun(
            num_assistant_tokens=k,
            max_new_tokens=33,
            accept_length=2.0,
            tokens_per_s=10 * median,
            baseline_tokens_per_s=10.0,
            speedup=median,
            speedup_low=low,
            speedup_high=high,
            pairs=6 if low is not None else None,
        )

    card = run(3, 9.86, 9.0, 10.5)
    # The case: try measured x5.96 where the card says x9.86.
    slower = compare_to_card([run(3, 5.96, 5.5, 6.4), run(7, 5.0, 4.0, 6.0)], card)
    assert slower.startswith("at num_assistant_tokens=3: here x5.96 [5.50, 6.40], 6 pairs; the card x9.86")
    assert slower.endswith("no overlap: slower here than on the card, beyond the noise")
    assert compare_to_card([run(3, 9.5, 8.8, 10.1)], card).endswith(
        "the intervals overlap: this machine measures what the card says, within the noise"
    )
    assert "faster here" in compare_to_card([run(3, 12.0, 11.0, 13.0)], card)
    assert "a single timing has no interval" in compare_to_card([run(3, 9.0, None, None)], card)
    assert "was not measured here" in compare_to_card([run(7, 9.0, 8.0, 10.0)], card)
