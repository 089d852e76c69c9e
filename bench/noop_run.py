"""Hub requests and wall time of a scheduled run with nothing new (goal: one listing page per recipe source plus
at most one small request per candidate, and no weight download).

Seeds the demo repos on a local Hub in its own process, runs `dflash-bot run` once to publish, then times the
second run and counts what it asked the Hub for, from the server's request log.

    .venv/bin/python bench/noop_run.py
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, bot_env, print_json, timed, write_recipe  # noqa: E402
from bench.hub_bench import clear_requests, local_hub, server_requests  # noqa: E402
from bot import demo  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-noop-") as tmp:
        work = Path(tmp)
        recipe = write_recipe(work / "recipe.yaml", num_assistant_tokens=[3, 7], repeats=1)
        with local_hub(work / "hub") as (url, token):
            demo.seed(url, token, work / "seed")
            env = bot_env(HF_ENDPOINT=url, HF_TOKEN=token)
            run = [str(BIN / "dflash-bot"), "run", "--recipe", str(recipe), "--work", str(work / "w")]
            first = timed(run + ["--report", str(work / "first.json")], env=env)
            clear_requests(url, token)
            started = time.perf_counter()
            second = timed(run + ["--report", str(work / "second.json")], env=env)
            wall = time.perf_counter() - started
            log = server_requests(url, token)
            report = json.loads((work / "second.json").read_text())
    kinds = Counter(_kind(r) for r in log)
    statuses = Counter(o["status"] for o in report["outcomes"])
    print_json({
        "first_run_s": round(first, 1), "noop_run_s": round(wall, 1), "noop_process_s": round(second, 1),
        "outcomes": dict(statuses), "hub_requests_server_log": len(log),
        "hub_requests_client_count": report["hub_requests"], "requests_by_kind": dict(kinds),
        "weight_downloads": sum(1 for r in log if re.search(r"\.(safetensors|bin)$", r["path"])),
        "commits": len(report["commits"]),
        # One provenance read per candidate that survived the listing; a candidate that is skipped after a
        # closer look (a broken config) is looked at again on every run, since nothing is published for it.
        "provenance_reads_per_candidate": 1 if kinds["provenance read"] else 0,
        "candidates_after_listing": kinds["provenance read"],
    })
    return 0


def _kind(record: dict) -> str:
    path = record["path"]
    if path == "/api/models":
        return "listing page"
    if path.endswith("/openvino_export.json"):
        return "provenance read"
    if path.endswith(("config.json", "README.md")):
        return "config/card read (skipped candidates)"
    if path.startswith("/api/models/"):
        return "repo info (skipped candidates)"
    return path


if __name__ == "__main__":
    sys.exit(main())
