"""The speed-up wording and the optional speed gate (`validation.min_speedup`)."""

from __future__ import annotations

from bot.core.recipe import load_recipe
from bot.core.record import Gates, SpeedRun, Validation
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
    """What the validation child reports (`bot.build.validate._validation`): the figures and each gate."""
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
