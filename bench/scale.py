"""What a real-size build costs: the bot's own stages on random-weight checkpoints of real Qwen3 shapes.

For each shape (``make-tiny --shape``), the stages run one after the other as the bot runs them, each inside
`bot.sandbox.resources.measure`: the checkpoint written in place (standing in for the download: same files, same bytes),
the token-free working copy, the draft export, the target export, the IR inspection, the quality step (the int4
target against its original weights, on the recipe's prompts and length, as a build runs it), the GenAI validation
and the bundle (`bench/stages.py`). Each stage records wall time, peak RSS of this process and all its children with
its anonymous and file-backed peaks apart, peak disk under the work folder, and output bytes; validation adds GenAI
seconds per generated token, plain and speculative.

The results of every measured shape are kept in docs/scale.json (a run updates the shapes it measured), fitted
as ``a × bytes + b`` per stage, compared with the estimate the recipe's sizing model makes, and written to
docs/scale.md with the machine they came from, with the quality step's share of the build's time. The
validation stage is shortened (one k, one repeat, 16 tokens: its memory does not depend on the sweep), so that
share is an upper bound; ``--recipe-validation`` runs the recipe's own sweep instead, for the share a build really
sees. Qwen3 0.6B and 1.7B run by default; ``--with-4b`` adds Qwen3-4B (minutes, about 12 GB of memory and 25 GB of
disk).

    .venv/bin/python bench/scale.py [--with-4b] [--shapes qwen3-0.6b ...] [--work DIR]
        [--scratch SHAPE ...]      # the exports' temporary IR (TMPDIR), for results measured without it
        [--recipe-validation]      # validate with the recipe's sweep (k, repeats, length), not the short one
        [--end-to-end SHAPE ...]   # `dflash-bot build` as a whole, exports side by side
        [--report-only]            # refit and rewrite docs/scale.md from docs/scale.json
    .venv/bin/python bench/scale.py --shapes SHAPE ... --stage STAGE ... (--memory-limit BYTES | --floor)

The last form leaves docs/ alone and prints a table (`bench/floor.py`): each stage unlimited, then inside a memory
cgroup (`bench/memory_limit.py`) of BYTES, or bisected down to its floor, the smallest limit at which it finishes
within 1.5 x its unlimited time; ``--stage build`` limits `dflash-bot build` as a whole. `bench/floors.sh` runs it
for the 1.7B and 4B shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, ROOT
from bench.floor import FLOOR_STAGES, MAX_TRIES, SLOWDOWN, STEP_BYTES, limit_stages, markdown
from bench.memory_limit import limit_method
from bench.scale_family import depth_of, family_of, least_squares
from bench.scale_family import markdown as family_markdown
from bench.scale_family import reads as family_reads
from bench.scale_report import quality_and_other_seconds, write_report
from bench.stages import END_TO_END, STAGES, canonical_output, end_to_end, run_stage
from bot.core.runners import SIZED_STAGES
from bot.sandbox.resources import Measurement, disk_used, measure

DEFAULT_SHAPES = ("qwen3-0.6b", "qwen3-1.7b")
RESULTS = ROOT / "docs" / "scale.json"
LIMITS = ROOT / "docs" / "scale_limits.json"  # --record: the limited runs and floors docs/scale.md shows
REPORT = ROOT / "docs" / "scale.md"
OUTPUT_MEASURED = ("download", "copy", "draft export", "target export", "bundle")  # the others' outputs are logs
# The catalogue's target families not measured at real width yet, and why (docs/scale.md says so; the plan sizes
# them by another family's lines and names that in its reason).
UNMEASURED_FAMILIES: dict[str, str] = {}


def measure_shape(shape: str, root: Path, *, recipe_validation: bool = False) -> dict:
    """Run every stage on one shape under `root`; returns the figures (see the module docstring)."""
    work = root / "work"
    work.mkdir(parents=True)
    stages: dict[str, dict] = {}
    for name in STAGES:
        out = canonical_output(name, work) or work / name
        before = disk_used(work)
        with measure(work, output=out if name in OUTPUT_MEASURED else None) as m:
            extra = run_stage(name, shape, work, out, work, recipe_validation=recipe_validation)
        stages[name] = {**figures(m), "disk_before_bytes": before, **extra}
        print(
            f"  {name:<14} {_memory_line(stages[name])}  out {stages[name]['output_bytes'] / 1e9:6.2f} GB", flush=True
        )
    validate = stages["validate"]
    print(
        f"  GenAI: plain {validate['plain_s_per_token']:.3f} s/token, speculative (k=3) "
        f"{validate['speculative_s_per_token']:.3f} s/token, accept length {validate['accept_length']:.2f}",
        flush=True,
    )
    quality_s, others_s = quality_and_other_seconds(stages)
    print(
        f"  quality step: {quality_s:.1f} s, {quality_s / others_s:.0%} added to the other stages' "
        f"{others_s:.1f} s (download excluded)",
        flush=True,
    )
    return {
        "shape": shape,
        "draft_bytes": _safetensors_bytes(work / "download" / "draft"),
        "target_bytes": _safetensors_bytes(work / "download" / "target"),
        "stages": stages,
        "scratch_in_stages": True,
        "recipe_validation": recipe_validation,
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": round(os.getloadavg()[1], 1),
    }


def measure_export_scratch(shape: str, root: Path) -> dict:
    """Disk each export holds beyond its IR: optimum-cli writes the floating-point IR to a temporary folder (under
    TMPDIR) before compressing it into the output, so TMPDIR is put under the measured work folder here."""
    from bot.builder.export import ExportRequest, export_model
    from bot.core.exporter import TASK_LLM
    from bot.core.recipe import load_recipe
    from bot.discover.fetch import safe_copy

    pair = root / "pair"
    subprocess.run(
        [str(BIN / "dflash-bot"), "make-tiny", "--shape", shape, str(pair)], check=True, stdout=subprocess.DEVNULL
    )
    work = root / "work"
    (work / "tmp").mkdir(parents=True)
    os.environ["TMPDIR"] = str(work / "tmp")  # the export children inherit it (untrusted_env keeps it)
    scratch = {}
    try:
        for role, remote in (("draft", True), ("target", False)):
            src = safe_copy(pair / role, work / "src" / role)
            before = disk_used(work)
            with measure(work, output=work / "ir" / role) as m:
                export_model(
                    ExportRequest(role, src, work / "ir" / role, TASK_LLM, trust_remote_code=remote),
                    load_recipe().export,
                    log_dir=work / "logs",
                    home=work / "hf",
                )
            cost = figures(m)
            scratch[role] = max(0, cost["peak_disk_bytes"] - before - cost["output_bytes"])
            print(
                f"  {role} export scratch {scratch[role] / 1e9:6.2f} GB (peak {cost['peak_disk_bytes'] / 1e9:.2f} GB)",
                flush=True,
            )
    finally:
        os.environ.pop("TMPDIR")
    return scratch


def measure_end_to_end(shape: str, root: Path) -> dict:
    """`dflash-bot build` on one shape as a user runs it (exports side by side), measured as a whole."""
    pair = root / "pair"
    subprocess.run(
        [str(BIN / "dflash-bot"), "make-tiny", "--shape", shape, str(pair)], check=True, stdout=subprocess.DEVNULL
    )
    work = root / "work"
    work.mkdir()
    with measure(work, output=work / "bundle") as m:
        end_to_end(pair, work / "bundle", work)
    cost = figures(m)
    print(f"  end to end     {_memory_line(cost)} (the working copy of the sources counted)", flush=True)
    return cost


def folder_name(shape: str) -> str:
    """A shape's name as a folder name: transformers and huggingface_hub read `@` in a path as a revision."""
    return shape.replace("@", "-depth")


