"""The speed sweep's timing (docs/design.md §11: a figure has a spread): interleaved pairs until the interval is tight.

A shared CPU drifts by more than a draft format's difference (three builds of one tiny pair half an hour apart
measured x2.34, x9.86 and x13.05), so no figure comes from one timing: for each `num_assistant_tokens` plain and
speculative generations alternate after a discarded warm-up, and pairs are added until the 95 % interval of the
speed-up is within `validation.timing_target_share` of its median or the setting's share of
`validation.timing_budget_s` is spent (`bot.core.speedup.TimingRule`). Runs inside the validation child.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Any, Protocol

from bot.core.errors import Failure
from bot.core.recipe import ValidationSettings
from bot.core.record_checks import Machine, SpeedRun, Timing
from bot.core.speedup import Interval, TimingRule, speedup_interval


class Generates(Protocol):
    """What the sweep needs of a GenAI pipeline (`bot.builder.validate._Pipeline`)."""

    def tokens(self, prompt: str, max_new_tokens: int, k: int | None, image: Any = None) -> tuple: ...


def aligned_new_tokens(max_new_tokens: int, k: int) -> int:
    """1 + n·(k+1): the prefill token plus whole verification steps, so no truncated step biases the accept length."""
    return 1 + max(1, round((max_new_tokens - 1) / (k + 1))) * (k + 1)


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _target_steps(metrics) -> int:
    if metrics is None:
        raise Failure("GenAI returned no speculative-decoding metrics: the draft did not run")
    return len(metrics.main_model_metrics.raw_metrics.m_durations)


TIMING_METHOD = (
    "after a discarded warm-up pair, plain and speculative greedy generations of each prompt interleaved (plain, "
    "speculative, plain, ...); one pair is a plain and a speculative generation of every prompt, its speed-up the "
    "ratio of their times; the figure is the median over the pairs with a 95 % Student-t interval on the logarithms"
)


@dataclass(frozen=True)
class SweepPoint:
    """One k of the sweep: its record row, its interval, and where its default-properties output left plain's."""

    run: SpeedRun
    interval: Interval
    divergence: tuple[int, int] | None  # (prompt index, first differing token) under default properties


@dataclass(frozen=True)
class Sweep:
    measured: dict[int, SweepPoint]
    timing: Timing


def timed_sweep(plain: Generates, speculative: Generates, settings: ValidationSettings) -> Sweep:
    """Every k of the sweep with the default properties, the recipe's timing budget shared by the settings left."""
    started = time.monotonic()
    ks = settings.num_assistant_tokens
    min_pairs = max(2, settings.repeats)
    measured = {}
    for index, k in enumerate(ks):
        left = settings.timing_budget_s - (time.monotonic() - started)
        rule = TimingRule(
            min_pairs=min_pairs,
            max_pairs=max(min_pairs, settings.timing_max_pairs),
            share=settings.timing_target_share,
            budget_s=max(0.0, left / (len(ks) - index)),
        )
        measured[k] = _speed_run(plain, speculative, settings, k, rule)
    timing = Timing(
        method=TIMING_METHOD,
        min_pairs=min_pairs,
        max_pairs=max(min_pairs, settings.timing_max_pairs),
        target_share=settings.timing_target_share,
        budget_s=settings.timing_budget_s,
        seconds=round(time.monotonic() - started, 2),
    )
    return Sweep(measured, timing)


def _speed_run(
    plain: Generates, speculative: Generates, settings: ValidationSettings, k: int, rule: TimingRule
) -> SweepPoint:
    """One k: interleaved pairs over every prompt until `rule` says the interval is tight or its time is spent."""
    new_tokens = aligned_new_tokens(settings.max_new_tokens, k)
    prompts = settings.prompts
    # Warm-up: first-inference compile time is not decoding speed.
    plain.tokens(prompts[0], new_tokens, None)
    speculative.tokens(prompts[0], new_tokens, k)
    ratios: list[float] = []
    plain_rates: list[float] = []
    committed = steps = 0
    divergence = None
    interval = None
    started = time.monotonic()
    while not rule.done(interval, time.monotonic() - started):
        plain_s = spec_s = 0.0
        generated = 0
        for index, prompt in enumerate(prompts):
            plain_tokens, seconds, _ = plain.tokens(prompt, new_tokens, None)
            plain_s += seconds
            tokens, seconds, metrics = speculative.tokens(prompt, new_tokens, k)
            spec_s += seconds
            generated += len(tokens)
            if not ratios:  # greedy: every pair generates the same tokens, so the first one counts them
                # The prefill step commits one token without verifying any draft; leave it out of the mean.
                committed += len(tokens) - 1
                steps += _target_steps(metrics) - 1
                if divergence is None and tokens != plain_tokens:
                    divergence = (index, first_difference(plain_tokens, tokens))
        ratios.append(plain_s / spec_s)
        plain_rates.append(generated / plain_s)
        interval = speedup_interval(ratios)
    assert interval is not None  # the rule measures at least two pairs
    run = SpeedRun(
        num_assistant_tokens=k,
        max_new_tokens=new_tokens,
        accept_length=round(committed / max(steps, 1), 3),
        # The plain rate is the pairs' median; the speculative one is what the median speed-up makes of it, so the
        # row's three figures agree (medians of rates and of their ratios need not).
        tokens_per_s=round(statistics.median(plain_rates) * interval.median, 2),
        baseline_tokens_per_s=round(statistics.median(plain_rates), 2),
        speedup=round(interval.median, 3),
        speedup_low=round(interval.low, 3),
        speedup_high=round(interval.high, 3),
        pairs=interval.pairs,
    )
    return SweepPoint(run, interval, divergence)


def machine_facts(device: str) -> Machine:
    """The validation machine: CPU model, cores, the threads OpenVINO runs inference on, memory and OS."""
    # openvino: a second to import; only the processes that read an IR need it
    import openvino as ov

    core = ov.Core()
    threads = None
    with contextlib.suppress(RuntimeError, TypeError, ValueError):
        threads = int(core.get_property(device, "INFERENCE_NUM_THREADS")) or None
    if threads is None:
        with contextlib.suppress(OSError, AttributeError):
            threads = len(os.sched_getaffinity(0))  # OpenVINO's CPU plugin defaults to the cores it may run on
    memory = None
    with contextlib.suppress(ValueError, OSError, AttributeError):
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    release = {}
    with contextlib.suppress(OSError, AttributeError):
        release = platform.freedesktop_os_release()
    system = release.get("PRETTY_NAME") or platform.system()
    return Machine(
        cpu=str(core.get_property(device, "FULL_DEVICE_NAME")),
        cores=os.cpu_count(),
        threads=threads,
        memory_bytes=memory,
        os=f"{system} (kernel {platform.release()})" if platform.system() == "Linux" else platform.platform(),
    )
