"""The scheduled job against the project's local Hub over real HTTP: publish, idempotence, rebuilds, skips.

One seeded hub and one first run are shared by the module; the tests that change the hub's state run last.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from bot.core import fingerprints
from bot.core.naming import draft_output_repo, target_output_repo
from bot.hub.client import Hub
from bot.plan.step import RunOptions
from bot.publish import card
from bot.run import demo
from bot.run.handoff import artifact_name
from bot.run.pipeline import BUNDLES, run
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import SEEDED_KIND, SEEDED_REPOS, fast_recipe

READER = "hf_test_reader_token"
GATED_REPO = "z-lab/Qwen3-Tiny-DFlash-gated"
PRIVATE_REPO = "z-lab/Qwen3-Tiny-DFlash-private"
RECIPE = fast_recipe()
REAL_BUILDS = ("first_run",)  # slow (tests/conftest.py): the first `run`: real exports and GenAI validation
DRAFT_OUT = draft_output_repo(RECIPE.publish, demo.DRAFT_REPO, "int4")
TARGET_OUT = target_output_repo(RECIPE.publish, demo.TARGET_REPO)


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory) -> LocalHub:
    """The shared local Hub (conftest) with the demo's repos, a gated and a private draft, and a reader token."""
    seed = tmp_path_factory.mktemp("seed")
    demo.seed(hub.url, TOKEN, seed, SEEDED_REPOS)
    api = HfApi(endpoint=hub.url, token=TOKEN)
    for repo, private in ((GATED_REPO, False), (PRIVATE_REPO, True)):
        api.create_repo(repo, private=private)
        api.upload_folder(repo_id=repo, folder_path=seed / SEEDED_KIND / "draft")
    api.update_repo_settings(GATED_REPO, gated="auto")
    hub.add_token(READER, "reader")
    return hub


@pytest.fixture(scope="module")
def first_work(tmp_path_factory) -> Path:
    """The first run's work folder, kept: its builders' hand-off folders are read after the publish."""
    return tmp_path_factory.mktemp("w")


@pytest.fixture(scope="module")
def first_run(hub, first_work):
    return run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(work=first_work, keep_work=True))


def _outcomes(report) -> dict:
    return {o.source: o for o in report.outcomes}


def test_full_run_publishes_draft_and_target_with_card_and_provenance(hub, first_run):
    outcomes = _outcomes(first_run)
    assert outcomes[demo.DRAFT_REPO].status == "published", outcomes[demo.DRAFT_REPO]
    assert outcomes[demo.DRAFT_REPO].repos == [DRAFT_OUT, TARGET_OUT]
    assert first_run.exit_code == 0
    api = Hub(hub.url).api
    draft_files = set(api.list_repo_files(DRAFT_OUT))
    assert {
        "openvino_model.xml",
        "openvino_model.bin",
        "config.json",
        "README.md",
        "openvino_export.json",
    } <= draft_files
    assert not any(name.endswith(".py") for name in draft_files)
    target_files = set(api.list_repo_files(TARGET_OUT))
    assert {
        "openvino_model.xml",
        "openvino_model.bin",
        "openvino_tokenizer.xml",
        "openvino_detokenizer.xml",
        "chat_template.jinja",
        "README.md",
        "openvino_export.json",
    } <= target_files

    info = api.model_info(DRAFT_OUT)
    card_data = info.card_data.to_dict()
    assert card_data["base_model"] == demo.DRAFT_REPO
    assert card_data["base_model_relation"] == "quantized"
    assert card_data["license"] == "mit"
    assert card_data["library_name"] == "openvino"
    assert {"openvino", "nncf", "int4", "dflash", "speculative-decoding"} <= set(card_data["tags"])
    provenance = json.loads(Hub(hub.url).read_file(DRAFT_OUT, "openvino_export.json"))
    source_sha = api.model_info(demo.DRAFT_REPO).sha
    assert provenance["source"] == {
        "repo": demo.DRAFT_REPO,
        "revision": source_sha,
        "license": "mit",
        "license_link": None,
    }
    assert provenance["target"]["repo"] == demo.TARGET_REPO
    assert provenance["status"] == "validated" and provenance["validation"]["lossless"]
    tags = [t.name for t in api.list_repo_refs(DRAFT_OUT).tags]
    assert f"src-{source_sha[:7]}" in tags
    target_card = api.model_info(TARGET_OUT).card_data.to_dict()
    assert target_card["base_model"] == demo.TARGET_REPO and target_card["license"] == "apache-2.0"