def figures(measured: Measurement) -> dict:
    """A measured stage as docs/scale.json keeps it: seconds to a hundredth, every memory peak (shared memory too,
    which the build record leaves out), and 0 output bytes for a stage without an output folder."""
    cost = measured.result
    return {
        "seconds": round(cost.seconds, 2),
        "peak_rss_bytes": cost.peak_rss_bytes,
        "peak_anon_bytes": cost.peak_anon_bytes,
        "peak_file_bytes": cost.peak_file_bytes,
        "peak_shmem_bytes": measured.peaks.shmem_bytes,
        "peak_disk_bytes": cost.peak_disk_bytes,
        "output_bytes": cost.output_bytes or 0,
    }


def _memory_line(stage: dict) -> str:
    return (
        f"{stage['seconds']:7.1f}s  rss {stage['peak_rss_bytes'] / 1e9:6.2f} GB  anonymous "
        f"{stage['peak_anon_bytes'] / 1e9:6.2f} GB  file-backed {stage['peak_file_bytes'] / 1e9:6.2f} GB  disk "
        f"{stage['peak_disk_bytes'] / 1e9:6.2f} GB"
    )


def _safetensors_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


# ---- the fit ----


def fit_line(points: list[tuple[int, int]]) -> tuple[float, int]:
    """Least-squares ``a × x + b`` (a >= 0); one point gives a line through the origin."""
    if len(points) == 1:
        x, y = points[0]
        return max(0.0, y / x), 0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    a = max(0.0, sum((x - mx) * (y - my) for x, y in points) / sxx) if sxx else 0.0
    return round(a, 4), int(my - a * mx)


