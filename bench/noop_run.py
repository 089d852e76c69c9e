"""Hub requests of a scheduled run with nothing new: with 1 and with 50 published drafts, and with the demo seed.

Goal (issues 13 and 32): source listing pages + 2 (the status read and one listing of the output namespace),
however many drafts are published: a published draft's head comes from that listing (its `sha`), and its record
is read only when the head differs from the memory. No weight download, no commit.

`--published N` (default: 1 and 50) seeds a local Hub in this process with N hand-made published drafts and the
status repo that remembers them (`bench/noop_seed.py`, no export, seconds), runs the job once and counts its
requests. `--extra N` seeds the demo (a real export and validation in a first `dflash-bot run`) plus N generated
candidates that a closer look skips, and counts the second run's requests.

    .venv/bin/python bench/noop_run.py                 # 1 and 50 published drafts
    .venv/bin/python bench/noop_run.py --published 50  # one scenario
    .venv/bin/python bench/noop_run.py --extra 0       # the demo seed, with a real first run
    .venv/bin/python bench/noop_run.py --radar 300 --radar 900   # strangers found by the whole-Hub searches
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, bot_env, print_json, timed, write_recipe
from bench.hub_bench import clear_requests, local_hub, server_requests
from bot.run import demo

GENERATED = "z-lab/Qwen3-Tiny-DFlash-gen{index:02d}"  # matches the recipe's {author: z-lab, search: DFlash}


def seed_generated(url: str, token: str, work: Path, count: int) -> None:
    """`count` more DFlash candidates that a closer look skips (their target_layer_ids do not fit the target),
    the kind of source that costs requests on every run when nothing remembers it."""
    repos = tuple(demo.SeededRepo(GENERATED.format(index=index), "broken-layer-ids", "draft") for index in range(count))
    demo.seed(url, token, work, repos)


def scenario(extra: int) -> dict:
    """Seed, publish with a first `dflash-bot run` (it writes the status repo), then measure a second one."""
    with tempfile.TemporaryDirectory(prefix="bench-noop-") as tmp:
        work = Path(tmp)
        recipe_path = write_recipe(work / "recipe.yaml", num_assistant_tokens=[3, 7], repeats=1)
        with local_hub(work / "hub") as (url, token):
            demo.seed(url, token, work / "seed")
            if extra:
                seed_generated(url, token, work / "seed-generated", extra)
            env = bot_env(HF_ENDPOINT=url, HF_TOKEN=token)
            run = [str(BIN / "dflash-bot"), "run", "--recipe", str(recipe_path), "--work", str(work / "w")]
            first = timed([*run, "--report", str(work / "first.json")], env=env)
            first_report = json.loads((work / "first.json").read_text())

            clear_requests(url, token)
            started = time.perf_counter()
            timed([*run, "--report", str(work / "second.json")], env=env)
            second_s = time.perf_counter() - started
            log = _hub_requests(server_requests(url, token))
            second = json.loads((work / "second.json").read_text())
    pages = sum(1 for r in log if _kind(r) == "listing page")
    return {
        "watched_sources": len(first_report["outcomes"]) - 1,  # less the status repo's own row, if any
        "first_run_s": round(first, 1),
        "status_page": first_report.get("status_page"),
        "collection": first_report.get("collection"),
        "noop_run": {
            "hub_requests": len(log),
            "listing_pages": pages,
            "goal_listing_pages_plus_2": len(log) == pages + 2,
            "seconds": round(second_s, 1),
            "by_kind": dict(Counter(_kind(r) for r in log)),
            "commits": len(second["commits"]),
            "status_commit": second.get("status_commit"),
            "weight_downloads": _weights(log),
        },
    }


def published_scenario(count: int) -> dict:
    """`count` hand-made published drafts remembered by the status repo: one no-op run's requests."""
    from bench.noop_seed import seed_published
    from bot.core.recipe import load_recipe
    from bot.hub.client import Hub
    from bot.hub.transport import configure_client
    from bot.plan.step import RunOptions
    from bot.run.pipeline import run
    from hubserver import LocalHub

    recipe = load_recipe()
    with (
        tempfile.TemporaryDirectory(prefix="bench-noop-") as tmp,
        LocalHub(Path(tmp) / "hub", user="bot", token="hf_w") as server,
    ):
        configure_client(server.url)
        hub = Hub(server.url, "hf_w")
        seed_published(hub, recipe, Path(tmp) / "seed", count)
        server.clear_requests()
        started = time.perf_counter()
        report = run(recipe, hub, hub, RunOptions(work=Path(tmp) / "w"))
        seconds = time.perf_counter() - started
        log = [r for r in _hub_requests(server.requests()) if r["path"] != "/api/whoami-v2"]
    pages = sum(1 for r in log if _kind(r) == "listing page")
    return {
        "published_drafts": count,
        "up_to_date": sum(o.status == "up-to-date" for o in report.outcomes),
        "noop_run": {
            "hub_requests": len(log),
            "listing_pages": pages,
            "goal_listing_pages_plus_2": len(log) == pages + 2,
            "seconds": round(seconds, 1),
            "by_kind": dict(Counter(_kind(r) for r in log)),
            "commits": len(report.commits),
            "status_commit": report.status_commit,
            "weight_downloads": _weights(log),
        },
        "whoami": "asked once per run for the write token's user (not counted: not the memory's)",
    }