def test_the_record_is_published_byte_for_byte_as_the_builder_wrote_it(hub, first_run, first_work):
    """One record from build to Hub: the builder writes the repos it is published to and the card templates into
    `openvino_export.json`, once; the publisher holds it to its job and commits it unchanged."""
    (handed,) = first_work.glob(f"dflash-bot-run-*/group-*/{BUNDLES}/{artifact_name(demo.DRAFT_REPO)}")
    written = (handed / "openvino_export.json").read_bytes()
    built = json.loads(written)
    assert built["repos"] == {"draft": DRAFT_OUT, "target": TARGET_OUT}
    assert built["card"] == {"template_fingerprint": fingerprints.template_fingerprint()}
    assert Hub(hub.url).read_file(DRAFT_OUT, "openvino_export.json") == written


def test_broken_unsupported_and_gated_sources_are_skipped_with_reasons(first_run):
    outcomes = _outcomes(first_run)
    assert outcomes[demo.BROKEN_REPO].status == "skipped"
    assert "target_layer_ids [1, 40] reach beyond" in outcomes[demo.BROKEN_REPO].reason
    assert outcomes[demo.DSPARK_REPO].status == "skipped"
    assert "dflash-per-row" in outcomes[demo.DSPARK_REPO].reason
    assert outcomes[GATED_REPO].status == "skipped"
    assert "gated repo" in outcomes[GATED_REPO].reason
    assert PRIVATE_REPO not in outcomes  # invisible to the reader's token


def test_private_source_without_access_is_skipped_when_dispatched(hub, tmp_path):
    report = run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(only=PRIVATE_REPO, work=tmp_path))
    (outcome,) = report.outcomes
    assert outcome.status == "skipped" and "private" in outcome.reason
    assert report.exit_code == 0


def test_second_run_makes_no_commit_and_downloads_no_weights(hub, first_run, tmp_path):
    hub.clear_requests()
    report = run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(work=tmp_path))
    assert report.commits == []
    assert _outcomes(report)[demo.DRAFT_REPO].status == "up-to-date"
    paths = [r["path"] for r in hub.requests()]
    assert not [p for p in paths if re.search(r"\.(safetensors|bin)$", p)]
    assert not [r for r in hub.requests() if r["method"] in ("POST", "PUT") and "/commit/" in r["path"]]
    assert report.hub_requests == len(hub.requests())


def test_dry_run_prints_the_plan_and_changes_nothing(hub, first_run, tmp_path):
    hub.clear_requests()
    report = run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(force=True, dry_run=True, work=tmp_path))
    planned = _outcomes(report)[demo.DRAFT_REPO]
    assert planned.status == "planned" and "forced" in planned.reason
    assert not [r for r in hub.requests() if r["method"] in ("POST", "PUT", "DELETE")]


def test_published_usage_snippet_runs_and_matches_plain_greedy(hub, first_run, tmp_path):
    readme = Hub(hub.url).read_file(DRAFT_OUT, "README.md").decode()
    snippet = re.search(r"```python\n(.*?)```", readme.split("## Usage", 1)[1], re.S).group(1)
    assert "draft_model" in snippet and DRAFT_OUT in snippet and TARGET_OUT in snippet
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf")}
    spec = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, env=env, timeout=300)
    assert spec.returncode == 0, spec.stderr[-2000:]
    plain_code = snippet.split("scheduler = ")[0].split("# DFlash")[0] + (
        "\nprint(ov_genai.LLMPipeline(target_dir, 'CPU').generate('What is speculative decoding?', "
        "max_new_tokens=64))\n"
    )
    plain = subprocess.run([sys.executable, "-c", plain_code], capture_output=True, text=True, env=env, timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert spec.stdout.strip() and spec.stdout == plain.stdout


def test_card_template_change_alone_re_renders_only_the_card(hub, first_run, tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    shutil.copytree(card.TEMPLATES, templates)
    draft_template = templates / card.DRAFT_TEMPLATE
    draft_template.write_text(draft_template.read_text().replace("## Usage", "## Usage (updated)"))
    monkeypatch.setattr(fingerprints, "TEMPLATES", templates)  # what the cards are rendered and fingerprinted from
    api = Hub(hub.url).api
    before = {f.path: f for f in api.list_repo_tree(DRAFT_OUT, recursive=True)}
    hub.clear_requests()
    report = run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(work=tmp_path / "w"))
    assert _outcomes(report)[demo.DRAFT_REPO].status == "published"
    # No weight moves: the chart (deterministic bytes) is only negotiated, never uploaded again.
    assert not [
        r for r in hub.requests() if r["path"].startswith("/_lfs/upload/") or r["path"].endswith(".safetensors")
    ]
    after = {f.path: f for f in api.list_repo_tree(DRAFT_OUT, recursive=True)}
    changed = sorted(
        p
        for p in after
        if hasattr(after[p], "blob_id")  # files only, not folder entries
        and after[p].blob_id != getattr(before.get(p), "blob_id", None)
    )
    assert changed == ["README.md", "openvino_export.json"]
    assert "## Usage (updated)" in Hub(hub.url).read_file(DRAFT_OUT, "README.md").decode()
    again = run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(work=tmp_path / "w2"))
    assert again.commits == []