def anonymous(stage: dict) -> int:
    """A stage's anonymous peak (plus swap): what the sizing model predicts; rows measured before it was sampled
    apart fall back to their RSS peak (an over-estimate)."""
    return stage.get("peak_anon_bytes") or stage["peak_rss_bytes"]


def fit(results: dict[str, dict]) -> dict[str, tuple[float, int]]:
    """Fit every line of `bot.core.runners.SizingModel` on the measured shapes: the `*_memory` lines on anonymous
    peaks, the `*_file` lines on file-backed peaks (rows without them are left out of those)."""
    from bot.plan.sizing import f32_copy_bytes

    lines: dict[str, list[tuple[int, int]]] = {}

    def point(name: str, n_bytes: int, stage: dict) -> None:
        lines.setdefault(f"{name}_memory", []).append((n_bytes, anonymous(stage)))
        if stage.get("peak_file_bytes") is not None:
            lines.setdefault(f"{name}_file", []).append((n_bytes, stage["peak_file_bytes"]))

    ir_bytes, scratch = [], []
    results = base_results(results)
    for r in results.values():
        for role, n in (("draft", r["draft_bytes"]), ("target", r["target_bytes"])):
            stage = r["stages"][f"{role} export"]
            point(f"{role}_export", n, stage)
            ir_bytes.append((n, stage["output_bytes"]))
            if "export_scratch" in r:  # measured with TMPDIR under the work folder (measure_export_scratch)
                scratch.append((n, r["export_scratch"][role]))
            elif r.get("scratch_in_stages") or not any("export_scratch" in other for other in results.values()):
                scratch.append(
                    (n, max(0, stage["peak_disk_bytes"] - stage["disk_before_bytes"] - stage["output_bytes"]))
                )
        point("validate", r["draft_bytes"] + r["target_bytes"], r["stages"]["validate"])
        point("inspect", r["target_bytes"], r["stages"]["inspect"])
        if "quality" in r["stages"]:
            quality = r["stages"]["quality"]
            # An f32 original's copy is known (2 x the bf16 bytes) and added by the model: the line fits the rest.
            beyond_copy = anonymous(quality) - f32_copy_bytes(r["target_bytes"])
            lines.setdefault("quality_memory", []).append((r["target_bytes"], beyond_copy))
            if quality.get("peak_file_bytes") is not None:  # the mapped checkpoint, then the mapped IR
                lines.setdefault("quality_file", []).append((r["target_bytes"], quality["peak_file_bytes"]))
    lines |= {"ir_bytes": ir_bytes, "export_scratch_disk": scratch}
    order = [*(f"{name}_memory" for name in STAGE_LINES), "ir_bytes", "export_scratch_disk", "quality_memory"]
    order += [f"{name}_file" for name in (*STAGE_LINES, "quality")]
    fits = {name: fit_line(lines[name]) for name in order if lines.get(name)}
    return fits | seconds_lines(results)


