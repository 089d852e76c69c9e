"""The hostile suite, memory part: a damaged, forged or shared status repo, and invisible characters in file names.

The status repo is the bot's memory between runs and anyone with write access to the publish namespace can edit
it. Each scenario seeds the local Hub (real HTTP) with the demo's target and draft checkpoints whose drafts are
ruled out before any export (so no scenario builds a model), damages or forges the memory, runs the real job
(`pipeline.run` with a write token, or the `dflash-bot` CLI), reads the Hub back and records a row for
RELIABILITY.md (`tests/reliability/rows.py`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess

import pytest
from huggingface_hub import HfApi

from bot.core.fingerprints import (
    Fingerprints,
    current_toolchain_fingerprint,
    recipe_memory_fingerprint,
    template_fingerprint,
)
from bot.core.naming import draft_output_repo, target_output_repo
from bot.hub.client import Hub
from bot.plan.step import RunOptions
from bot.run import demo
from bot.run.pipeline import run
from bot.status.memory import STATUS_JSON, StatusEntry
from bot.status.sync import load_memory, publish_status
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import SEEDED_KIND, fast_recipe
from tests.reliability.rows import record, run_command

VICTIM_TOKEN = "hf_reliability_victim"
BROKEN_B = "z-lab/Qwen3-Tiny-DFlash-b4"  # a second draft ruled out at discovery, for a second recipe
INVISIBLE = re.compile(
    "[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]"
)
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory) -> LocalHub:
    """The shared local Hub (conftest) with a target and two drafts that are never built, and a second writer."""
    repos = (
        demo.SeededRepo(demo.TARGET_REPO, SEEDED_KIND, "target"),
        demo.SeededRepo(demo.BROKEN_REPO, "broken-layer-ids", "draft"),
        demo.SeededRepo(BROKEN_B, "broken-layer-ids", "draft"),
    )
    hub.shas = demo.seed(hub.url, TOKEN, tmp_path_factory.mktemp("seed"), repos)  # type: ignore[attr-defined]
    hub.add_token(VICTIM_TOKEN, "victim-org", write=True)
    return hub


def recipe_for(namespace: str, source: str = demo.BROKEN_REPO, name: str = "dflash"):
    """The test recipe publishing to `namespace` and watching the one draft `source` (ruled out: never built)."""
    base = fast_recipe(num_assistant_tokens=[3])
    query = base.watch.sources[0].model_copy(update={"author": "z-lab", "search": source.split("/")[1]})
    return base.model_copy(
        update={
            "name": name,
            "watch": base.watch.model_copy(update={"sources": [query]}),
            "publish": base.publish.model_copy(update={"namespace": namespace}),
        }
    )


def entry_for(hub, recipe, source: str = demo.BROKEN_REPO, **changes) -> dict:
    """A status entry the memory would trust as it stands: this revision, toolchain, recipe and card template."""
    entry = {
        "source": source,
        "revision": hub.shas[source],
        "status": "skipped",
        "reason": "remembered",
        "stage": "classify",
        "toolchain_fingerprint": current_toolchain_fingerprint(),
        "recipe_fingerprint": recipe_memory_fingerprint(recipe),
        "card_fingerprint": template_fingerprint(),
        "last_checked": "2026-01-01T00:00:00+00:00",
    }
    return {**entry, **changes}


def seed_status(hub, recipe, content: bytes | list[dict]) -> str:
    """Write `status.json` into the recipe's status repo (raw bytes, or a file holding these entries)."""
    if isinstance(content, list):
        content = json.dumps(
            {"schema_version": 1, "recipe": recipe.name, "namespace": recipe.publish.namespace, "entries": content}
        ).encode()
    repo = recipe.status_repo_id
    api = HfApi(endpoint=hub.url, token=TOKEN)
    api.create_repo(repo, repo_type="dataset", exist_ok=True)
    api.upload_file(path_or_fileobj=content, path_in_repo=STATUS_JSON, repo_id=repo, repo_type="dataset")
    return repo