def test_a_card_refresh_planned_from_an_older_build_never_overwrites_a_newer_one(hub, first_run):
    """A card refresh renders from the record at the commit it commits on: when the repo holds another build than
    the one planned from (published in between), it leaves that build's cards alone."""
    from huggingface_hub import HfApi

    from bot.publish.refresh import refresh_cards

    writer = Hub(hub.url, TOKEN)
    published = writer.draft_record(DRAFT_OUT)
    older = published.model_copy(update={"source": published.source.model_copy(update={"revision": "d" * 40})})
    before = len(HfApi(endpoint=hub.url, token=TOKEN).list_repo_commits(DRAFT_OUT))
    result = refresh_cards(writer, older, private=False)
    assert result.status == "up-to-date" and result.commits == []
    assert len(HfApi(endpoint=hub.url, token=TOKEN).list_repo_commits(DRAFT_OUT)) == before
    assert writer.draft_record(DRAFT_OUT).source.revision == published.source.revision


def test_new_source_commit_triggers_exactly_one_rebuild(hub, first_run, tmp_path):
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.url, token=TOKEN)
    readme = Hub(hub.url).read_file(demo.DRAFT_REPO, "README.md").decode() + "\nUpdated training notes.\n"
    new_sha = api.upload_file(path_or_fileobj=readme.encode(), path_in_repo="README.md", repo_id=demo.DRAFT_REPO).oid
    target_commits_before = len(api.list_repo_commits(TARGET_OUT))
    report = run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(work=tmp_path))
    published = [o for o in report.outcomes if o.status == "published"]
    assert [o.source for o in published] == [demo.DRAFT_REPO]
    assert published[0].revision == new_sha and "source changed" in published[0].reason, published[0]
    provenance = json.loads(Hub(hub.url).read_file(DRAFT_OUT, "openvino_export.json"))
    assert provenance["source"]["revision"] == new_sha
    assert f"src-{new_sha[:7]}" in [t.name for t in api.list_repo_refs(DRAFT_OUT).tags]
    # The target did not change: its published int4 IR was reused, not exported again (bot.plan.reuse).
    reused_from = provenance["export"]["target_reused_from"]
    assert reused_from.split("@")[0] == TARGET_OUT
    assert reused_from.split("@")[1] in {c.commit_id for c in api.list_repo_commits(TARGET_OUT)}
    assert "export-target" not in provenance["resources"] and provenance["export"]["seconds"]["target"] == 0
    target_record = json.loads(Hub(hub.url).read_file(TARGET_OUT, "openvino_export.json"))
    assert provenance["quality"]["top1_agreement"] == target_record["quality"]["top1_agreement"]
    target_commits = api.list_repo_commits(TARGET_OUT)  # newest first
    new_titles = [c.title for c in target_commits[: len(target_commits) - target_commits_before]]
    assert not [t for t in new_titles if t.startswith("Export target")], new_titles  # card commits only


def test_reuse_is_planned_only_when_the_published_target_matches(hub, first_run):
    """The published target matches this recipe and toolchain; another export setting, another tracked toolchain
    version or another target revision each rule the reuse out, with the reason."""
    from bot.core.exporter import TASK_LLM
    from bot.core.profiles import planned_toolchain
    from bot.core.record import parse_target_record
    from bot.plan.reuse import plan_reuse, why_not_reusable

    reader = Hub(hub.url, READER)
    revision = reader.head(demo.TARGET_REPO)
    toolchain = planned_toolchain("qwen3")
    reused, why_not = plan_reuse(
        reader, TARGET_OUT, revision, RECIPE.export, TASK_LLM, toolchain, bot_user="maintainer"
    )
    assert why_not is None
    assert reused is not None and reused.repo == TARGET_OUT and reused.revision == reader.head(TARGET_OUT)
    assert "openvino_model.bin" in reused.files and "openvino_export.json" in reused.files
    assert "README.md" not in reused.files and reused.ir_bytes > 0
    published = parse_target_record(reader.read_file(TARGET_OUT, "openvino_export.json"))
    other_export = RECIPE.export.model_copy(update={"group_size": 64})
    assert (
        why_not_reusable(published, revision, other_export, TASK_LLM, toolchain) == "built with other export settings"
    )
    assert plan_reuse(reader, TARGET_OUT, revision, other_export, TASK_LLM, toolchain, bot_user="maintainer")[0] is None
    newer = dataclasses.replace(toolchain, versions={**toolchain.versions, "optimum-intel": "9.9.9"})
    assert why_not_reusable(published, revision, RECIPE.export, TASK_LLM, newer) == (
        "built with another toolchain (optimum-intel)"
    )
    assert "not " + "c" * 7 in why_not_reusable(published, "c" * 40, RECIPE.export, TASK_LLM, toolchain)
    assert plan_reuse(reader, "OpenVINO-drafts/never-published", revision, RECIPE.export, TASK_LLM, toolchain) == (
        None,
        None,
    )
    # Not provably the bot's own build: its user unknown, or another user's commit.
    assert "user is not known" in plan_reuse(reader, TARGET_OUT, revision, RECIPE.export, TASK_LLM, toolchain)[1]
    assert (
        "by maintainer, not bot"
        in plan_reuse(reader, TARGET_OUT, revision, RECIPE.export, TASK_LLM, toolchain, bot_user="bot")[1]
    )
    # The status memory's "changed outside the bot" is only a hint (issue 29: another recipe's card commit to a
    # shared target reads that way): every commit here is the bot's, so the history decides and the target is reused.
    hinted = plan_reuse(
        reader, TARGET_OUT, revision, RECIPE.export, TASK_LLM, toolchain, bot_user="maintainer", changed_outside=True
    )
    assert hinted[1] is None and hinted[0] is not None and hinted[0].revision == reader.head(TARGET_OUT)