def seconds_lines(results: dict[str, dict]) -> dict[str, tuple[float, int]]:
    """Each sized stage's wall seconds on this machine as a line in the bytes it reads (a to 4 significant digits:
    seconds per byte are small)."""
    reads = {"draft export": "draft", "target export": "target", "validate": "pair", "inspect": "target"}
    reads["quality"] = "target"
    fits = {}
    for stage, which in reads.items():
        points = [
            (family_reads(r, which), r["stages"][stage]["seconds"]) for r in results.values() if stage in r["stages"]
        ]
        if len(points) >= 2:
            a, b = least_squares(points)
            fits[f"{stage.replace(' ', '_')}_seconds"] = (float(f"{a:.4g}"), round(b))
    return fits


def base_results(results: dict[str, dict]) -> dict[str, dict]:
    """The whole Qwen3 shapes the top-level lines are fitted on (a cut `NAME@N` shape is its family's:
    `bench.scale_family`)."""
    return {key: r for key, r in results.items() if depth_of(key) is None}


# The sized stages fitted alike, a line per memory kind; quality's memory line is fitted beyond its f32 copy.
STAGE_LINES = tuple(stage for stage in SIZED_STAGES if stage != "quality")


def comparisons(results: dict[str, dict]) -> list[dict]:
    """The recipe's estimate against the measured peaks, for the schedule the benchmark ran (sequential, sources
    kept)."""
    from bot.core.recipe import load_recipe
    from bot.plan.sizing import estimate_schedule

    sizing = load_recipe().runners.sizing
    rows = []
    for key, r in results.items():
        # A cut shape is estimated by its family's lines (the draft by the Qwen3 ones), as the plan does.
        model, measured_family = sizing.for_family(family_of(key)) if depth_of(key) is not None else (sizing, True)
        if not measured_family:
            continue
        if "end_to_end" in r:
            e2e = r["end_to_end"]
            estimate = estimate_schedule(
                r["draft_bytes"],
                r["target_bytes"],
                model,
                parallel_exports=True,
                remove_sources=False,
                draft_model=sizing,
            )
            rows.append(
                {
                    "shape": r["shape"] + " (dflash-bot build, parallel exports)",
                    "estimated_rss": estimate.peak_memory_bytes,
                    "measured_rss": anonymous(e2e),
                    "rss_ratio": estimate.peak_memory_bytes / anonymous(e2e),
                    "estimated_file": estimate.peak_file_bytes,
                    "measured_file": e2e.get("peak_file_bytes"),
                    "estimated_disk": estimate.peak_disk_bytes,
                    "measured_disk": e2e["peak_disk_bytes"],
                    "disk_ratio": estimate.peak_disk_bytes / e2e["peak_disk_bytes"],
                }
            )
        built = [s for name, s in r["stages"].items() if name != "download"]
        measured_rss = max(anonymous(s) for s in built)
        measured_file = max((s["peak_file_bytes"] for s in built if s.get("peak_file_bytes") is not None), default=None)
        measured_disk = max(s["peak_disk_bytes"] for s in r["stages"].values())
        scratch = r.get("export_scratch")
        if scratch is None and not r.get("scratch_in_stages"):
            # Measured before TMPDIR was kept under the work folder: the exports' temporary IR is missing.
            disk_note = "export scratch not measured"
        else:
            disk_note = ""
            if scratch is not None and not r.get("scratch_in_stages"):
                measured_disk = max(
                    measured_disk,
                    *(r["stages"][f"{role} export"]["peak_disk_bytes"] + scratch[role] for role in ("draft", "target")),
                )
        estimate = estimate_schedule(
            r["draft_bytes"], r["target_bytes"], model, parallel_exports=False, remove_sources=False, draft_model=sizing
        )
        rows.append(
            {
                "shape": r["shape"] + " (stages one by one)",
                "estimated_rss": estimate.peak_memory_bytes,
                "measured_rss": measured_rss,
                "rss_ratio": estimate.peak_memory_bytes / measured_rss,
                "estimated_file": estimate.peak_file_bytes,
                "measured_file": measured_file,
                "estimated_disk": estimate.peak_disk_bytes,
                "measured_disk": measured_disk,
                "disk_ratio": estimate.peak_disk_bytes / measured_disk,
                "disk_note": disk_note,
            }
        )
    return rows


