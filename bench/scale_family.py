"""Sizing per target family at real width: the lines `bench/scale.py` fits on one family's shape cut to a few depths.

A family's large targets do not fit this machine whole, so `bench/scale.py --shapes NAME@1 NAME@2 NAME@3` builds
the shape (`tinymodels.shapes`: the real hidden sizes, heads and experts) cut to a few decoder layers. At one width
a stage's figure is a fixed part (embeddings, vision tower, start-up) plus a per-layer part; since the checkpoint's
bytes are themselves fixed + depth x bytes per layer, that is a line in bytes, the form the recipe's
`runners.sizing.families` holds (`bot.core.runners.SizingModel`), which the plan evaluates at the real depth's bytes.

The extrapolation is checked where it can be: fit on the two shallowest depths, predict the deepest, within
`HELD_OUT_TOLERANCE` (the recipe's `runners.headroom` covers that error). The draft (a Qwen3 DFlash trunk whatever
its target) keeps the Qwen3 lines.
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
    """N of a ``NAME@N`` shape, None for a whole one."""
    _, _, depth = shape.partition("@")
    return int(depth) if depth.isdigit() else None


def family_of(shape: str) -> str:
    from tinymodels.shapes import shape_named  # imports torch

    return shape_named(shape).family


def by_family(results: dict[str, dict]) -> dict[str, list[dict]]:
    """The cut shapes' results per family, shallowest first."""
    families: dict[str, list[dict]] = {}
    for key, result in results.items():
        if depth_of(key) is not None:
            families.setdefault(family_of(key), []).append(result)
    return {family: sorted(rs, key=lambda r: depth_of(r["shape"]) or 0) for family, rs in families.items()}


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
    """Each line as the fixed part and the per-layer part (figure against depth): what a layer adds at this width."""
    out = {}
    for name, stage, kind, _ in FAMILY_LINES:
        if all(stage in r["stages"] for r in results):
            slope, fixed = least_squares([(depth_of(r["shape"]) or 0, figure(r, stage, kind)) for r in results])
            out[name] = (fixed, slope)
    return out


def held_out(results: list[dict]) -> list[dict]:
    """Fit each line on all depths but the deepest, predict the deepest: the extrapolation's error, per line."""
    if len(results) < 3:
        return []
    fitted, deepest = results[:-1], results[-1]
    rows = []
    for name, stage, kind, which in FAMILY_LINES:
        if not all(stage in r["stages"] for r in results):
            continue
        a, b = least_squares([(reads(r, which), figure(r, stage, kind)) for r in fitted])
        predicted, measured = a * reads(deepest, which) + b, figure(deepest, stage, kind)
        error = abs(predicted - measured) / measured if measured else 0.0
        rows.append({"line": name, "predicted": predicted, "measured": measured, "error": error, "kind": kind})
    return rows


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
        lines += [""]
        lines += ["| line | fixed | per layer |", "|---|---|---|"]
        for name, (fixed, slope) in per_layer(rs).items():
            unit = (lambda n: f"{n:.1f} s") if name.endswith("seconds") else (lambda n: f"{n / 1e9:.3f} GB")
            lines.append(f"| {name} | {unit(fixed)} | {unit(slope)} |")
        checks = held_out(rs)
        if checks:
            # The lines that decide a class (a GB or more at the deepest cut); the small ones (inspect: tens of MB)
            # and the seconds (a shared machine's load moves them) are reported beside them.
            held = [c for c in checks if c["kind"] != "seconds" and c["measured"] >= 1e9]
            worst = max(held, key=lambda c: c["error"])
            lines += [
                "",
                f"Held-out depth: fitted on {', '.join(r['shape'] for r in rs[:-1])}, predicting {rs[-1]['shape']} "
                f"(goal: within {HELD_OUT_TOLERANCE:.0%} for the lines of a GB or more, which decide a class; "
                "seconds and the small lines are reported, not held to it).",
                "",
                "| line | predicted | measured | error |",
                "|---|---|---|---|",
            ]
            for c in checks:
                fmt = (lambda n: f"{n:.1f} s") if c["kind"] == "seconds" else (lambda n: f"{n / 1e9:.3f} GB")
                lines.append(f"| {c['line']} | {fmt(c['predicted'])} | {fmt(c['measured'])} | {c['error']:.1%} |")
            verdict = "holds" if worst["error"] <= HELD_OUT_TOLERANCE else "does NOT hold"
            lines += [
                "",
                f"Worst error of the lines of a GB or more: {worst['error']:.1%} ({worst['line']}): the "
                f"extrapolation {verdict}.",
            ]
        lines += [
            "",
            "Seconds are the weak part: a shared machine's load moves them (the held-out seconds above show how far, "
            "where the load changed between depths), so a family's time estimate is indicative; memory and disk "
            "are what decide a class.",
        ]
        lines += ["", "As `runners.sizing.families` in a recipe:", "", "```yaml", "    families:", f"      {family}:"]
        lines += [f"        {name}: {{a: {a}, b: {b}}}" for name, (a, b) in fit_family(rs).items()]
        lines += ["```"]
    if unmeasured:
        header = "Families not measured at real width (the plan sizes them by another family's lines and says whose):"
        lines += ["", header, ""]
        lines += [f"- {family}: {why}" for family, why in unmeasured.items()]
    return lines