def run_job(hub, recipe, tmp_path):
    return run(recipe, Hub(hub.url, TOKEN), Hub(hub.url, TOKEN), RunOptions(work=tmp_path / "work"))


def strict_status(hub, repo: str) -> dict:
    """`status.json` as the Hub holds it, parsed as strict JSON (NaN and Infinity are not JSON)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    data = Hub(hub.url, TOKEN).read_file(repo, STATUS_JSON, repo_type="dataset")
    assert data is not None, f"{repo} has no {STATUS_JSON}"
    return json.loads(data, parse_constant=refuse)


def page(hub, repo: str) -> str:
    return (Hub(hub.url, TOKEN).read_file(repo, "README.md", repo_type="dataset") or b"").decode()


def collection_items(namespace: str, hub) -> dict[str, str]:
    api = HfApi(endpoint=hub.url, token=TOKEN)
    return {
        item.item_id: item.note or ""
        for summary in api.list_collections(owner=namespace)
        for item in api.get_collection(summary.slug).items
    }


def outcome_of(report, source: str):
    return next(o for o in report.outcomes if o.source == source)


def describe(data: dict) -> str:
    return "; ".join(f"{e['source']}: {e['status']} (last checked {e['last_checked'][:10]})" for e in data["entries"])


DAMAGED = [
    (
        "last_checked without a time zone (TypeError in every run before)",
        lambda hub, recipe: [entry_for(hub, recipe, last_checked="2026-01-01T00:00:00")],
    ),
    (
        "status.json nested 100 000 deep (RecursionError in every run before)",
        lambda hub, recipe: b'{"schema_version": 1, "entries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ),
]


@pytest.mark.parametrize("case,content", DAMAGED, ids=[d[0].split(" (")[0] for d in DAMAGED])
def test_damaged_memory_is_dropped_and_rebuilt(hub, tmp_path, case, content):
    from bot.status.page import show_status

    recipe = recipe_for("mem-damaged-" + ("tz" if "zone" in case else "deep"))
    repo = seed_status(hub, recipe, content(hub, recipe))
    shown = show_status(Hub(hub.url, TOKEN), repo)  # `dflash-bot status`: no traceback either
    report = run_job(hub, recipe, tmp_path)
    outcome = outcome_of(report, demo.BROKEN_REPO)
    assert outcome.status == "skipped" and "target" in outcome.reason, outcome  # examined again, not remembered
    assert report.status_commit is not None and not report.failed
    data = strict_status(hub, repo)
    checked = [dt.datetime.fromisoformat(e["last_checked"]) for e in data["entries"]]
    assert [e["source"] for e in data["entries"]] == [demo.BROKEN_REPO] and all(c.tzinfo for c in checked)
    again = run_job(hub, recipe, tmp_path)  # the repaired memory is trusted: nothing written
    assert again.status_commit is None and outcome_of(again, demo.BROKEN_REPO).status == "skipped"
    record(
        "fault",
        case,
        f"`dflash-bot status` exit {shown}; run: {outcome.status} ({outcome.reason[:70]}); "
        f"status repo rewritten at {report.status_commit[:7]}, next run commits nothing",
        f"status.json valid: {describe(data)}",
        True,
    )


def test_forged_publish_without_repos_does_not_hide_a_source(hub, tmp_path):
    recipe = recipe_for("mem-forged")
    case = "forged 'published' entry, no repos, last_checked in 2099, for a never-built source"
    repo = seed_status(
        hub, recipe, [entry_for(hub, recipe, status="published", reason="", last_checked="2099-01-01T00:00:00+00:00")]
    )
    report = run_job(hub, recipe, tmp_path)
    outcome = outcome_of(report, demo.BROKEN_REPO)
    assert outcome.status == "skipped", outcome  # examined: up to date only after its record agrees
    data = strict_status(hub, repo)
    (entry,) = data["entries"]
    assert entry["status"] == "skipped" and dt.datetime.fromisoformat(entry["last_checked"]) < dt.datetime(
        2099, 1, 1, tzinfo=dt.UTC
    )
    record(
        "hostile",
        case,
        f"examined, not believed: {outcome.status} ({outcome.reason[:70]})",
        f"status.json: {describe(data)}",
        True,
    )


def test_an_entry_naming_another_owners_repos_never_reaches_our_collection(hub, tmp_path):
    recipe = recipe_for("mem-foreign")
    case = "entry naming another owner's repos with made-up figures"
    victim = HfApi(endpoint=hub.url, token=VICTIM_TOKEN)
    stolen = ["victim-org/Qwen3-Tiny-DFlash-b8-int4-ov", "victim-org/Qwen3-Tiny-int4-ov"]
    shas = {}
    for repo in stolen:
        victim.create_repo(repo, exist_ok=True)
        shas[repo] = victim.model_info(repo).sha
    repo = seed_status(
        hub,
        recipe,
        [
            entry_for(
                hub,
                recipe,
                status="published",
                reason="",
                draft_repo=stolen[0],
                target_repo=stolen[1],
                target="Qwen/Qwen3-Tiny",
                repo_shas=shas,
                accept_length=15.9,
                speedup=42.0,
                recommended_k=15,
            )
        ],
    )
    report = run_job(hub, recipe, tmp_path)
    outcome = outcome_of(report, demo.BROKEN_REPO)
    items = collection_items(recipe.publish.namespace, hub)
    text = page(hub, repo)
    assert not set(stolen) & set(items) and "victim-org" not in text and "42.00" not in text, (items, text)
    data = strict_status(hub, repo)
    assert "victim-org" not in json.dumps(data)
    record(
        "hostile",
        case,
        f"entry dropped as foreign; source examined: {outcome.status} ({outcome.reason[:60]})",
        f"collection items {sorted(items) or 'none'}; page and status.json name no victim-org repo; {describe(data)}",
        True,
    )


def test_two_recipes_in_one_namespace_keep_their_own_memory_and_collection(hub, tmp_path):
    namespace = "mem-shared"
    first = recipe_for(namespace, demo.BROKEN_REPO, name="dflash")
    second = recipe_for(namespace, BROKEN_B, name="dflash-b4")
    reports = [run_job(hub, recipe, tmp_path) for recipe in (first, second, first)]
    assert not any(r.failed for r in reports)
    mine, theirs = strict_status(hub, first.status_repo_id), strict_status(hub, second.status_repo_id)
    assert [e["source"] for e in mine["entries"]] == [demo.BROKEN_REPO]
    assert [e["source"] for e in theirs["entries"]] == [BROKEN_B]  # the third run removed nothing of theirs
    # Their collections: each recipe publishes one pair (empty repos stand in for the published ones).
    api = HfApi(endpoint=hub.url, token=TOKEN)
    pairs = {}
    for recipe, source in ((first, "z-lab/Alpha-DFlash"), (second, "z-lab/Beta-DFlash")):
        repos = (
            draft_output_repo(recipe.publish, source, "int4"),
            target_output_repo(recipe.publish, demo.TARGET_REPO),
        )
        for repo in repos:
            api.create_repo(repo, exist_ok=True)
        pairs[recipe.name] = (source, repos)
    for recipe in (first, second, first):
        source, (draft, target) = pairs[recipe.name]
        entry = StatusEntry(
            source=source,
            revision="a" * 40,
            status="published",
            target=demo.TARGET_REPO,
            target_revision="b" * 40,
            draft_repo=draft,
            target_repo=target,
            accept_length=4.0,
            speedup=1.5,
            recommended_k=3,
            toolchain_fingerprint="tc",
            recipe_fingerprint="rc",
            last_checked=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        )
        writer = Hub(hub.url, TOKEN)
        publish_status(
            writer,
            recipe,
            load_memory(writer, recipe, fingerprints=Fingerprints.of(recipe, toolchain="tc")),
            [entry],
            watched=[source],
            committed=False,
        )
    titles = {
        s.title: [i.item_id for i in api.get_collection(s.slug).items] for s in api.list_collections(owner=namespace)
    }
    assert len(titles) == 2 and all(len(items) == 2 for items in titles.values()), titles
    record(
        "concurrency",
        "two recipes publishing to one namespace, run A, B, A",
        f"status repos {first.status_repo_id} and {second.status_repo_id}; collections {sorted(titles)}",
        f"each status repo and collection holds only its recipe's sources: "
        f"{[e['source'] for e in mine['entries']]} / {[e['source'] for e in theirs['entries']]}; "
        f"{ {t: len(i) for t, i in titles.items()} }",
        True,
    )


def test_non_finite_figures_never_reach_the_file_or_the_notes(hub, tmp_path):
    recipe = recipe_for("mem-figures")
    case = "NaN and Infinity figures in status.json"
    ours = [
        draft_output_repo(recipe.publish, demo.BROKEN_REPO, "int4"),
        target_output_repo(recipe.publish, demo.TARGET_REPO),
    ]
    api = HfApi(endpoint=hub.url, token=TOKEN)
    for repo in ours:
        api.create_repo(repo, exist_ok=True)
    entry = entry_for(
        hub,
        recipe,
        status="failed",
        stage="export",
        reason="export crashed",
        draft_repo=ours[0],
        target_repo=ours[1],
        target=demo.TARGET_REPO,
        repo_shas={r: api.model_info(r).sha for r in ours},
        accept_length=float("inf"),
        speedup=float("nan"),
        recommended_k=3,
    )
    repo = seed_status(hub, recipe, [entry])
    report = run_job(hub, recipe, tmp_path)
    data = strict_status(hub, repo)  # raises on NaN/Infinity
    notes = collection_items(recipe.publish.namespace, hub)
    assert not any(re.search(r"\bnan\b|\binf", note, re.IGNORECASE) for note in notes.values()), notes
    assert not re.search(r"\bnan\b", page(hub, repo), re.IGNORECASE)
    outcome = outcome_of(report, demo.BROKEN_REPO)
    record(
        "hostile",
        case,
        f"entry dropped (figures must be finite or null); source examined: {outcome.status}",
        f"status.json is strict JSON: {describe(data)}; collection notes {len(notes)}, none says nan",
        True,
    )


def test_invisible_characters_in_file_names_reach_neither_page_nor_log(hub, tmp_path):
    recipe = recipe_for("mem-bidi", "z-lab/Qwen3-Tiny-DFlash-bidi")
    hub.add_org("mem-bidi")  # the maintainer may publish there (the CLI's preflight asks whoami)
    case = "bidi override and zero-width characters in a repo's file names"
    api = HfApi(endpoint=hub.url, token=TOKEN)
    source = "z-lab/Qwen3-Tiny-DFlash-bidi"
    api.create_repo(source, exist_ok=True)
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1]},
    }
    hostile = "we\u202eights\u200b\u2066x\u2069\ufeff.bin"
    api.upload_file(path_or_fileobj=json.dumps(config).encode(), path_in_repo="config.json", repo_id=source)
    api.upload_file(path_or_fileobj=b"not a pickle", path_in_repo=hostile, repo_id=source)
    recipe_file = tmp_path / "recipe.yaml"
    recipe_file.write_text(recipe.model_dump_json())  # JSON is YAML
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
    done = subprocess.run(
        run_command(recipe_file, tmp_path / "report.json", work=tmp_path / "work"),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = next(o for o in json.loads((tmp_path / "report.json").read_text())["outcomes"] if o["source"] == source)
    assert outcome["status"] == "skipped" and "pickle" in outcome["reason"], outcome
    log = done.stdout + done.stderr  # the table and the progress lines
    assert "weightsx.bin" in log and not INVISIBLE.search(log), ascii(log[-3000:])
    text, data = page(hub, recipe.status_repo_id), strict_status(hub, recipe.status_repo_id)
    assert (
        "weightsx.bin" in text
        and not INVISIBLE.search(text)
        and not INVISIBLE.search(json.dumps(data, ensure_ascii=False))
    )
    record(
        "hostile",
        case,
        f"{outcome['status']}: {outcome['reason'][:70]!a}; log and page show "
        "'weightsx.bin' (controls, bidi and zero-width characters removed)",
        f"status page and status.json hold no invisible character: {describe(data)}",
        True,
    )