def limited_checks(limits: list[dict]) -> list[dict]:
    """The recipe's anonymous estimate against a limited build of a shape not measured stage by stage (its row
    names the stages that finished, `stages_run`, and the pair's bytes): the largest of those stages' estimates."""
    from bot.core.recipe import load_recipe
    from bot.plan.sizing import stage_peaks

    model = load_recipe().runners.sizing
    rows = []
    for row in limits:
        if not row.get("stages_run"):
            continue
        peaks = stage_peaks(row["draft_bytes"], row["target_bytes"], model)
        estimated = max(peaks.memory[stage.replace(" ", "_")] for stage in row["stages_run"])
        rows.append(
            {
                "shape": f"{row['shape']} ({row['stage']} under {row['limit_bytes'] / 1e9:.0f} GB: "
                f"{', '.join(row['stages_run'])})",
                "estimated_rss": estimated,
                "measured_rss": row["peak_anon_bytes"],
                "rss_ratio": estimated / row["peak_anon_bytes"],
                "estimated_disk": None,
                "disk_note": "not measured under a limit",
            }
        )
    return rows


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{cpu}, {os.cpu_count()} cores, {memory / 2**30:.0f} GiB memory, {platform.system()} {platform.release()}"


def toolchain() -> str:
    from importlib.metadata import version

    names = ("optimum-intel", "nncf", "openvino", "openvino-genai", "transformers", "torch")
    return ", ".join(f"{n} {version(n)}" for n in names)


def limit_mode(args: argparse.Namespace, shapes: list[str]) -> int:
    """--memory-limit / --floor: each shape's stages under limits (`bench.floor`), as a markdown table."""
    if not args.stage:
        raise SystemExit("--memory-limit and --floor need --stage (a stage name, build, or all)")
    # Stage names hold spaces; "target-export" is accepted for "target export".
    stages = [name for stage in args.stage for name in (FLOOR_STAGES if stage == "all" else [stage.replace("-", " ")])]
    unknown = sorted(set(stages) - {*STAGES, END_TO_END})
    if unknown:
        raise SystemExit(f"unknown stage(s) {', '.join(unknown)}; one of: {', '.join(STAGES)}, {END_TO_END}, all")
    print(f"memory limits set by: {limit_method()}", flush=True)
    rows: list[dict] = []
    for shape in shapes:
        print(f"{shape}:", flush=True)
        root = Path(tempfile.mkdtemp(prefix=f"bench-limits-{folder_name(shape)}-", dir=args.work))
        try:
            rows += limit_stages(
                shape,
                stages,
                root,
                limit_bytes=args.memory_limit,
                floor=args.floor,
                step_bytes=args.floor_step,
                max_tries=args.floor_tries,
                recipe_validation=args.recipe_validation,
                checkpoint=args.checkpoint,
                limited_only=args.limited_only,
            )
        finally:
            if args.limits_out is not None and (root / "logs").is_dir():  # the runs' logs, beside the rows
                shutil.copytree(root / "logs", args.limits_out.with_suffix(f".{shape}.logs"), dirs_exist_ok=True)
            shutil.rmtree(root, ignore_errors=True)
        if args.limits_out is not None:
            args.limits_out.write_text(json.dumps(rows, indent=2) + "\n")
        if args.record:
            record_limits(rows)
    print()
    print(markdown(rows), end="")
    if args.record:
        write_docs(json.loads(RESULTS.read_text()), {"machine": machine(), "toolchain": toolchain()})
    return 0