def test_a_target_repo_changed_outside_the_bot_is_not_reused_and_is_exported_again(hub, first_run, tmp_path):
    """Issue 20: the target's IR and chat template changed on the Hub, its record left alone, then a new draft
    revision arrives. The plan sees the files differ from the record, exports the target again and says why;
    the new draft is never validated against the changed IR."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=hub.url, token=TOKEN)
    record_before = Hub(hub.url).read_file(TARGET_OUT, "openvino_export.json")
    downloaded = api.hf_hub_download(TARGET_OUT, "openvino_model.bin", local_dir=tmp_path / "t")
    weights = bytearray(Path(downloaded).read_bytes())
    weights[-1] ^= 0xFF
    api.create_commit(
        TARGET_OUT,
        [
            CommitOperationAdd("openvino_model.bin", bytes(weights)),
            CommitOperationAdd("chat_template.jinja", b"{{ 'pwned' }}"),
        ],
        commit_message="tweak",
    )
    assert Hub(hub.url).read_file(TARGET_OUT, "openvino_export.json") == record_before
    readme = Hub(hub.url).read_file(demo.DRAFT_REPO, "README.md").decode() + "\nAnother draft revision.\n"
    api.upload_file(path_or_fileobj=readme.encode(), path_in_repo="README.md", repo_id=demo.DRAFT_REPO)
    report = run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(work=tmp_path / "w"))
    outcome = _outcomes(report)[demo.DRAFT_REPO]
    assert outcome.status == "published", outcome
    assert "not reused: target repo changed outside the bot: chat_template.jinja differs from its record" in (
        outcome.reason
    ), outcome.reason
    provenance = json.loads(Hub(hub.url).read_file(DRAFT_OUT, "openvino_export.json"))
    assert provenance["export"]["target_reused_from"] is None and "export-target" in provenance["resources"]
    # The target repo is the bot's own build again: every file as its new record lists it.
    target = json.loads(Hub(hub.url).read_file(TARGET_OUT, "openvino_export.json"))
    info = {s.rfilename: s for s in api.model_info(TARGET_OUT, files_metadata=True).siblings}
    assert set(target["files"]) <= set(info)
    assert info["openvino_model.bin"].lfs.sha256 == target["files"]["openvino_model.bin"]["sha256"]
    assert b"pwned" not in Hub(hub.url).read_file(TARGET_OUT, "chat_template.jinja")


def test_a_new_target_revision_exports_the_target_again(hub, first_run, tmp_path):
    """A published source is re-examined (and its target's revision compared) when the status memory lets it be:
    its own revision, the toolchain or the recipe changed, `recheck_after` passed, or `--recheck` (used here)."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.url, token=TOKEN)
    readme = Hub(hub.url).read_file(demo.TARGET_REPO, "README.md").decode() + "\nNew target revision.\n"
    new_sha = api.upload_file(path_or_fileobj=readme.encode(), path_in_repo="README.md", repo_id=demo.TARGET_REPO).oid
    report = run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(work=tmp_path, recheck=True))
    assert [o.source for o in report.outcomes if o.status == "published"] == [demo.DRAFT_REPO]
    provenance = json.loads(Hub(hub.url).read_file(DRAFT_OUT, "openvino_export.json"))
    assert provenance["target"]["revision"] == new_sha
    assert provenance["export"]["target_reused_from"] is None and "export-target" in provenance["resources"]
