"""Build one tiny pair three times on fresh local Hubs and print the spread of the published speed-up (issue 31).

Each round seeds a fresh local Hub with the tiny oracle pair and runs the real job (both draft weight formats
exported, gated, timed with the recipe's interleaved pairs, the format chosen beyond the noise, published), then
reads the published draft's record. Goal: every round's published speed-up within 10 % of the rounds' median, and
the same weight format every time.

    .venv/bin/python bench/repeatability.py [--rounds 3] [--kind oracle] [--budget-s SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The local Hub's client settings, before huggingface_hub is imported (as tests/conftest.py sets them).
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HOME", tempfile.mkdtemp(prefix="bench-repeat-hf-"))
for _secret in ("HF_TOKEN", "HF_READ_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
    os.environ.pop(_secret, None)

from bot.core.naming import DRAFT_WEIGHT_FORMATS, draft_output_repo  # noqa: E402
from bot.core.recipe import load_recipe  # noqa: E402
from bot.hub.client import Hub  # noqa: E402
from bot.hub.transport import configure_client  # noqa: E402
from bot.plan.step import RunOptions  # noqa: E402
from bot.run import demo  # noqa: E402
from bot.run.pipeline import run  # noqa: E402
from hubserver import LocalHub  # noqa: E402

TOKEN = "hf_bench_repeatability"
GOAL_SHARE = 0.10


def one_round(kind: str, budget_s: float | None, work: Path) -> dict:
    """One build on a fresh local Hub: the published format, its speed-up (median, interval, pairs) and the time."""
    recipe = load_recipe()
    if budget_s is not None:
        recipe = recipe.model_copy(
            update={"validation": recipe.validation.model_copy(update={"timing_budget_s": budget_s})}
        )
    seeded = (demo.SeededRepo(demo.TARGET_REPO, kind, "target"), demo.SeededRepo(demo.DRAFT_REPO, kind, "draft"))
    with LocalHub(work / "hub", user="maintainer", token=TOKEN) as server:
        demo.seed(server.url, TOKEN, work / "seed", repos=seeded)
        hub = Hub(server.url, TOKEN)
        started = time.monotonic()
        report = run(recipe, hub, hub, RunOptions(work=work / "run", only=demo.DRAFT_REPO))
        seconds = time.monotonic() - started
        statuses = {o.source: o.status for o in report.outcomes}
        for weight_format in DRAFT_WEIGHT_FORMATS:
            repo = draft_output_repo(recipe.publish, demo.DRAFT_REPO, weight_format)
            built = hub.draft_record(repo) if hub.repo_exists(repo) else None
            if built is not None:
                best = built.validation.best_run
                return {
                    "format": built.draft_weight_format,
                    "k": best.num_assistant_tokens,
                    "speedup": best.speedup,
                    "low": best.speedup_low,
                    "high": best.speedup_high,
                    "pairs": best.pairs,
                    "validate_s": built.resources["validate"].seconds if "validate" in built.resources else None,
                    "build_s": round(seconds, 1),
                    "reason": (built.draft_formats.model_dump() if built.draft_formats else {}).get("reason"),
                }
    raise SystemExit(f"nothing published: {statuses}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kind", default="oracle", help="the tiny pair (tinymodels.TINY_KINDS)")
    parser.add_argument("--budget-s", type=float, default=None, help="validation.timing_budget_s (default: recipe)")
    args = parser.parse_args()
    configure_client("http://127.0.0.1")
    rounds = []
    for index in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="bench-repeat-") as tmp:
            rounds.append(one_round(args.kind, args.budget_s, Path(tmp)))
        print(json.dumps({"round": index + 1, **rounds[-1]}), flush=True)
    speedups = [r["speedup"] for r in rounds]
    median = statistics.median(speedups)
    spread = max(abs(s / median - 1) for s in speedups)
    formats = sorted({r["format"] for r in rounds})
    summary = {
        "median": median,
        "speedups": speedups,
        "max_distance_from_median": round(spread, 4),
        "formats": formats,
        "same_format": len(formats) == 1,
        "goal_met": spread <= GOAL_SHARE and len(formats) == 1,
    }
    print(json.dumps(summary))
    return 0 if summary["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