def record_limits(rows: list[dict]) -> None:
    """Keep `rows` in docs/scale_limits.json, each replacing an earlier row of its shape, stage and kind (a floor,
    or a run under one limit), with the time and load it was measured at."""
    kept: list[dict] = json.loads(LIMITS.read_text()) if LIMITS.is_file() else []
    when = {"measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_average": os.getloadavg()[1]}

    def key(row: dict) -> tuple:
        return row["shape"], row["stage"], "floor_bytes" in row, row.get("limit_bytes")

    fresh = {key(row): row | when for row in rows}
    kept = [row for row in kept if key(row) not in fresh] + list(fresh.values())
    LIMITS.write_text(json.dumps(kept, indent=2) + "\n")


def _bytes(text: str) -> int:
    """4000000000, 4e9, 4GB (10^9) or 3.5GiB (2^30)."""
    units = {"gib": 2**30, "gb": 10**9, "g": 10**9, "mib": 2**20, "mb": 10**6}
    lowered = text.strip().lower()
    for unit, scale in units.items():
        if lowered.endswith(unit):
            return int(float(lowered[: -len(unit)]) * scale)
    return int(float(lowered))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--with-4b", action="store_true", help="also measure Qwen3-4B (~12 GB memory, minutes)")
    parser.add_argument("--shapes", nargs="*", help=f"shapes to measure (default: {' '.join(DEFAULT_SHAPES)})")
    parser.add_argument("--work", type=Path, help="parent of the scratch folder (default: the system temp)")
    parser.add_argument(
        "--end-to-end",
        nargs="*",
        default=[],
        metavar="SHAPE",
        help="also run `dflash-bot build` on these shapes and compare the parallel-export estimate",
    )
    parser.add_argument(
        "--scratch",
        nargs="*",
        default=[],
        metavar="SHAPE",
        help="measure the exports' temporary disk (TMPDIR) on these shapes",
    )
    parser.add_argument(
        "--recipe-validation",
        action="store_true",
        help="validate with the recipe's sweep (k values, repeats, length) instead of the short one",
    )
    parser.add_argument("--report-only", action="store_true", help="refit and rewrite docs/scale.md from scale.json")
    limits = parser.add_argument_group("memory limits (print a table; docs/scale.json and scale.md are left alone)")
    limits.add_argument(
        "--stage",
        nargs="+",
        metavar="STAGE",
        help=f"the stages to limit: {', '.join(STAGES)}, {END_TO_END} (`dflash-bot build` as a "
        f"whole) or all (the build's own: {', '.join(FLOOR_STAGES)})",
    )
    limits.add_argument(
        "--memory-limit",
        type=_bytes,
        metavar="BYTES",
        help="run each --stage unlimited, then inside a memory cgroup of BYTES (4e9, 4GB, 3.5GiB)",
    )
    limits.add_argument(
        "--floor",
        action="store_true",
        help=f"bisect each --stage's floor: the smallest limit at which it finishes within "
        f"{SLOWDOWN} x its unlimited time",
    )
    limits.add_argument("--floor-step", type=_bytes, default=STEP_BYTES, metavar="BYTES", help="the floor's resolution")
    limits.add_argument(
        "--floor-tries",
        type=int,
        default=MAX_TRIES,
        help="limited runs per stage, at most (0: each stage's unlimited peaks only)",
    )
    limits.add_argument("--limits-out", type=Path, metavar="FILE", help="also write the rows as JSON")
    limits.add_argument(
        "--record",
        action="store_true",
        help=f"keep the rows in {LIMITS.relative_to(ROOT)} and rewrite docs/scale.md with them",
    )
    limits.add_argument(
        "--checkpoint",
        type=Path,
        metavar="DIR",
        help="a `make-tiny --shape` folder of the (one) shape, used as its download instead of writing one",
    )
    limits.add_argument(
        "--limited-only",
        action="store_true",
        help="run --stage build under --memory-limit only, without the unlimited run (for a shape that would not "
        "fit this machine's memory unlimited)",
    )
    args = parser.parse_args()
    shapes = list(DEFAULT_SHAPES if args.shapes is None else args.shapes) + (["qwen3-4b"] if args.with_4b else [])
    if args.memory_limit is not None or args.floor:
        return limit_mode(args, shapes)
    results: dict[str, dict] = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    info = {"machine": machine(), "toolchain": toolchain()}
    if not args.report_only:
        for shape in shapes:
            print(f"{shape}:", flush=True)
            root = Path(tempfile.mkdtemp(prefix=f"bench-scale-{folder_name(shape)}-", dir=args.work))
            try:
                results[shape] = measure_shape(shape, root, recipe_validation=args.recipe_validation) | info
            finally:
                shutil.rmtree(root, ignore_errors=True)
            RESULTS.parent.mkdir(exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        for shape in args.scratch:
            if shape not in results:
                raise SystemExit(f"measure {shape} stage by stage first (--shapes {shape})")
            print(f"{shape}, export scratch:", flush=True)
            root = Path(tempfile.mkdtemp(prefix=f"bench-scale-scratch-{folder_name(shape)}-", dir=args.work))
            try:
                results[shape]["export_scratch"] = measure_export_scratch(shape, root)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        for shape in args.end_to_end:
            if shape not in results:
                raise SystemExit(f"measure {shape} stage by stage first (--shapes {shape})")
            print(f"{shape}, end to end:", flush=True)
            root = Path(tempfile.mkdtemp(prefix=f"bench-scale-e2e-{folder_name(shape)}-", dir=args.work))
            try:
                results[shape]["end_to_end"] = measure_end_to_end(shape, root)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    write_docs(results, info)
    return 0


def write_docs(results: dict[str, dict], info: dict) -> None:
    """Refit, print the fit and its check, and rewrite docs/scale.md (with the recorded limits and floors)."""
    fits = fit(results)
    rows = comparisons(results)
    print("\nfitted (a, b):")
    for name, (a, b) in fits.items():
        print(f"  {name:<20} a={a:.4f}  b={b / 1e9:.3f} GB")
    print("\nestimate / measured:")
    for row in rows:
        print(
            f"  {row['shape']:<12} anonymous {row['estimated_rss'] / 1e9:6.2f} / {row['measured_rss'] / 1e9:6.2f} GB "
            f"= {row['rss_ratio']:.3f}   disk {row['estimated_disk'] / 1e9:6.2f} / "
            f"{row['measured_disk'] / 1e9:6.2f} GB = {row['disk_ratio']:.3f} {row.get('disk_note', '')}"
        )
    limits = json.loads(LIMITS.read_text()) if LIMITS.is_file() else []
    rows += limited_checks(limits)
    families = "\n".join(family_markdown(results, UNMEASURED_FAMILIES))
    REPORT.write_text(write_report(results, fits, rows, info, limits).rstrip("\n") + "\n" + families + "\n")
    print(f"\nwrote {REPORT.relative_to(ROOT)} from {RESULTS.relative_to(ROOT)} and {LIMITS.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
