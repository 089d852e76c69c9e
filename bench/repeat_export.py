"""The spread of one stage's figures: the target export of a shape run N times on one checkpoint.

`bench/scale.py` measures each stage once per shape; a figure measured once is not a figure. This writes the
checkpoint once (the `download` and `copy` stages, as there), then runs the target export N times, each inside
`bot.sandbox.resources.measure`, and keeps every run's seconds and peaks in docs/scale_repeats.json (a run updates
the shapes it measured). The Qwen3.5-27B cuts' runs there are why the recipe's qwen3_5 export line is what it is
(workflows/dflash.yaml).

    .venv/bin/python bench/repeat_export.py --repeats 3 --shapes qwen3.5-27b@2 qwen3.5-27b@4 [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT
from bench.scale import figures
from bench.stages import canonical_output, run_stage
from bot.sandbox.resources import measure

RESULTS = ROOT / "docs" / "scale_repeats.json"
KEPT = ("seconds", "peak_rss_bytes", "peak_anon_bytes", "peak_file_bytes")


def repeat_target_export(shape: str, root: Path, repeats: int) -> list[dict]:
    """Every run's seconds and peaks, the checkpoint written once."""
    work = root / "work"
    work.mkdir(parents=True)
    for stage in ("download", "copy"):
        run_stage(stage, shape, work, canonical_output(stage, work) or work / stage, work)
    runs = []
    out = canonical_output("target export", work) or work / "target export"
    for index in range(repeats):
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(work / "tmp", ignore_errors=True)
        with measure(work) as measured:
            run_stage("target export", shape, work, out, work)
        figured = figures(measured)
        kept = {key: figured[key] for key in KEPT}
        runs.append(kept | {"load_average": round(os.getloadavg()[0], 1)})
        shown = ", ".join(f"{key} {value / 1e9:.2f} GB" for key, value in kept.items() if key.endswith("bytes"))
        print(f"{shape} run {index + 1}: {kept['seconds']:.1f} s, {shown}", flush=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", required=True, help="shapes to measure (NAME or NAME@N)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, help="parent of the scratch folder (default: the system temp)")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for shape in args.shapes:
        with tempfile.TemporaryDirectory(dir=args.work) as scratch:
            runs = repeat_target_export(shape, Path(scratch), args.repeats)
        results[shape] = {"target export": runs, "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
