"""What the speed sweep means for a user: a speed-up, or plainly none, and the recipe's optional speed gate.

A draft that accepts tokens can still make decoding slower when its own step costs too much next to the target's
(tiny targets on CPU, say). A card must not recommend a `num_assistant_tokens` as if it helped then: it says that
there was no speed-up on the machine that validated the pair. `validation.min_speedup` (default: none) turns a
too-small speed-up into a failed gate.
"""

from __future__ import annotations

from collections.abc import Sequence


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