RADAR_WORDS = ("DFlash", "DSpark", "speculator")


def radar_scenario(strangers: int, published: int = 10, repeats: int = 5) -> dict:
    """A realistic radar (issue 39): `published` drafts of a trusted author, published and remembered, and
    `strangers` repos by other authors matching the recipe's words (split evenly between them, each newer than the
    trusted drafts). A first run writes the status page with the strangers seen; then `repeats` no-op runs, each
    counted and timed: their median and range are the figure."""
    from bench.noop_seed import seed_published
    from bot.core.recipe import load_recipe
    from bot.hub.client import Hub
    from bot.hub.transport import configure_client
    from bot.plan.step import RunOptions
    from bot.run.pipeline import run
    from hubserver import LocalHub
    from tinymodels.hub_layouts import write_repo

    recipe = load_recipe()
    with (
        tempfile.TemporaryDirectory(prefix="bench-radar-") as tmp,
        LocalHub(Path(tmp) / "hub", user="bot", token="hf_w") as server,
    ):
        configure_client(server.url)
        hub = Hub(server.url, "hf_w")
        seed_published(hub, recipe, Path(tmp) / "seed", published)
        config = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64}
        folder = write_repo(Path(tmp) / "stranger", config, None)
        for index in range(strangers):
            word = RADAR_WORDS[index % len(RADAR_WORDS)]
            server.seed_folder(f"stranger{index:04d}/Qwen3-8B-{word}-copy", folder)
        first = run(recipe, hub, hub, RunOptions(work=Path(tmp) / "first"))
        runs = []
        for index in range(repeats):
            server.clear_requests()
            started = time.perf_counter()
            report = run(recipe, hub, hub, RunOptions(work=Path(tmp) / f"noop{index}"))
            seconds = time.perf_counter() - started
            log = [r for r in _hub_requests(server.requests()) if r["path"] != "/api/whoami-v2"]
            runs.append((len(log), seconds, len(report.commits), report.status_commit, Counter(_kind(r) for r in log)))
    timings = sorted(run[1] for run in runs)
    return {
        "trusted_published": published,
        "strangers_on_the_hub": strangers,
        "seen_not_approved": sum(o.stage == "approve" for o in first.outcomes),
        "first_run_status_commit": first.status_commit is not None,
        "noop_runs": repeats,
        "hub_requests": sorted({run[0] for run in runs}),
        "by_kind": dict(runs[-1][4]),
        "seconds_median": round(statistics.median(timings), 2),
        "seconds_min_max": [round(timings[0], 2), round(timings[-1], 2)],
        "commits": sum(run[2] for run in runs),
        "status_commits": sum(run[3] is not None for run in runs),
        "listing_queries": {
            "trusted_author_x_word": len(recipe.watch.authored_queries()),
            "radar_words": len(recipe.watch.radar_queries()),
            "radar_limit_per_word": recipe.watch.max_candidates,
        },
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
    parser.add_argument("--published", type=int, action="append", help="hand-made published drafts (default: 1 and 50)")
    parser.add_argument("--extra", type=int, action="append", help="the demo seed with N generated candidates more")
    parser.add_argument("--radar", type=int, action="append", help="N stranger repos the whole-Hub searches find")
    args = parser.parse_args()
    results: dict = {}
    if args.radar:
        results |= {f"radar-{n}": radar_scenario(n) for n in args.radar}
    if args.published or not (args.extra or args.radar):
        results |= {f"published-{n}": published_scenario(n) for n in (args.published or [1, 50])}
    results |= {f"demo+{extra}": scenario(extra) for extra in (args.extra or [])}
    print_json(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
