"""Sizing per target family at real width: the lines `bench/scale.py` fits on one family's shape cut to a few depths.

A family's large targets do not fit this machine whole, so `bench/scale.py --shapes NAME@1 NAME@2 NAME@3` builds
the shape (`tinymodels.shapes`: the real hidden sizes, heads and experts) cut to a few decoder layers. At one width
a stage's figure is a fixed part (embeddings, vision tower, start-up) plus a per-layer part; since the checkpoint's
bytes are themselves fixed + depth x bytes per layer, that is a line in bytes, the form the recipe's
`runners.sizing.families` holds (`bot.core.runners.SizingModel`), which the plan evaluates at the real depth's bytes.

The extrapolation is checked where it can be: fit on the two shallowest depths, predict the deepest, within
`HELD_OUT_TOLERANCE` (the recipe's `runners.headroom` covers that error). A MoE too wide for three depths here is
measured at three depths with fewer experts a layer (``NAME@NxE``: every width and the routing kept) and at its
whole width where that fits; then the depth check runs on the cut series, and a second check predicts the
whole-width depths from the cut series' lines (the bytes the experts add, held out). The recipe's lines are fitted
on every depth measured. The draft (a Qwen3 DFlash trunk whatever its target) keeps the Qwen3 lines.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

HELD_OUT_TOLERANCE = 0.15
# Each line a family gets: (recipe line name, the stage it reads, what it is fitted on, which bytes it reads).
FAMILY_LINES = (
    ("target_export_memory", "target export", "anon", "target"),
    ("target_export_file", "target export", "file", "target"),
    ("target_export_seconds", "target export", "seconds", "target"),
    ("validate_memory", "validate", "anon", "pair"),
    ("validate_file", "validate", "file", "pair"),
    ("validate_seconds", "validate", "seconds", "pair"),
    ("inspect_memory", "inspect", "anon", "target"),
    ("inspect_file", "inspect", "file", "target"),
    ("inspect_seconds", "inspect", "seconds", "target"),
    ("quality_memory", "quality", "anon", "target"),
    ("quality_file", "quality", "file", "target"),
    ("quality_seconds", "quality", "seconds", "target"),
    ("ir_bytes", "target export", "output", "target"),
    ("export_scratch_disk", "target export", "scratch", "target"),
)


def depth_of(shape: str) -> int | None:
    """N of a ``NAME@N`` or ``NAME@NxE`` shape, None for a whole one."""
    layers = shape.partition("@")[2].partition("x")[0]
    return int(layers) if layers.isdigit() else None


def experts_of(shape: str) -> int | None:
    """E of a ``NAME@NxE`` shape (its experts a layer), None where every expert is kept."""
    experts = shape.partition("@")[2].partition("x")[2]
    return int(experts) if experts.isdigit() else None


def family_of(shape: str) -> str:
    from tinymodels.shapes import shape_named  # imports torch

    return shape_named(shape).family


def by_family(results: dict[str, dict]) -> dict[str, list[dict]]:
    """The cut shapes' results per family, shallowest first (an expert cut's before the whole width's)."""
    families: dict[str, list[dict]] = {}
    for key, result in results.items():
        if depth_of(key) is not None:
            families.setdefault(family_of(key), []).append(result)
    return {
        family: sorted(rs, key=lambda r: (experts_of(r["shape"]) is None, depth_of(r["shape"]) or 0))
        for family, rs in families.items()
    }


def depth_series(results: list[dict]) -> list[dict]:
    """The depths measured at one expert count, the most of them (a dense family's are all its depths)."""
    counts: dict[int | None, list[dict]] = {}
    for r in results:
        counts.setdefault(experts_of(r["shape"]), []).append(r)
    return max(counts.values(), key=len)


def figure(result: dict, stage: str, kind: str) -> float:
    """One measured figure of a stage, as its line is fitted on (the quality step beyond an f32 copy, known apart)."""
    from bot.plan.sizing import f32_copy_bytes

    s = result["stages"][stage]
    if kind == "anon":
        anon = s.get("peak_anon_bytes") or s["peak_rss_bytes"]
        if stage != "quality":
            return anon
        # The step's own choice, as it recorded it (near the threshold it may differ from the plan's byte count).
        copied = (
            s.get("reference_dtype") == "float32" if "reference_dtype" in s else f32_copy_bytes(result["target_bytes"])
        )
        return anon - (2 * result["target_bytes"] if copied else 0)
    if kind == "file":
        return s["peak_file_bytes"]
    if kind == "output":
        return s["output_bytes"]
    if kind == "scratch":
        return max(0, s["peak_disk_bytes"] - s["disk_before_bytes"] - s["output_bytes"])
    return s["seconds"]


