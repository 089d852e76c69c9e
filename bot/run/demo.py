"""The offline demo (`dflash-bot demo`, what `make demo` runs): the scheduled job against a local Hub.

It starts the project's Hub-compatible server on a free loopback port with a temporary data folder, seeds it with
generated checkpoints under real-looking names, runs the job, prints the report and the published card, runs
again to show that nothing is rebuilt, and stops the server.
"""

from __future__ import annotations

import secrets
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from bot.core import log
from bot.core.settings import Settings
from bot.sandbox.telemetry import switch_off
from hubserver import LocalHub

# The rest of the bot and huggingface_hub are imported inside the functions, after `run_demo` has switched telemetry
# off: importing huggingface_hub with it on fetches a registry from huggingface.co (tests/test_layout.py checks that
# nothing imported above brings it in).

TARGET_REPO = "Qwen/Qwen3-Tiny"
DRAFT_REPO = "z-lab/Qwen3-Tiny-DFlash-b16"
DSPARK_REPO = "deepseek-ai/dspark_qwen3_tiny_block7"
BROKEN_REPO = "z-lab/Qwen3-Tiny-DFlash-b8"


@dataclass(frozen=True)
class SeededRepo:
    repo_id: str
    kind: str
    role: str  # target | draft


# What the demo hub holds: (repo, tiny kind, which folder of the generated pair to upload). The published pair is
# `oracle-deep`: a 32-layer target whose step dominates the 2-layer draft's, and a draft that is always right
# (constructed weights, accept length k + 1), so on CPU the card shows a real speed-up (x1.6 at k = 3, x3.1 at
# k = 15 on 2 cores). `dflash-deep`, right about half the time (accept length 1.88), measured x0.8-0.9 once plain
# greedy was timed after a warm-up: GenAI's per-step overhead on a tiny target takes more than half a step.
DEMO_REPOS = (
    SeededRepo(TARGET_REPO, "oracle-deep", "target"),
    SeededRepo(DRAFT_REPO, "oracle-deep", "draft"),
    SeededRepo(DSPARK_REPO, "dspark", "draft"),
    SeededRepo(BROKEN_REPO, "broken-layer-ids", "draft"),
)


def seed(endpoint: str, token: str, work: Path, repos: tuple[SeededRepo, ...] = DEMO_REPOS) -> dict[str, str]:
    """Upload generated checkpoints to the hub at `endpoint`; returns repo id -> commit sha."""
    from huggingface_hub import HfApi

    from bot.hub.transport import configure_client
    from tinymodels import make_tiny  # imports torch

    configure_client(endpoint)  # a local endpoint needs classic LFS uploads (no Xet)
    api = HfApi(endpoint=endpoint, token=token)
    pairs: dict[str, Path] = {}
    shas = {}
    for repo in repos:
        if repo.kind not in pairs:
            pairs[repo.kind] = work / repo.kind
            make_tiny(repo.kind, pairs[repo.kind], target_repo=TARGET_REPO)
        api.create_repo(repo.repo_id, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo.repo_id, folder_path=pairs[repo.kind] / repo.role, commit_message=f"Upload {repo.role}"
        )
        shas[repo.repo_id] = info.oid
    return shas


def run_demo(work: Path | None = None, *, settings: Settings | None = None) -> int:
    """Start a local hub, seed it, run the job twice, print what happened; returns the exit code.

    `settings` are the CLI's (where profile environments live, the builders' confinement); the Hub is the local one.

    Offline means offline: telemetry is switched off first (`dflash-bot demo` has done so already), so the only
    connections are to the local hub on loopback (tests/sandbox/test_telemetry.py checks that under strace).
    """
    switch_off()
    from bot.core.recipe import load_recipe
    from bot.hub.client import Hub
    from bot.hub.transport import configure_client
    from bot.plan.step import RunOptions
    from bot.run.pipeline import run

    recipe = load_recipe()
    options = RunOptions(settings=settings or Settings())
    token = "hf_demo_" + secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="dflash-bot-demo-", dir=work) as tmp:
        tmp_path = Path(tmp)
        with LocalHub(tmp_path / "hub", user="demo", token=token) as hub_server:
            log.get().info("Local hub at %s (data in %s)", hub_server.url, tmp_path / "hub")
            with log.group("seed the local hub with generated checkpoints"):
                for repo, sha in seed(hub_server.url, token, tmp_path / "seed").items():
                    log.step("%s @ %s", repo, sha[:7])
            configure_client(hub_server.url)
            hub = Hub(hub_server.url, token)
            first = run(recipe, hub, hub, replace(options, work=tmp_path))
            first.print_table()
            # The draft's repo is named after the weight format its build measured fastest: the report says which.
            draft_out = next((o.repos[0] for o in first.outcomes if o.source == DRAFT_REPO and o.repos), None)
            card = hub.read_file(draft_out, "README.md") if draft_out else None
            if card:
                print("\n" + "=" * 30 + f" published card of {draft_out} " + "=" * 30)
                print(card.decode("utf-8"))
            log.get().info("Running the job again: nothing is new, so nothing is rebuilt.")
            second = run(recipe, hub, hub, replace(options, work=tmp_path))
            second.print_table()
    return max(first.exit_code, second.exit_code)
