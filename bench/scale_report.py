"""The markdown of docs/scale.md, written by `bench/scale.py` from docs/scale.json, its fit and its comparisons."""

from __future__ import annotations

from bench.stages import STAGES


def quality_and_other_seconds(stages: dict[str, dict]) -> tuple[float, float]:
    """The quality step's seconds and the other stages' (the download excluded: here it is generation time)."""
    others = sum(stage["seconds"] for name, stage in stages.items() if name not in ("download", "quality"))
    return stages["quality"]["seconds"], others


def write_report(results: dict[str, dict], fits: dict, rows: list[dict], info: dict, limits: list[dict]) -> str:
    """docs/scale.md: the stage rows, the fit and its check against them, and the recorded limits and floors."""

    def gb(n: int | None) -> str:
        return "-" if n is None else f"{n / 1e9:.2f}"  # None: measured before the figure was kept

    lines = [
        "# What a real-size build costs (measured)",
        "",
        "Written by `bench/scale.py` (do not edit by hand; rerun it). Random-weight bf16 checkpoints with the real",
        "shapes (`dflash-bot make-tiny --shape`), built stage by stage with the bot's own stage functions, one after",
        "the other. RSS is the peak of the bot process plus all its children (sampled every 0.2 s), and so are its",
        "two parts: anonymous memory (plus swap), which the kernel cannot drop and a runner must hold, and",
        "file-backed pages (mapped checkpoints and IR weights), which the kernel drops and reads again under",
        "pressure; each peak is its own maximum, so they need not add up to the RSS peak (`-`: measured before",
        "they were kept). Disk is the peak allocated under the build's work folder (the checkpoint as downloaded,",
        "the working copy (hard links), the IRs and the bundle). The `download` row is the checkpoint being written",
        "in place by a separate process (its time is generation time, not a download).",
        "",
        f"Machine: {info['machine']}.  ",
        f"Toolchain: {info['toolchain']}.  ",
        "Measured: "
        + ", ".join(
            f"{r['shape']} ({r['measured_at']}, 5-minute load average {r.get('load_average', 'not recorded')})"
            for r in results.values()
        )
        + ".",
        "",
        "Seconds depend on what else the machine runs (the load average says how busy it was; on a shared 2-core",
        "machine they are upper bounds); memory and disk do not. OpenVINO maps an IR's weights file, so the `inspect`",
        "row counts only the pages it reads.",
        "",
        "## Per stage",
        "",
        "| shape | draft GB | target GB | stage | seconds | peak RSS GB | anonymous GB | file-backed GB "
        "| peak disk GB | output GB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.values():
        for name in (name for name in STAGES if name in r["stages"]):
            s = r["stages"][name]
            lines.append(
                f"| {r['shape']} | {gb(r['draft_bytes'])} | {gb(r['target_bytes'])} | {name} | "
                f"{s['seconds']:.1f} | {gb(s['peak_rss_bytes'])} | {gb(s.get('peak_anon_bytes'))} | "
                f"{gb(s.get('peak_file_bytes'))} | {gb(s['peak_disk_bytes'])} | {gb(s['output_bytes'])} |"
            )
    lines += [
        "",
        "## GenAI decoding speed (validation stage, default CPU properties, k = 3)",
        "",
        "| shape | plain s/token | speculative s/token | accept length | lossless |",
        "|---|---|---|---|---|",
    ]
    for r in results.values():
        v = r["stages"]["validate"]
        lines.append(
            f"| {r['shape']} | {v['plain_s_per_token']:.3f} | {v['speculative_s_per_token']:.3f} | "
            f"{v['accept_length']:.2f} | {v['lossless']} |"
        )
    with_quality = [r for r in results.values() if "quality" in r["stages"]]
    if with_quality:
        lines += [
            "",
            "## The quality step's share of the build (goal: at most 25 % added at the 4B shape)",
            "",
            "The quality step (`bot/builder/quality.py`: the int4 IR's greedy continuation of every prompt, decoded",
            "as one batch, then one teacher-forced pass of the original over them) on the recipe's prompts and",
            "length, against the other stages' seconds (the download row excluded: here it is generation time).",
            "With the shortened validation the share is an upper bound; `--recipe-validation` rows use the",
            "recipe's sweep for one draft weight format (the default recipe measures two, int4 and int8, so a",
            "real build validates about twice as long). The last column compares it with the target export.",
            "",
            "| shape | validation | reference dtype | quality s | other stages s | added | quality peak RSS GB "
            "| quality / target export |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in with_quality:
            q = r["stages"]["quality"]
            seconds, others = quality_and_other_seconds(r["stages"])
            sweep = "recipe's sweep" if r.get("recipe_validation") else "shortened"
            lines.append(
                f"| {r['shape']} | {sweep} | {q.get('reference_dtype')} | {seconds:.1f} | "
                f"{others:.1f} | {seconds / others:.0%} | {gb(q['peak_rss_bytes'])} | "
                f"{seconds / r['stages']['target export']['seconds']:.2f} |"
            )
    scratched = [r for r in results.values() if "export_scratch" in r]
    if scratched:
        lines += [
            "",
            "## Export scratch (`--scratch`: optimum-cli's temporary floating-point IR, TMPDIR under the work folder)",
            "",
            "| shape | draft export GB | target export GB |",
            "|---|---|---|",
        ]
        lines += [
            f"| {r['shape']} | {gb(r['export_scratch']['draft'])} | {gb(r['export_scratch']['target'])} |"
            for r in scratched
        ]
    e2e = [r for r in results.values() if "end_to_end" in r]
    if e2e:
        lines += [
            "",
            "## End to end (`--end-to-end`: `dflash-bot build`, exports side by side)",
            "",
            "| shape | seconds | peak RSS GB | anonymous GB | file-backed GB | peak disk GB |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['shape']} | {e['seconds']:.1f} | {gb(e['peak_rss_bytes'])} | {gb(e.get('peak_anon_bytes'))} "
            f"| {gb(e.get('peak_file_bytes'))} | {gb(e['peak_disk_bytes'])} |"
            for r in e2e
            for e in [r["end_to_end"]]
        ]
    lines += [
        "",
        "Random weights accept almost nothing, so the speculative figure is the cost of a draft that never "
        "helps; it is not the speed-up a trained draft gets.",
        "",
        "## Fitted model (`a × bytes + b`; the constants of `runners.sizing` in the recipe)",
        "",
        "The `*_memory` lines are anonymous peaks (what a runner class must hold, and what the memory guard",
        "compares with its budget); the `*_file` lines are the file-backed working set beside them (reported: room",
        "for it keeps a stage fast, it never refuses a build).",
        "",
        "| line | bytes it reads | a | b (GB; seconds for a `*_seconds` line) |",
        "|---|---|---|---|",
    ]
    reads = {
        "draft_export": "draft safetensors",
        "target_export": "target safetensors",
        "validate": "draft + target safetensors",
        "inspect": "target safetensors",
        "ir_bytes": "one model's safetensors",
        "export_scratch_disk": "one model's safetensors",
        "quality_memory": "target safetensors (an f32 original's copy, 2 x those bytes, is added beside it)",
        "quality_file": "target safetensors",
        "quality": "target safetensors",
    }
    for name, (a, b) in fits.items():
        what = reads.get(name) or reads[name.rsplit("_", 1)[0]]
        if name.endswith("_seconds"):  # seconds on this machine's cores: a per byte, b in seconds
            lines.append(f"| {name} | {what} | {a:.4g} | {b} s |")
        else:
            lines.append(f"| {name} | {what} | {a:.4f} | {b / 1e9:.3f} |")
    lines += ["", "As `runners.sizing` in a recipe (workflows/dflash.yaml carries these):", "", "```yaml", "  sizing:"]
    lines += [f"    {name}: {{a: {a}, b: {b}}}" for name, (a, b) in fits.items()]
    lines += ["```"]
    lines += [
        "",
        "## Estimate against measurement (sources kept; the stage rows run the exports one after the other)",
        "",
        "| shape | estimated anonymous peak GB | measured | ratio | estimated file-backed GB | measured "
        "| estimated peak disk GB | measured | ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        disk = (
            f"{gb(row['estimated_disk'])} | {gb(row['measured_disk'])} | {row['disk_ratio']:.3f}"
            if not row.get("disk_note")
            else f"{gb(row['estimated_disk'])} | - | {row['disk_note']}"
        )
        lines.append(
            f"| {row['shape']} | {gb(row['estimated_rss'])} | {gb(row['measured_rss'])} | "
            f"{row['rss_ratio']:.3f} | {gb(row.get('estimated_file'))} | {gb(row.get('measured_file'))} | {disk} |"
        )
    ratios = [(row["rss_ratio"], row["shape"], "memory") for row in rows]
    ratios += [(row["disk_ratio"], row["shape"], "disk") for row in rows if not row.get("disk_note")]
    worst = max(ratios, key=lambda item: abs(item[0] - 1))
    lines += [
        "",
        f"Worst estimate/measured ratio: {worst[0]:.3f} ({worst[1]}, {worst[2]}); goal: within 0.85-1.15.",
        "The build-peak lines are fitted on these same shapes (three points, two constants per line), so the",
        "stage-by-stage rows check the fit and its composition, not a prediction for an unseen shape.",
    ]
    if e2e:
        lines += [
            "The end-to-end rows are the bot's own `dflash-bot build` with its exports side by side, which the",
            "model over-estimates (the two exports' peaks do not coincide).",
        ]
    lines += [
        "",
        "Export scratch: optimum-cli writes the floating-point IR to a temporary folder (TMPDIR) before it",
        "compresses it into the output (about 1.0 x the model's bf16 bytes); the stage rows keep TMPDIR under",
        "the measured work folder, so their disk includes it.",
    ]
    if any(not r.get("scratch_in_stages") for r in results.values()):
        lines += [
            "Rows measured before that (no `scratch_in_stages` in docs/scale.json) add the scratch measured",
            "separately by `--scratch`, or say it was not measured.",
        ]
    lines += ["", *FLOOR_HOWTO, *limits_section(limits, sorted(results)), ""]
    return "\n".join(lines)


def limits_section(limits: list[dict], shapes: list[str]) -> list[str]:
    """The recorded limited runs and floors (`bench/scale.py ... --record`), and the floors not measured yet."""
    from bench.floor import FLOOR_STAGES, markdown

    floors = [row for row in limits if "floor_bytes" in row]
    limited = [row for row in limits if "floor_bytes" not in row]
    lines: list[str] = []
    for title, rows in (("Floors", floors), ("Under one memory limit", limited)):
        if rows:
            lines += ["", f"### {title} (`--record`)", "", markdown(rows).rstrip("\n"), ""]
            lines += [f"5-minute load average when measured: {'; '.join(load_averages(rows))}."]
            lines += [f"- {row['shape']} {row['stage']}: {row['note']}" for row in rows if row.get("note")]
    found = {(row["shape"], row["stage"]) for row in limits if row.get("floor_bytes")}
    missing = [
        f"{shape} ({', '.join(stages) if len(stages) < len(FLOOR_STAGES) else 'every stage'})"
        for shape in shapes
        if (stages := [stage for stage in FLOOR_STAGES if (shape, stage) not in found])
    ]
    if missing:
        lines += ["", f"Floors not measured yet (`bench/floors.sh`): {'; '.join(missing)}."]
    return lines


def load_averages(rows: list[dict]) -> list[str]:
    """Each shape's load average when its rows were recorded: one figure when its rows share it, else per stage."""

    def load(row: dict) -> str:
        return "not recorded" if row.get("load_average") is None else f"{row['load_average']:.1f}"

    shapes: dict[str, list[dict]] = {}
    for row in rows:
        shapes.setdefault(row["shape"], []).append(row)
    described = []
    for shape, shape_rows in shapes.items():
        if len({load(row) for row in shape_rows}) == 1:
            described.append(f"{shape}: {load(shape_rows[0])}")
        else:
            described += [f"{shape} {row['stage']}: {load(row)}" for row in shape_rows]
    return described


# How a stage's floor is measured (`bench/floor.py`); the floors themselves come from `bench/floors.sh`.
FLOOR_HOWTO = [
    "## How to measure a stage's memory floor",
    "",
    "Peak RSS overstates what a stage needs: its file-backed part (mapped checkpoints and IR weights) is dropped by",
    "the kernel under pressure and read again. A stage's floor is the smallest memory limit the kernel enforces",
    "(a memory cgroup: v1 `memory.limit_in_bytes` with `memory.memsw.limit_in_bytes`, v2 `memory.max`, or",
    "`systemd-run --scope -p MemoryMax=`) at which it still finishes within 1.5 x its unlimited time.",
    "`bench/scale.py --shapes SHAPE --stage STAGE ... --floor` prepares the shape's work folder stage by stage,",
    "runs each named stage unlimited, then bisects its floor on a grid (0.25 GB unless `--floor-step` says)",
    "in at most 8 limited runs (`--floor-tries`; 0 keeps the unlimited peaks alone; the table gives the largest",
    "limit that failed: the floor lies above it, at or below the floor column),",
    "each stopped at 1.5 x the unlimited time, starting between its anonymous peak and its RSS peak; the page cache",
    "of the stage's inputs is dropped before every run, so each run reads them from disk. `--memory-limit BYTES`",
    "runs each stage once under BYTES instead (finished or OOM-killed, and how much slower), and `--stage build`",
    "limits `dflash-bot build` as a whole. Run it on a quiet machine: a busy one makes the unlimited time, and so",
    "the 1.5 x bound, noisy. `bench/floors.sh` measures every stage at the 1.7B and 4B shapes and prints the table",
    "for this page.",
]
