"""A new draft for a target the bot already published: the build with the published target reused (its int4 IR
downloaded, no target export, no quality step) against the first, full build of the same pair, at a real shape.

Both are `dflash-bot run` processes against one local Hub (in this process, seeded with `LocalHub.seed_folder`),
timed as wholes; peak RSS is the whole process tree's (the token-free builder and every export and GenAI child);
bytes downloaded are what the Hub served. Goal (issue 10): the reuse run takes <= 0.5 of the full build's time.

    .venv/bin/python bench/target_reuse.py [--shape qwen3-1.7b] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, bot_env, print_json
from bot.sandbox.resources import PeakSampler
from hubserver import LocalHub
from tinymodels.shapes import SHAPES, make_shape

TOKEN = "hf_bench_reuse_0123456789"


def light_recipe(path: Path) -> Path:
    """The default recipe with one k and one draft format (the draft's share of both runs stays small and equal,
    so the ratio shows what the target costs), and no acceptance minimum."""
    import yaml

    recipe = yaml.safe_load((Path(__file__).resolve().parent.parent / "workflows" / "dflash.yaml").read_text())
    # Random weights accept nothing: the acceptance gate (a real draft's) would refuse to publish either build.
    recipe["validation"].update({"num_assistant_tokens": [3], "repeats": 1, "min_accept_length": 1.0})
    recipe["export"]["draft_weight_formats"] = ["int4"]
    path.write_text(yaml.safe_dump(recipe))
    return path


def bot_run(hub: LocalHub, source: str, recipe: Path, work: Path) -> dict:
    """One `dflash-bot run --only source`: wall seconds, peak RSS of its tree, bytes the Hub served, its report."""
    hub.clear_requests()
    report = work / f"report-{source.split('/')[-1]}.json"
    env = bot_env(HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN)
    command = [
        str(BIN / "dflash-bot"),
        "run",
        "--only",
        source,
        "--recipe",
        str(recipe),
        "--work",
        str(work / "w"),
        "--report",
        str(report),
    ]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with PeakSampler(process.pid) as sampler:
        output, _ = process.communicate()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"run failed ({process.returncode}):\n{output[-4000:]}")
    outcome = next(o for o in json.loads(report.read_text())["outcomes"] if o["source"] == source)
    if outcome["status"] != "published":
        raise SystemExit(f"{source} was not published: {outcome}\n{output[-4000:]}")
    served = sum(r.get("bytes_out", 0) for r in hub.requests() if r.get("method") == "GET")
    return {
        "seconds": round(seconds, 1),
        "peak_rss_gb": round(sampler.peak_rss_bytes / 1e9, 2),
        "downloaded_gb": round(served / 1e9, 2),
    }


def published_record(hub: LocalHub, repo: str) -> dict:
    from bot.hub.client import Hub

    data = Hub(hub.url, TOKEN).read_file(repo, "openvino_export.json")
    assert data is not None, f"{repo} has no openvino_export.json"
    return json.loads(data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="qwen3-1.7b", choices=sorted(SHAPES))
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-reuse-", dir=args.work) as tmp:
        work = Path(tmp)
        shape = SHAPES[args.shape]
        print(f"writing a random-weight {args.shape} pair ...", file=sys.stderr)
        pair = make_shape(args.shape, work / "pair")
        target_repo = shape.target_repo
        name = target_repo.split("/")[1]
        first, second = f"z-lab/{name}-DFlash-b16", f"z-lab/{name}-DFlash-b16-v2"
        recipe = light_recipe(work / "recipe.yaml")
        with LocalHub(work / "hub", "bench", TOKEN) as hub:
            hub.seed_folder(target_repo, pair.target)
            hub.seed_folder(first, pair.draft)
            print(f"full build of {first} and {target_repo} ...", file=sys.stderr)
            full = bot_run(hub, first, recipe, work)
            # A new draft repo for the same target (the same weights suffice: the build does the same work).
            hub.seed_folder(second, pair.draft)
            print(f"build of {second} with the published target reused ...", file=sys.stderr)
            reused = bot_run(hub, second, recipe, work)
            first_record = published_record(hub, f"OpenVINO-drafts/{name}-DFlash-b16-int4-ov")
            second_record = published_record(hub, f"OpenVINO-drafts/{name}-DFlash-b16-v2-int4-ov")
    if not second_record["export"].get("target_reused_from"):
        raise SystemExit("the second build did not reuse the published target")
    stages = first_record["resources"]
    quality_s = (stages.get("quality") or {}).get("seconds") or 0.0
    print_json(
        {
            "shape": args.shape,
            "full_build": {**full, "export_target_s": stages["export-target"]["seconds"], "quality_s": quality_s},
            "reused_target": {**reused, "reused_from": second_record["export"]["target_reused_from"]},
            "ratio_time": round(reused["seconds"] / full["seconds"], 3),
            "ratio_time_without_quality": round(reused["seconds"] / (full["seconds"] - quality_s), 3),
            "ratio_peak_rss": round(reused["peak_rss_gb"] / full["peak_rss_gb"], 3),
            "ratio_downloaded": round(reused["downloaded_gb"] / full["downloaded_gb"], 3),
            "goal": "ratio_time <= 0.5",
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