def reads(result: dict, which: str) -> int:
    """The bytes a line reads: the draft's, the target's, or both (validation holds the pair)."""
    if which == "draft":
        return result["draft_bytes"]
    return result["target_bytes"] + (result["draft_bytes"] if which == "pair" else 0)


def least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """``a × x + b`` through the points (a >= 0: no stage shrinks as its model grows)."""
    if len(points) < 2:
        raise ValueError("a family line needs two depths or more")
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    a = max(0.0, sum((x - mx) * (y - my) for x, y in points) / sxx)
    return a, my - a * mx


def fit_family(results: list[dict]) -> dict[str, tuple[float, int]]:
    """Every family line on these depths, rounded as the recipe states them (a to 4 digits, b to whole units)."""
    fits = {}
    for name, stage, kind, which in FAMILY_LINES:
        if not all(stage in r["stages"] for r in results):
            continue
        a, b = least_squares([(reads(r, which), figure(r, stage, kind)) for r in results])
        fits[name] = (float(f"{a:.4g}"), round(b))
    return fits


def per_layer(results: list[dict]) -> dict[str, tuple[float, float]]:
    """Each line as the fixed part and the per-layer part (figure against depth) of the depth series: what a layer
    adds at this width."""
    series = depth_series(results)
    out = {}
    for name, stage, kind, _ in FAMILY_LINES:
        if all(stage in r["stages"] for r in series):
            slope, fixed = least_squares([(depth_of(r["shape"]) or 0, figure(r, stage, kind)) for r in series])
            out[name] = (fixed, slope)
    return out


def predictions(fitted: list[dict], held: dict) -> list[dict]:
    """Each line fitted on `fitted`, evaluated at `held`'s bytes, against what `held` measured."""
    rows = []
    for name, stage, kind, which in FAMILY_LINES:
        if not all(stage in r["stages"] for r in (*fitted, held)):
            continue
        a, b = least_squares([(reads(r, which), figure(r, stage, kind)) for r in fitted])
        predicted, measured = a * reads(held, which) + b, figure(held, stage, kind)
        error = abs(predicted - measured) / measured if measured else 0.0
        rows.append({"line": name, "predicted": predicted, "measured": measured, "error": error, "kind": kind})
    return rows


def held_out(results: list[dict]) -> list[dict]:
    """Fit each line on the depth series but its deepest, predict the deepest: the extrapolation's error, per line."""
    series = depth_series(results)
    return predictions(series[:-1], series[-1]) if len(series) >= 3 else []


def held_out_width(results: list[dict]) -> list[tuple[dict, list[dict]]]:
    """Each depth measured at another expert count than the depth series (a MoE's whole width), predicted by the
    series' lines: what the experts the series left out add, held out."""
    series = depth_series(results)
    return [(r, predictions(series, r)) for r in results if r not in series]


def worst_deciding(checks: list[dict]) -> dict:
    """The largest error among the lines that decide a class: anonymous memory and disk, a GB or more. The small
    ones (inspect: tens of MB), the file-backed ones (pages the kernel drops and re-reads: the plan reports them,
    never refuses for them) and the seconds (a shared machine's load moves them) are reported beside them."""
    deciding = [c for c in checks if c["kind"] not in ("seconds", "file") and c["measured"] >= 1e9]
    return max(deciding, key=lambda c: c["error"])


def check_table(checks: list[dict]) -> list[str]:
    """A held-out check as markdown rows, and its verdict."""
    lines = ["", "| line | predicted | measured | error |", "|---|---|---|---|"]
    for c in checks:
        fmt = (lambda n: f"{n:.1f} s") if c["kind"] == "seconds" else (lambda n: f"{n / 1e9:.3f} GB")
        lines.append(f"| {c['line']} | {fmt(c['predicted'])} | {fmt(c['measured'])} | {c['error']:.1%} |")
    worst = worst_deciding(checks)
    verdict = "holds" if worst["error"] <= HELD_OUT_TOLERANCE else "does NOT hold"
    said = f"Worst error of the lines that decide a class: {worst['error']:.1%} ({worst['line']}): the extrapolation"
    file_backed = max((c for c in checks if c["kind"] == "file"), key=lambda c: c["error"], default=None)
    if file_backed is None:  # results measured before file-backed peaks were sampled apart
        return [*lines, "", f"{said} {verdict}."]
    also = f"(file-backed, reported only: worst {file_backed['error']:.1%}, {file_backed['line']})"
    return [*lines, "", f"{said} {verdict} {also}."]


