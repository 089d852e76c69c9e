"""Charts for the draft cards and the status page, as PNG bytes that depend on the figures only.

Same figures, same bytes: an unchanged build then uploads nothing (the Hub client skips files whose content the
Hub already has). So the figure size and dpi are fixed, the style is matplotlib's default whatever the local
`matplotlibrc` says, and the PNG carries no `Software` or date metadata. Rendering goes through the Agg canvas
directly, without pyplot's global figure registry, so it is safe in any process.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.core.record_checks import SpeedRun, Validation

ACCEPTANCE_CHART = "assets/acceptance.png"  # where the draft repo carries its chart; the card embeds this path
DPI = 100
ACCEPTANCE_SIZE = (8.0, 3.2)  # inches
_PNG_METADATA = {"Software": None}  # matplotlib would write its version here; nothing else is written


@dataclass(frozen=True)
class PairFigures:
    """One published pair on the status chart: its label and the figures at the recommended k."""

    label: str
    accept_length: float
    speedup: float


def acceptance_png(runs: Sequence[SpeedRun], baseline_tokens_per_s: float | None = None) -> bytes:
    """The draft card's chart: accept length and tokens/s against `num_assistant_tokens`.

    Args:
        runs: the validation's speed sweep (`record_checks.Validation.runs`), one entry per `num_assistant_tokens`.
        baseline_tokens_per_s: plain greedy decoding with the target alone, drawn as a reference line;
            default: the mean of the runs' own baseline measurements.

    Returns:
        PNG bytes, identical for identical figures.

    Raises:
        ValueError: `runs` is empty.
    """
    if not runs:
        raise ValueError("acceptance_png needs at least one validation run")
    ordered = sorted(runs, key=lambda run: run.num_assistant_tokens)
    ks = [run.num_assistant_tokens for run in ordered]
    if baseline_tokens_per_s is None:
        baseline_tokens_per_s = sum(run.baseline_tokens_per_s for run in ordered) / len(ordered)
    with _style():
        figure, canvas = _figure(ACCEPTANCE_SIZE)
        accept, speed = figure.subplots(1, 2)
        accept.plot(ks, [run.accept_length for run in ordered], marker="o", color="tab:blue", label="measured")
        accept.plot(ks, [k + 1 for k in ks], linestyle=":", color="grey", label="ideal (k + 1)")
        accept.axhline(1.0, linestyle="--", color="tab:red", label="plain greedy (1)")
        accept.set(title="Accept length", xlabel="num_assistant_tokens (k)", ylabel="tokens per target step")
        speed.plot(ks, [run.tokens_per_s for run in ordered], marker="o", color="tab:green", label="speculative")
        speed.axhline(baseline_tokens_per_s, linestyle="--", color="tab:red", label="plain greedy")
        speed.set(title="Generation speed", xlabel="num_assistant_tokens (k)", ylabel="tokens/s")
        for axes in (accept, speed):
            axes.set_xticks(ks)
            axes.set_ylim(bottom=0)
            axes.grid(True, alpha=0.3)
            axes.legend(fontsize="small", loc="lower right")
        return _png(figure, canvas)


def write_acceptance_chart(draft_folder: Path, validation: Validation) -> Path:
    """Write the draft repo's chart (`assets/acceptance.png`) into a draft folder from the build record's
    validation, so a card-only refresh draws exactly the chart the build drew; returns its path."""
    path = Path(draft_folder) / ACCEPTANCE_CHART
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(acceptance_png(validation.runs))
    return path


def speedups_png(pairs: Sequence[PairFigures]) -> bytes:
    """The status page's chart: accept length and speed-up of every published pair, one row each.

    Returns:
        PNG bytes, identical for identical figures (the height grows with the number of pairs).
    """
    rows = sorted(pairs, key=lambda pair: pair.label)
    height = 1.6 + 0.4 * max(len(rows), 1)
    with _style():
        figure, canvas = _figure((10.0, height))
        accept, speed = figure.subplots(1, 2, sharey=True)
        if not rows:
            figure.text(0.5, 0.5, "no published pairs yet", ha="center", va="center")
            for axes in (accept, speed):
                axes.set_axis_off()
            return _png(figure, canvas)
        positions = list(range(len(rows)))
        labels = [pair.label for pair in rows]
        accept.barh(positions, [pair.accept_length for pair in rows], color="tab:blue")
        accept.set(title="Accept length (recommended k)", xlabel="tokens per target step")
        speed.barh(positions, [pair.speedup for pair in rows], color="tab:green")
        speed.axvline(1.0, linestyle="--", color="tab:red", label="plain greedy")
        speed.set(title="Speed-up over plain greedy", xlabel="×")
        speed.legend(fontsize="small", loc="lower right")
        accept.set_yticks(positions, labels, fontsize="small")
        accept.invert_yaxis()
        for axes in (accept, speed):
            axes.grid(True, axis="x", alpha=0.3)
        return _png(figure, canvas)


def _style():
    import matplotlib.style  # 0.3 s and a font cache: only a publish that draws a chart pays for it

    return matplotlib.style.context("default")


def _figure(size: tuple[float, float]):
    # matplotlib: 0.3 s and a font cache, paid only by a publish that draws a chart
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    return figure, FigureCanvasAgg(figure)


def _png(figure, canvas) -> bytes:
    buffer = io.BytesIO()
    canvas.print_png(buffer, metadata=_PNG_METADATA)
    return buffer.getvalue()
