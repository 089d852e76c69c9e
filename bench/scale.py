"""What a real-size build costs: the bot's own stages on random-weight checkpoints of real Qwen3 shapes.

For each shape (``make-tiny --shape``), the stages run one after the other as the bot runs them, each inside
`bot.sandbox.resources.measure`: the checkpoint written in place (standing in for the download: same files, same bytes),
the token-free working copy, the draft export, the target export, the IR inspection, the quality step (the int4
target against its original weights, on the recipe's prompts and length, as a build runs it), the GenAI validation
and the bundle. Each stage records wall time, peak RSS of this process and all its children, peak disk under the work
folder, and output bytes; validation adds GenAI seconds per generated token, plain and speculative.

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

from bench.common import BIN, ROOT, write_recipe
from bot.sandbox.resources import disk_used, measure

DEFAULT_SHAPES = ("qwen3-0.6b", "qwen3-1.7b")
RESULTS = ROOT / "docs" / "scale.json"
REPORT = ROOT / "docs" / "scale.md"
STAGES = ("download", "copy", "draft export", "target export", "inspect", "quality", "validate", "bundle")
PROMPTS = ["Explain speculative decoding in one paragraph.", "Write a short poem about the sea.",
           "List three prime numbers and say why they are prime."]


def measure_shape(shape: str, root: Path, *, recipe_validation: bool = False) -> dict:
    """Run every stage on one shape under `root`; returns the figures (see the module docstring)."""
    from bot.build.bundle import write_draft_folder, write_target_folder
    from bot.build.check_ir import inspect_draft, inspect_target
    from bot.build.export import TASK_LLM, TASK_VLM, ExportRequest, export_model
    from bot.build.quality import measure_quality
    from bot.build.validate import validate_pair
    from bot.core.profiles import toolchain_for
    from bot.core.recipe import ValidationSettings, load_recipe
    from bot.discover.checkpoints import classify_draft, load_config, read_target
    from bot.discover.fetch import safe_copy

    recipe = load_recipe()
    work = root / "work"
    work.mkdir(parents=True)
    stages: dict[str, dict] = {}

    def record(name: str, m, before: int, **extra) -> None:
        stages[name] = {**m.result.as_dict(), "disk_before_bytes": before, **extra}
        r = m.result
        print(f"  {name:<14} {r.seconds:7.1f}s  rss {r.peak_rss_bytes / 1e9:6.2f} GB  disk {r.peak_disk_bytes / 1e9:6.2f} GB"
              f"  out {r.output_bytes / 1e9:6.2f} GB", flush=True)

    # The checkpoint is written in a child process (torch stays out of this one), into the work folder: the
    # bytes a download would leave there.
    download = work / "download"
    before = disk_used(work)
    with measure(work, output=download) as m:
        subprocess.run([str(BIN / "dflash-bot"), "make-tiny", "--shape", shape, str(download)], check=True,
                       stdout=subprocess.DEVNULL)
    record("download", m, before, note="generated in place")
    draft_bytes = _safetensors_bytes(download / "draft")
    target_bytes = _safetensors_bytes(download / "target")

    before = disk_used(work)
    with measure(work, output=work / "src") as m:
        draft_src = safe_copy(download / "draft", work / "src" / "draft")
        target_src = safe_copy(download / "target", work / "src" / "target")
    record("copy", m, before)

    model_type = json.loads((target_src / "config.json").read_text())["model_type"]
    toolchain = toolchain_for(model_type)
    draft_spec, target_spec = classify_draft(load_config(draft_src)), read_target(load_config(target_src))
    ir = work / "ir"
    requests = {"draft export": ExportRequest("draft", draft_src, ir / "draft", TASK_LLM, trust_remote_code=True),
                "target export": ExportRequest("target", target_src, ir / "target",
                                               TASK_VLM if target_spec.is_vlm else TASK_LLM, trust_remote_code=False)}
    # optimum-cli writes the floating-point IR under TMPDIR before compressing it: keep that on the measured disk.
    (work / "tmp").mkdir()
    os.environ["TMPDIR"] = str(work / "tmp")
    try:
        for name, request in requests.items():
            before = disk_used(work)
            with measure(work, output=request.output) as m:
                export_model(request, recipe.export, log_dir=work / "logs", home=work / "hf",
                             python=toolchain.python)
            record(name, m, before)
    finally:
        os.environ.pop("TMPDIR")

    before = disk_used(work)
    with measure(work) as m:
        target_report = inspect_target(ir / "target", target_spec, draft_spec)
        inspect_draft(ir / "draft", draft_spec)
    record("inspect", m, before, attention_layers=target_report.attention_layers)

    # After the exports and the inspection, as in a build: the recipe's prompts and length.
    before = disk_used(work)
    with measure(work) as m:
        quality = measure_quality(target_src, ir / "target", recipe.validation.prompts,
                                  recipe.validation.max_new_tokens, work=work / "quality", python=toolchain.python)
    record("quality", m, before, reference_dtype=quality.reference_dtype, tokens=quality.tokens,
           top1_agreement=quality.top1_agreement)

    if recipe_validation:
        settings = recipe.validation.model_copy(update={"min_accept_length": 1.0})
    else:
        settings = ValidationSettings(prompts=PROMPTS, max_new_tokens=16, num_assistant_tokens=[3], repeats=1,
                                      min_accept_length=1.0, timeout_s=3600)
    before = disk_used(work)
    with measure(work) as m:
        report = validate_pair(ir / "target", ir / "draft", settings, work=work / "validate", is_vlm=target_spec.is_vlm,
                               python=toolchain.python)
    run = next(r for r in report.runs if r.num_assistant_tokens == settings.num_assistant_tokens[0])
    record("validate", m, before, plain_s_per_token=round(1 / run.baseline_tokens_per_s, 4),
           speculative_s_per_token=round(1 / run.tokens_per_s, 4), accept_length=run.accept_length,
           num_assistant_tokens=run.num_assistant_tokens, lossless=report.lossless)
    print(f"  GenAI: plain {1 / run.baseline_tokens_per_s:.3f} s/token, speculative (k=3) "
          f"{1 / run.tokens_per_s:.3f} s/token, accept length {run.accept_length:.2f}", flush=True)

    before = disk_used(work)
    with measure(work, output=work / "bundle") as m:
        write_draft_folder(ir / "draft", draft_src / "config.json", work / "bundle" / "draft")
        write_target_folder(ir / "target", work / "bundle" / "target", target_src)
    record("bundle", m, before)
    quality_s, others_s = quality_and_other_seconds(stages)
    print(f"  quality step: {quality_s:.1f} s, {quality_s / others_s:.0%} added to the other stages' "
          f"{others_s:.1f} s (download excluded)", flush=True)
    return {"shape": shape, "draft_bytes": draft_bytes, "target_bytes": target_bytes, "stages": stages,
            "scratch_in_stages": True, "recipe_validation": recipe_validation,
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average": round(os.getloadavg()[1], 1)}


def quality_and_other_seconds(stages: dict[str, dict]) -> tuple[float, float]:
    """The quality step's seconds and the other stages' (the download excluded: here it is generation time)."""
    others = sum(stage["seconds"] for name, stage in stages.items() if name not in ("download", "quality"))
    return stages["quality"]["seconds"], others


def measure_export_scratch(shape: str, root: Path) -> dict:
    """Disk each export holds beyond its IR: optimum-cli writes the floating-point IR to a temporary folder (under
    TMPDIR) before compressing it into the output, so TMPDIR is put under the measured work folder here."""
    from bot.build.export import TASK_LLM, ExportRequest, export_model
    from bot.core.recipe import load_recipe
    from bot.discover.fetch import safe_copy

    pair = root / "pair"
    subprocess.run([str(BIN / "dflash-bot"), "make-tiny", "--shape", shape, str(pair)], check=True,
                   stdout=subprocess.DEVNULL)
    work = root / "work"
    (work / "tmp").mkdir(parents=True)
    os.environ["TMPDIR"] = str(work / "tmp")  # the export children inherit it (untrusted_env keeps it)
    scratch = {}
    try:
        for role, remote in (("draft", True), ("target", False)):
            src = safe_copy(pair / role, work / "src" / role)
            before = disk_used(work)
            with measure(work, output=work / "ir" / role) as m:
                export_model(ExportRequest(role, src, work / "ir" / role, TASK_LLM, trust_remote_code=remote),
                             load_recipe().export, log_dir=work / "logs", home=work / "hf")
            scratch[role] = max(0, m.result.peak_disk_bytes - before - m.result.output_bytes)
            print(f"  {role} export scratch {scratch[role] / 1e9:6.2f} GB (peak {m.result.peak_disk_bytes / 1e9:.2f} GB)",
                  flush=True)
    finally:
        os.environ.pop("TMPDIR")
    return scratch


def measure_end_to_end(shape: str, root: Path) -> dict:
    """`dflash-bot build` on one shape as a user runs it (exports side by side), measured as a whole."""
    pair = root / "pair"
    subprocess.run([str(BIN / "dflash-bot"), "make-tiny", "--shape", shape, str(pair)], check=True,
                   stdout=subprocess.DEVNULL)
    work = root / "work"
    work.mkdir()
    env = {**os.environ, "TMPDIR": str(work)}
    # The validation sweep's length changes time, not memory: one k, one repeat, as in measure_shape.
    recipe = write_recipe(root / "recipe.yaml", num_assistant_tokens=[3], repeats=1, max_new_tokens=16,
                          min_accept_length=1.0)
    with measure(work, output=work / "bundle") as m:
        done = subprocess.run([str(BIN / "dflash-bot"), "build", "--draft", str(pair / "draft"), "--target",
                               str(pair / "target"), "--out", str(work / "bundle"), "--recipe", str(recipe)],
                              env=env, capture_output=True, text=True)
    # A random-weight draft fails the acceptance gate (exit 2) after a complete build; anything else is an error.
    if done.returncode not in (0, 2) or not (work / "bundle" / "openvino_export.json").is_file():
        raise SystemExit(f"dflash-bot build failed ({done.returncode}):\n{done.stderr[-3000:]}")
    r = m.result
    print(f"  end to end     {r.seconds:7.1f}s  rss {r.peak_rss_bytes / 1e9:6.2f} GB  disk "
          f"{r.peak_disk_bytes / 1e9:6.2f} GB (the working copy of the sources counted)", flush=True)
    return r.as_dict()


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


def fit(results: dict[str, dict]) -> dict[str, tuple[float, int]]:
    """Fit every line of `recipe.SizingModel` on the measured shapes."""
    export_memory: dict[str, list] = {"draft": [], "target": []}
    from bot.build.quality import reference_memory_bytes

    ir_bytes, scratch, validate_memory, inspect_memory, quality_memory = [], [], [], [], []
    for r in results.values():
        for role, n in (("draft", r["draft_bytes"]), ("target", r["target_bytes"])):
            stage = r["stages"][f"{role} export"]
            export_memory[role].append((n, stage["peak_rss_bytes"]))
            ir_bytes.append((n, stage["output_bytes"]))
            if "export_scratch" in r:  # measured with TMPDIR under the work folder (measure_export_scratch)
                scratch.append((n, r["export_scratch"][role]))
            elif r.get("scratch_in_stages") or not any("export_scratch" in other for other in results.values()):
                scratch.append((n, max(0, stage["peak_disk_bytes"] - stage["disk_before_bytes"]
                                       - stage["output_bytes"])))
        validate_memory.append((r["draft_bytes"] + r["target_bytes"], r["stages"]["validate"]["peak_rss_bytes"]))
        inspect_memory.append((r["target_bytes"], r["stages"]["inspect"]["peak_rss_bytes"]))
        if "quality" in r["stages"]:
            quality_memory.append((reference_memory_bytes(r["target_bytes"]), r["stages"]["quality"]["peak_rss_bytes"]))
    return {"draft_export_memory": fit_line(export_memory["draft"]),
            "target_export_memory": fit_line(export_memory["target"]), "validate_memory": fit_line(validate_memory),
            "inspect_memory": fit_line(inspect_memory), "ir_bytes": fit_line(ir_bytes),
            "export_scratch_disk": fit_line(scratch),
            **({"quality_memory": fit_line(quality_memory)} if quality_memory else {})}


def comparisons(results: dict[str, dict]) -> list[dict]:
    """The recipe's estimate against the measured peaks, for the schedule the benchmark ran (sequential, sources
    kept)."""
    from bot.core.recipe import load_recipe
    from bot.plan.sizing import estimate_schedule

    model = load_recipe().runners.sizing
    rows = []
    for r in results.values():
        if "end_to_end" in r:
            e2e = r["end_to_end"]
            estimate = estimate_schedule(r["draft_bytes"], r["target_bytes"], model, parallel_exports=True,
                                         remove_sources=False)
            rows.append({"shape": r["shape"] + " (dflash-bot build, parallel exports)",
                         "estimated_rss": estimate.peak_memory_bytes, "measured_rss": e2e["peak_rss_bytes"],
                         "rss_ratio": estimate.peak_memory_bytes / e2e["peak_rss_bytes"],
                         "estimated_disk": estimate.peak_disk_bytes, "measured_disk": e2e["peak_disk_bytes"],
                         "disk_ratio": estimate.peak_disk_bytes / e2e["peak_disk_bytes"]})
        measured_rss = max(s["peak_rss_bytes"] for s in r["stages"].values() if s is not r["stages"]["download"])
        measured_disk = max(s["peak_disk_bytes"] for s in r["stages"].values())
        scratch = r.get("export_scratch")
        if scratch is None and not r.get("scratch_in_stages"):
            # Measured before TMPDIR was kept under the work folder: the exports' temporary IR is missing.
            disk_note = "export scratch not measured"
        else:
            disk_note = ""
            if scratch is not None and not r.get("scratch_in_stages"):
                measured_disk = max(measured_disk, *(r["stages"][f"{role} export"]["peak_disk_bytes"] + scratch[role]
                                                     for role in ("draft", "target")))
        estimate = estimate_schedule(r["draft_bytes"], r["target_bytes"], model, parallel_exports=False,
                                     remove_sources=False)
        rows.append({"shape": r["shape"] + " (stages one by one)", "estimated_rss": estimate.peak_memory_bytes, "measured_rss": measured_rss,
                     "rss_ratio": estimate.peak_memory_bytes / measured_rss,
                     "estimated_disk": estimate.peak_disk_bytes, "measured_disk": measured_disk,
                     "disk_ratio": estimate.peak_disk_bytes / measured_disk, "disk_note": disk_note})
    return rows


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown CPU")
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{cpu}, {os.cpu_count()} cores, {memory / 2**30:.0f} GiB memory, {platform.system()} {platform.release()}"


def toolchain() -> str:
    from importlib.metadata import version

    names = ("optimum-intel", "nncf", "openvino", "openvino-genai", "transformers", "torch")
    return ", ".join(f"{n} {version(n)}" for n in names)


def write_report(results: dict[str, dict], fits: dict, rows: list[dict], info: dict) -> str:
    def gb(n: int) -> str:
        return f"{n / 1e9:.2f}"

    lines = [
        "# What a real-size build costs (measured)",
        "",
        "Written by `bench/scale.py` (do not edit by hand; rerun it). Random-weight bf16 checkpoints with the real",
        "shapes (`dflash-bot make-tiny --shape`), built stage by stage with the bot's own stage functions, one after",
        "the other. RSS is the peak of the bot process plus all its children (sampled every 0.2 s); disk is the peak",
        "allocated under the build's work folder (the checkpoint as downloaded, the working copy (hard links), the IRs",
        "and the bundle). The `download` row is the checkpoint being written in place by a separate process (its time",
        "is generation time, not a download).",
        "",
        f"Machine: {info['machine']}.  ",
        f"Toolchain: {info['toolchain']}.  ",
        "Measured: " + ", ".join(f"{r['shape']} ({r['measured_at']}, 5-minute load average "
                                 f"{r.get('load_average', 'not recorded')})" for r in results.values()) + ".",
        "",
        "Seconds depend on what else the machine runs (the load average says how busy it was; on a shared 2-core",
        "machine they are upper bounds); memory and disk do not. OpenVINO maps an IR's weights file, so the `inspect`",
        "row counts only the pages it reads.",
        "",
        "## Per stage",
        "",
        "| shape | draft GB | target GB | stage | seconds | peak RSS GB | peak disk GB | output GB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results.values():
        for name in (name for name in STAGES if name in r["stages"]):
            s = r["stages"][name]
            lines.append(f"| {r['shape']} | {gb(r['draft_bytes'])} | {gb(r['target_bytes'])} | {name} | "
                         f"{s['seconds']:.1f} | {gb(s['peak_rss_bytes'])} | {gb(s['peak_disk_bytes'])} | "
                         f"{gb(s['output_bytes'])} |")
    lines += ["", "## GenAI decoding speed (validation stage, default CPU properties, k = 3)", "",
              "| shape | plain s/token | speculative s/token | accept length | lossless |", "|---|---|---|---|---|"]
    for r in results.values():
        v = r["stages"]["validate"]
        lines.append(f"| {r['shape']} | {v['plain_s_per_token']:.3f} | {v['speculative_s_per_token']:.3f} | "
                     f"{v['accept_length']:.2f} | {v['lossless']} |")
    with_quality = [r for r in results.values() if "quality" in r["stages"]]
    if with_quality:
        lines += ["", "## The quality step's share of the build (goal: at most 25 % added at the 4B shape)", "",
                  "The quality step (`bot/build/quality.py`: the original's greedy continuation of every prompt, decoded",
                  "as one batch, then the int4 IR's own and its teacher-forced logits) on the recipe's prompts and",
                  "length, against the other stages' seconds (the download row excluded: here it is generation time).",
                  "With the shortened validation the share is an upper bound; `--recipe-validation` rows use the",
                  "recipe's sweep for one draft weight format (the default recipe measures two, int4 and int8, so a",
                  "real build validates about twice as long). The last column compares it with the target export.",
                  "",
                  "| shape | validation | reference dtype | quality s | other stages s | added | quality peak RSS GB "
                  "| quality / target export |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in with_quality:
            q = r["stages"]["quality"]
            seconds, others = quality_and_other_seconds(r["stages"])
            sweep = "recipe's sweep" if r.get("recipe_validation") else "shortened"
            lines.append(f"| {r['shape']} | {sweep} | {q.get('reference_dtype')} | {seconds:.1f} | "
                         f"{others:.1f} | {seconds / others:.0%} | {gb(q['peak_rss_bytes'])} | "
                         f"{seconds / r['stages']['target export']['seconds']:.2f} |")
    scratched = [r for r in results.values() if "export_scratch" in r]
    if scratched:
        lines += ["", "## Export scratch (`--scratch`: optimum-cli's temporary floating-point IR, TMPDIR under the work "
                  "folder)", "", "| shape | draft export GB | target export GB |", "|---|---|---|"]
        lines += [f"| {r['shape']} | {gb(r['export_scratch']['draft'])} | {gb(r['export_scratch']['target'])} |"
                  for r in scratched]
    e2e = [r for r in results.values() if "end_to_end" in r]
    if e2e:
        lines += ["", "## End to end (`--end-to-end`: `dflash-bot build`, exports side by side)", "",
                  "| shape | seconds | peak RSS GB | peak disk GB |", "|---|---|---|---|"]
        lines += [f"| {r['shape']} | {r['end_to_end']['seconds']:.1f} | {gb(r['end_to_end']['peak_rss_bytes'])} | "
                  f"{gb(r['end_to_end']['peak_disk_bytes'])} |" for r in e2e]
    lines += ["", "Random weights accept almost nothing, so the speculative figure is the cost of a draft that never "
              "helps; it is not the speed-up a trained draft gets.", "",
              "## Fitted model (`a × bytes + b`; the constants of `runners.sizing` in the recipe)", "",
              "| line | bytes it reads | a | b (GB) |", "|---|---|---|---|"]
    reads = {"draft_export_memory": "draft safetensors", "target_export_memory": "target safetensors", "validate_memory": "draft + target safetensors",
             "inspect_memory": "target safetensors", "ir_bytes": "one model's safetensors",
             "export_scratch_disk": "one model's safetensors",
             "quality_memory": "the original in memory (3 x target safetensors in f32, else 1 x)"}
    for name, (a, b) in fits.items():
        lines.append(f"| {name} | {reads[name]} | {a:.4f} | {b / 1e9:.3f} |")
    lines += ["", "As `runners.sizing` in a recipe (workflows/dflash.yaml carries these):", "", "```yaml",
              "  sizing:"]
    lines += [f"    {name}: {{a: {a}, b: {b}}}" for name, (a, b) in fits.items()]
    lines += ["```"]
    lines += ["", "## Estimate against measurement (sources kept; the stage rows run the exports one after the other)", "",
              "| shape | estimated peak RSS GB | measured | ratio | estimated peak disk GB | measured | ratio |",
              "|---|---|---|---|---|---|---|"]
    for row in rows:
        disk = (f"{gb(row['estimated_disk'])} | {gb(row['measured_disk'])} | {row['disk_ratio']:.3f}"
                if not row.get("disk_note") else f"{gb(row['estimated_disk'])} | - | {row['disk_note']}")
        lines.append(f"| {row['shape']} | {gb(row['estimated_rss'])} | {gb(row['measured_rss'])} | "
                     f"{row['rss_ratio']:.3f} | {disk} |")
    ratios = [(row["rss_ratio"], row["shape"], "memory") for row in rows]
    ratios += [(row["disk_ratio"], row["shape"], "disk") for row in rows if not row.get("disk_note")]
    worst = max(ratios, key=lambda item: abs(item[0] - 1))
    lines += ["", f"Worst estimate/measured ratio: {worst[0]:.3f} ({worst[1]}, {worst[2]}); goal: within 0.85-1.15.",
              "The build-peak lines are fitted on these same shapes (three points, two constants per line), so the",
              "stage-by-stage rows check the fit and its composition, not a prediction for an unseen shape."]
    if e2e:
        lines += ["The end-to-end rows are the bot's own `dflash-bot build` with its exports side by side, which the",
                  "model over-estimates (the two exports' peaks do not coincide)."]
    lines += ["", "Export scratch: optimum-cli writes the floating-point IR to a temporary folder (TMPDIR) before it",
              "compresses it into the output (about 1.0 x the model's bf16 bytes); the stage rows keep TMPDIR under",
              "the measured work folder, so their disk includes it."]
    if any(not r.get("scratch_in_stages") for r in results.values()):
        lines += ["Rows measured before that (no `scratch_in_stages` in docs/scale.json) add the scratch measured",
                  "separately by `--scratch`, or say it was not measured."]
    lines += [""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--with-4b", action="store_true", help="also measure Qwen3-4B (~12 GB memory, minutes)")
    parser.add_argument("--shapes", nargs="*", help=f"shapes to measure (default: {' '.join(DEFAULT_SHAPES)})")
    parser.add_argument("--work", type=Path, help="parent of the scratch folder (default: the system temp)")
    parser.add_argument("--end-to-end", nargs="*", default=[], metavar="SHAPE",
                        help="also run `dflash-bot build` on these shapes and compare the parallel-export estimate")
    parser.add_argument("--scratch", nargs="*", default=[], metavar="SHAPE",
                        help="measure the exports' temporary disk (TMPDIR) on these shapes")
    parser.add_argument("--recipe-validation", action="store_true",
                        help="validate with the recipe's sweep (k values, repeats, length) instead of the short one")
    parser.add_argument("--report-only", action="store_true", help="refit and rewrite docs/scale.md from scale.json")
    args = parser.parse_args()
    shapes = list(DEFAULT_SHAPES if args.shapes is None else args.shapes) + (["qwen3-4b"] if args.with_4b else [])
    results: dict[str, dict] = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    info = {"machine": machine(), "toolchain": toolchain()}
    if not args.report_only:
        for shape in shapes:
            print(f"{shape}:", flush=True)
            root = Path(tempfile.mkdtemp(prefix=f"bench-scale-{shape}-", dir=args.work))
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
            root = Path(tempfile.mkdtemp(prefix=f"bench-scale-scratch-{shape}-", dir=args.work))
            try:
                results[shape]["export_scratch"] = measure_export_scratch(shape, root)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            RESULTS.write_text(json.dumps(results, indent=2) + "\n")
        for shape in args.end_to_end:
            if shape not in results:
                raise SystemExit(f"measure {shape} stage by stage first (--shapes {shape})")
            print(f"{shape}, end to end:", flush=True)
            root = Path(tempfile.mkdtemp(prefix=f"bench-scale-e2e-{shape}-", dir=args.work))
            try:
                results[shape]["end_to_end"] = measure_end_to_end(shape, root)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    fits = fit(results)
    rows = comparisons(results)
    print("\nfitted (a, b):")
    for name, (a, b) in fits.items():
        print(f"  {name:<20} a={a:.4f}  b={b / 1e9:.3f} GB")
    print("\nestimate / measured:")
    for row in rows:
        print(f"  {row['shape']:<12} rss {row['estimated_rss'] / 1e9:6.2f} / {row['measured_rss'] / 1e9:6.2f} GB "
              f"= {row['rss_ratio']:.3f}   disk {row['estimated_disk'] / 1e9:6.2f} / "
              f"{row['measured_disk'] / 1e9:6.2f} GB = {row['disk_ratio']:.3f} {row.get('disk_note', '')}")
    REPORT.write_text(write_report(results, fits, rows, info))
    print(f"\nwrote {REPORT.relative_to(ROOT)} and {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
