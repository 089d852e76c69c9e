"""A local Hub holding N hand-made published drafts and the status repo that remembers them: no export.

What a scheduled run with nothing new sees after N publishes: N source drafts (found by the recipe's search), their N
draft repos and one shared target repo in the output namespace, and a status repo whose entries name those repos at
their current shas, written with this environment's toolchain, recipe and card fingerprints. Used by
`bench/noop_run.py` (the request count with 1 and 50 published drafts) and by the test that the count does not grow.
"""

from __future__ import annotations

import json
from pathlib import Path

from bot.core import naming
from bot.core.fingerprints import current_toolchain_fingerprint, recipe_memory_fingerprint, template_fingerprint
from bot.core.recipe import Recipe
from bot.hub.client import Hub
from bot.status.memory import StatusEntry, merged, now_utc, with_repo_shas
from bot.status.page import renderer_fingerprint, write_status
from tinymodels.hub_layouts import write_repo

SOURCE = "z-lab/Qwen3-Tiny-DFlash-pub{index:03d}"
TARGET = "Qwen/Qwen3-Tiny"
_DRAFT_CONFIG = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "dflash_config": {"mask_token_id": 500, "target_layer_ids": [1, 2]},
}


def seed_published(hub: Hub, recipe: Recipe, work: Path, count: int) -> list[str]:
    """Upload `count` sources and their published repos, then the status repo remembering each as published.

    Returns:
        The source repo ids.
    """
    api, publish = hub.api, recipe.publish
    target_out = naming.target_output_repo(publish, TARGET)
    sources, shas = [], {}
    for index in range(count):
        source = SOURCE.format(index=index)
        folder = write_repo(work / source.replace("/", "__"), _DRAFT_CONFIG, None)
        api.create_repo(source, exist_ok=True)
        shas[source] = api.upload_folder(repo_id=source, folder_path=folder, commit_message="Upload").oid
        sources.append(source)
    for repo in [naming.draft_output_repo(publish, source, "int4") for source in sources] + [target_out]:
        api.create_repo(repo, exist_ok=True)
        api.upload_file(
            path_or_fileobj=json.dumps({"hand-made": repo}).encode(), path_in_repo="note.json", repo_id=repo
        )
    now = now_utc()
    fingerprints = {
        "toolchain_fingerprint": current_toolchain_fingerprint(),
        "recipe_fingerprint": recipe_memory_fingerprint(recipe),
        "card_fingerprint": template_fingerprint(),
    }
    entries = [
        StatusEntry(
            source=source,
            revision=shas[source],
            status="published",
            kind="dflash",
            layout="zlab-dflash",
            group="DFlash",
            target=TARGET,
            target_revision="0" * 40,
            draft_repo=naming.draft_output_repo(publish, source, "int4"),
            target_repo=target_out,
            accept_length=2.0,
            speedup=1.5,
            recommended_k=3,
            profile="default",
            last_built=now,
            last_checked=now,
            **fingerprints,
        )
        for source in sources
    ]
    status = merged(
        None,
        entries,
        recipe=recipe.name,
        namespace=publish.namespace,
        watched=None,
        collection_title=recipe.collection_title,
        collection_url=f"{hub.endpoint}/collections/{publish.collection_namespace}/hand-made-1",
        renderer=renderer_fingerprint(),
        schedule=publish.schedule,
        last_run=now if publish.schedule else None,  # a run just stamped it (`run_stamp`): the next one keeps it
    )
    status = with_repo_shas(status, hub.list_namespace(publish.namespace))
    write_status(hub, recipe.status_repo_id, status)
    return sources