def markdown(results: dict[str, dict], unmeasured: dict[str, str]) -> list[str]:
    """The family section of docs/scale.md: depths measured, fixed and per-layer parts, the held-out check, the
    recipe lines, and the families not measured (with why)."""
    families = by_family(results)
    lines = [
        "",
        "## Per target family at real width (`--shapes NAME@1 NAME@2 NAME@3`)",
        "",
        "Each family's shape (`tinymodels/shapes.py`: real hidden sizes, heads, experts, vocabulary; MoE experts",
        "stored one tensor each, as on the Hub) cut to a few decoder layers, stage by stage as above. At one width",
        "a figure is a fixed part plus a per-layer part, and so a line in the checkpoint's bytes, which the plan",
        "evaluates at the real depth's bytes (`runners.sizing.families` in the recipe). The draft keeps the Qwen3",
        "lines. Memory is anonymous GB, seconds are this machine's (2 cores, shared: upper bounds).",
        "`bench/moe_pair.py --record` builds a MoE pair end to end (`dflash-bot build`) against the plan's estimate",
        "from these lines: its row is in the end-to-end and estimate tables above.",
    ]
    for family, rs in families.items():
        lines += ["", f"### {family} ({', '.join(r['shape'] for r in rs)})", ""]
        lines += [f"{r['shape']}: {r['restored_from_log']}.  " for r in rs if r.get("restored_from_log")]
        lines += [f"{r['shape']}: {r['note']}.  " for r in rs if r.get("note")]  # how it was measured, if unusual
        lines += [f"{r['shape']}: 5-minute load average {r.get('load_average')} when measured.  " for r in rs]
        series = depth_series(rs)
        cut = experts_of(series[0]["shape"])
        lines += ["", f"Per layer at {cut} experts a layer:", ""] if cut else [""]
        lines += ["| line | fixed | per layer |", "|---|---|---|"]
        for name, (fixed, slope) in per_layer(rs).items():
            unit = (lambda n: f"{n:.1f} s") if name.endswith("seconds") else (lambda n: f"{n / 1e9:.3f} GB")
            lines.append(f"| {name} | {unit(fixed)} | {unit(slope)} |")
        checks = held_out(rs)
        if checks:
            lines += [
                "",
                f"Held-out depth: fitted on {', '.join(r['shape'] for r in series[:-1])}, predicting "
                f"{series[-1]['shape']} (goal: within {HELD_OUT_TOLERANCE:.0%} for the lines that decide a class: "
                "anonymous memory and disk, a GB or more; file-backed memory, seconds and the small lines are "
                "reported, not held to it).",
                *check_table(checks),
            ]
        for held, width_checks in held_out_width(rs):
            lines += [
                "",
                f"Held-out width: fitted on {', '.join(r['shape'] for r in series)}, predicting {held['shape']} "
                "(every expert: the bytes the cut left out).",
                *check_table(width_checks),
            ]
        lines += [
            "",
            "Seconds are the weak part: a shared machine's load moves them (the held-out seconds above show how far, "
            "where the load changed between depths), so a family's time estimate is indicative; memory and disk "
            "are what decide a class.",
        ]
        fitted_on = "" if len(series) == len(rs) else " (fitted on every depth above)"
        lines += ["", f"As `runners.sizing.families` in a recipe{fitted_on}:", ""]
        lines += ["```yaml", "    families:", f"      {family}:"]
        lines += [f"        {name}: {{a: {a}, b: {b}}}" for name, (a, b) in fit_family(rs).items()]
        lines += ["```"]
    if unmeasured:
        header = "Families not measured at real width (the plan sizes them by another family's lines and says whose):"
        lines += ["", header, ""]
        lines += [f"- {family}: {why}" for family, why in unmeasured.items()]
    return lines
