"""A mixture-of-experts pair end to end at real width, reduced depth: measured peaks against the plan's estimate.

`dflash-bot build` (export of draft and target, inspection, quality, validation, bundle, as a user runs it) on a
random-weight Qwen3-Coder-30B-A3B shape (`tinymodels.shapes`: hidden 2048, 128 experts of 768, 8 routed, the real
vocabulary) cut to a few decoder layers, measured as a whole (`bot.sandbox.resources.measure`: anonymous and
file-backed peaks of the process tree, disk under the work folder, seconds), against what the plan estimates for
the same bytes from the recipe's `runners.sizing` (the qwen3_moe family's lines, the draft's Qwen3 ones) on this
machine as a class. The stage-by-stage rows and the family fit are `bench/scale.py --shapes NAME@1 NAME@2 NAME@3`;
this is the whole build, exports side by side when they fit. ``--record`` keeps it in docs/scale.json as the
shape's end-to-end row (rendered by `bench/scale.py --report-only`).

    .venv/bin/python bench/moe_pair.py [--shape qwen3-coder-30b-a3b@2] [--work DIR] [--record]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale import RESULTS, folder_name, measure_end_to_end


def estimate(shape: str, root: Path) -> tuple[dict, int, int]:
    """The plan's estimate for the shape's pair on this machine (`bot.plan.sizing.estimate_build`), and its bytes."""
    from bot.core.recipe import load_recipe
    from bot.plan.sizing import BuildTime, estimate_build, local_runner
    from tinymodels.shapes import shape_named

    recipe = load_recipe()
    pair = root / "pair"
    draft = sum(p.stat().st_size for p in (pair / "draft").glob("*.safetensors"))
    target = sum(p.stat().st_size for p in (pair / "target").glob("*.safetensors"))
    # The validation timing budget is the recipe's; `dflash-bot build` here runs the benchmark's short sweep.
    time = BuildTime(formats=1)
    guess = estimate_build(
        draft,
        target,
        local_runner(root),
        recipe.runners.sizing,
        family=shape_named(shape).family,
        time=time,
        headroom=recipe.runners.headroom,
    )
    figures = {"memory": guess.peak_memory_bytes, "disk": guess.peak_disk_bytes, "seconds": guess.seconds}
    return figures, draft, target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen3-coder-30b-a3b@2", help="a MoE shape cut to N layers (NAME@N)")
    parser.add_argument("--work", type=Path, help="parent of the scratch folder (default: the system temp)")
    parser.add_argument("--record", action="store_true", help="keep the run as the shape's end-to-end row")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix=f"bench-moe-{folder_name(args.shape)}-", dir=args.work))
    try:
        measured = measure_end_to_end(args.shape, root)
        guess, draft, target = estimate(args.shape, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.shape}: draft {draft / 1e9:.2f} GB, target {target / 1e9:.2f} GB")
    print("| figure | plan's estimate | measured | estimate / measured |")
    print("|---|---|---|---|")
    for name, key, scale in (
        ("anonymous peak GB", "peak_anon_bytes", 1e9),
        ("disk peak GB", "peak_disk_bytes", 1e9),
        ("seconds", "seconds", 1),
    ):
        mine = guess[{"peak_anon_bytes": "memory", "peak_disk_bytes": "disk", "seconds": "seconds"}[key]]
        print(f"| {name} | {mine / scale:.2f} | {measured[key] / scale:.2f} | {mine / measured[key]:.3f} |")
    if args.record:
        results = json.loads(RESULTS.read_text())
        if args.shape not in results:
            raise SystemExit(f"measure {args.shape} stage by stage first (bench/scale.py --shapes {args.shape})")
        results[args.shape]["end_to_end"] = measured
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
