"""Hub requests of a scheduled run with nothing new, with the demo seed and with 50 generated candidates more.

Goal (issue 13): source listing pages + 2 (the status read and one listing of the output namespace), however
many sources are watched, with no weight download and no commit.

Each scenario seeds a local Hub (in its own process), runs `dflash-bot run` once to publish, writes the status
repo with the status step (`bot.status_step`, as the publish step does once it is wired in), then measures from
the server's request log:
- `pipeline_now`: a second `dflash-bot run` as the pipeline is wired today;
- `with_memory`: the planning reads of a run that uses the status memory (listing, `load_memory`, `partition`),
  which is what a wired run's no-op costs; sources the memory cannot vouch for are counted as `to_examine`.

    .venv/bin/python bench/noop_run.py            # both scenarios
    .venv/bin/python bench/noop_run.py --extra 50 # one scenario
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, bot_env, print_json, timed, write_recipe  # noqa: E402
from bench.hub_bench import clear_requests, local_hub, server_requests  # noqa: E402
from bot import demo  # noqa: E402

GENERATED = "z-lab/Qwen3-Tiny-DFlash-gen{index:02d}"  # matches the recipe's {author: z-lab, search: DFlash}


def seed_generated(url: str, token: str, work: Path, count: int) -> None:
    """`count` more DFlash candidates that a closer look skips (their target_layer_ids do not fit the target),
    the kind of source that costs requests on every run when nothing remembers it."""
    repos = tuple(demo.SeededRepo(GENERATED.format(index=index), "broken-layer-ids", "draft")
                  for index in range(count))
    demo.seed(url, token, work, repos)


def scenario(extra: int) -> dict:
    from bot.card import template_fingerprint
    from bot.discover import list_sources
    from bot.hub import Hub
    from bot.recipe import load_recipe
    from bot.report import Outcome
    from bot.status_step import entries_from_outcomes, load_memory, partition, publish_status
    from bot.toolchain import detect

    with tempfile.TemporaryDirectory(prefix="bench-noop-") as tmp:
        work = Path(tmp)
        recipe_path = write_recipe(work / "recipe.yaml", num_assistant_tokens=[3, 7], repeats=1)
        recipe = load_recipe(recipe_path)
        with local_hub(work / "hub") as (url, token):
            demo.seed(url, token, work / "seed")
            if extra:
                seed_generated(url, token, work / "seed-generated", extra)
            env = bot_env(HF_ENDPOINT=url, HF_TOKEN=token)
            run = [str(BIN / "dflash-bot"), "run", "--recipe", str(recipe_path), "--work", str(work / "w")]
            first = timed(run + ["--report", str(work / "first.json")], env=env)
            first_report = json.loads((work / "first.json").read_text())

            hub = Hub(url, token)
            memory = load_memory(hub, recipe, card_fp=template_fingerprint())
            outcomes = [Outcome(**o) for o in first_report["outcomes"]]
            status = publish_status(hub, recipe, memory, entries_from_outcomes(hub, recipe, memory, outcomes),
                                    watched=[o.source for o in outcomes], committed=bool(first_report["commits"]))

            clear_requests(url, token)
            started = time.perf_counter()
            timed(run + ["--report", str(work / "second.json")], env=env)
            pipeline_s = time.perf_counter() - started
            pipeline_log = _hub_requests(server_requests(url, token))
            second_report = json.loads((work / "second.json").read_text())

            clear_requests(url, token)
            started = time.perf_counter()
            listings, skips = list_sources(hub, recipe, detect())
            memory = load_memory(hub, recipe, card_fp=template_fingerprint())
            split = partition(memory, listings, skips)
            memory_s = time.perf_counter() - started
            memory_log = _hub_requests(server_requests(url, token))
    pages = sum(1 for r in memory_log if _kind(r) == "listing page")
    return {
        "watched_sources": len(listings) + len(skips), "first_run_s": round(first, 1),
        "status_commit": bool(status.commit), "collection": status.collection_url,
        "listing_pages": pages,
        "pipeline_now": {"hub_requests": len(pipeline_log), "seconds": round(pipeline_s, 1),
                         "by_kind": dict(Counter(_kind(r) for r in pipeline_log)),
                         "commits": len(second_report["commits"]), "weight_downloads": _weights(pipeline_log)},
        "with_memory": {"hub_requests": len(memory_log), "seconds": round(memory_s, 2),
                        "by_kind": dict(Counter(_kind(r) for r in memory_log)),
                        "goal_listing_pages_plus_2": len(memory_log) == pages + 2,
                        "remembered": len(split.remembered), "to_examine": len(split.examine) + len(
                            split.listing_skips), "weight_downloads": _weights(memory_log)},
    }


def _hub_requests(log: list[dict]) -> list[dict]:
    return [r for r in log if not r["path"].startswith("/api/agent-harnesses")]


def _weights(log: list[dict]) -> int:
    return sum(1 for r in log if re.search(r"\.(safetensors|bin)$", r["path"]))


def _kind(record: dict) -> str:
    path = record["path"]
    if path == "/api/models":
        return "listing page" if "search" in record["query"] else "output namespace listing"
    if path.endswith("/status.json"):
        return "status read"
    if path.endswith("/openvino_export.json"):
        return "provenance read"
    if path.endswith(("config.json", "README.md")):
        return "config/card read (skipped candidates)"
    if path.startswith("/api/models/"):
        return "repo info (skipped candidates)"
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", type=int, action="append",
                        help="generated candidates on top of the demo seed (default: 0 and 50)")
    args = parser.parse_args()
    results = {f"demo+{extra}": scenario(extra) for extra in (args.extra or [0, 50])}
    print_json(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
