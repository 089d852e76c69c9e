"""One `dflash-bot run` building two drafts that share a target, against the plain per-draft sequence
(optimum-cli target + optimum-cli draft + a GenAI lossless script, once per draft). Goal: ratio <= 0.7.

It also runs the bot once per draft (two runs, each on a Hub holding the target and that one draft: the target
exported and measured twice): the like-for-like figure for what sharing the target saves, since the plain path
does none of the bot's quality step, sweep, gates or publishing.

The bot runs the recipe's own sweep and gates and its quality step. Its drafts are exported in the plain path's
format, int4, by default, so both sides deliver the same IRs; `--draft-formats int4 int8` measures the default
recipe's two draft formats (twice the draft exports and validations the plain path makes).

    .venv/bin/python bench/shared_target.py [--draft-formats int4 [int8]]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, bot_env, plain_pair, print_json, timed, write_recipe
from bench.hub_bench import local_hub
from bot.run import demo
from tinymodels import make_tiny

SECOND_DRAFT = "z-lab/Qwen3-Tiny-DFlash-b16-v2"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--draft-formats",
        nargs="+",
        choices=["int4", "int8"],
        default=["int4"],
        help="the recipe's export.draft_weight_formats (default: int4, the plain path's)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-shared-") as tmp:
        work = Path(tmp)
        # The recipe's own sweep, so the bot does all the validation it always does.
        recipe = write_recipe(work / "recipe.yaml")
        data = yaml.safe_load(recipe.read_text())
        data["export"]["draft_weight_formats"] = args.draft_formats
        recipe.write_text(yaml.safe_dump(data))
        pair = make_tiny("dflash", work / "pair", target_repo=demo.TARGET_REPO)
        plain = 0.0
        for index in range(2):
            (work / f"plain-{index}").mkdir()
            plain += plain_pair(pair.target, pair.draft, work / f"plain-{index}")
        with local_hub(work / "hub") as (url, token):
            seeded = (
                demo.SeededRepo(demo.TARGET_REPO, "dflash", "target"),
                demo.SeededRepo(demo.DRAFT_REPO, "dflash", "draft"),
                demo.SeededRepo(SECOND_DRAFT, "dflash", "draft"),
            )
            demo.seed(url, token, work / "seed", seeded)
            env = bot_env(HF_ENDPOINT=url, HF_TOKEN=token)
            bot = timed(
                [
                    str(BIN / "dflash-bot"),
                    "run",
                    "--recipe",
                    str(recipe),
                    "--work",
                    str(work / "w"),
                    "--report",
                    str(work / "report.json"),
                ],
                env=env,
            )
            report = json.loads((work / "report.json").read_text())
            published = sorted(o["source"] for o in report["outcomes"] if o["status"] == "published")
            if published != sorted([demo.DRAFT_REPO, SECOND_DRAFT]):
                raise SystemExit(f"expected both drafts published, got {report['outcomes']}")
            actions = actions_path(work, recipe, env)
        per_draft = bot_per_draft(work, recipe)
        recipe_text = recipe.read_text()
    formats = yaml.safe_load(recipe_text)["export"]["draft_weight_formats"]
    print_json(
        {
            "drafts": 2,
            "draft_weight_formats": formats,
            "shared_target": demo.TARGET_REPO,
            "bot_run_s": round(bot, 1),
            "plain_per_draft_s": round(plain, 1),
            "ratio_bot_over_plain": round(bot / plain, 3),
            "goal": "<= 0.7",
            "bot_one_draft_per_run_s": round(per_draft, 1),
            "ratio_shared_over_one_per_run": round(bot / per_draft, 3),
            "bot_includes": "discover, plan, download, export, IR checks, lossless + "
            "acceptance gates, k sweep [3, 7, 15], publish of 3 repos with cards",
            "actions_path": actions,
        }
    )
    return 0


def bot_per_draft(work: Path, recipe: Path) -> float:
    """The bot without sharing: one `run` per draft, each on its own Hub holding the target and that draft."""
    seconds = 0.0
    for index, draft in enumerate((demo.DRAFT_REPO, SECOND_DRAFT)):
        with local_hub(work / f"hub-alone-{index}") as (url, token):
            demo.seed(
                url,
                token,
                work / f"seed-alone-{index}",
                (demo.SeededRepo(demo.TARGET_REPO, "dflash", "target"), demo.SeededRepo(draft, "dflash", "draft")),
            )
            seconds += timed(
                [str(BIN / "dflash-bot"), "run", "--recipe", str(recipe), "--work", str(work / f"w-alone-{index}")],
                env=bot_env(HF_ENDPOINT=url, HF_TOKEN=token),
            )
    return seconds


def actions_path(work: Path, recipe: Path, env: dict) -> dict:
    """The Actions fan-out on the same Hub: `plan --matrix --force` (both drafts again), then the build job of each
    matrix entry as watch.yml runs it; every export process writes one log, so the logs count the exports."""
    plan_file = work / "plan.json"
    timed(
        [str(BIN / "dflash-bot"), "plan", "--matrix", "--force", "--out", str(plan_file), "--recipe", str(recipe)],
        env=env,
    )
    entries = json.loads(plan_file.read_text())["entries"]
    build_s, logs = 0.0, []
    for index, entry in enumerate(entries):
        jobs = work / f"jobs-{index}.json"
        jobs.write_text(json.dumps(entry["jobs"]))
        scratch = work / f"actions-{index}"
        build_s += timed(
            [
                str(BIN / "dflash-bot"),
                "build",
                "--job",
                f"@{jobs}",
                "--out",
                str(work / "bundles"),
                "--recipe",
                str(recipe),
                "--work",
                str(scratch),
                "--keep-work",
            ],
            env=env,
        )
        logs += sorted(p.name for p in scratch.rglob("export-*.log"))
    target_exports = sum(1 for name in logs if name.startswith("export-target"))
    if len(entries) != 1 or target_exports != 1:
        raise SystemExit(f"expected one matrix entry and one target export, got {len(entries)} and {logs}")
    return {
        "matrix_entries": len(entries),
        "drafts_in_entry": len(entries[0]["jobs"]),
        "target_exports": 1,
        "draft_exports": len(logs) - 1,
        "build_job_s": round(build_s, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
