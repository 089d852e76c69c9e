"""An official int4 target on the local Hub (`publish.official_targets`, `bot.plan.official`,
`bot.builder.official_target`).

The demo's pair is seeded, and `OpenVINO/Qwen3-Tiny-int4-ov` is filled with the bot's own export of the demo's target
(a real optimum-intel export, so its IR carries the hidden-state annotation): the first run validates the draft
against it and creates no target repo; a later commit removes the annotation from the official IR, and the rebuild
that a new source commit triggers refuses it with that reason and exports the target as before. The pure parts
(the recipe setting, pinning the files, the tokenizer comparison, the status memory) are tested on plain data.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from bot.builder.export import ExportRequest, export_model
from bot.builder.official_target import compare_tokenizers, tokenizer_fingerprints
from bot.core import naming
from bot.core.errors import Failure
from bot.core.exporter import target_task
from bot.core.hub_records import RepoFiles
from bot.core.recipe import PublishSettings
from bot.discover.fetch import safe_copy
from bot.hub.client import Hub
from bot.plan.official import pin_official
from bot.plan.step import RunOptions
from bot.run import demo
from bot.run.pipeline import run
from bot.status.memory import stale_published
from bot.status.read import foreign_repos, read_status
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import SEEDED_KIND, fast_recipe

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

READER = "hf_official_reader_token"
RECIPE = fast_recipe()
REAL_BUILDS = ("hub",)  # slow (tests/conftest.py): this module's hub holds a real export of the demo's target
OFFICIAL = "OpenVINO/Qwen3-Tiny-int4-ov"
TARGET_OUT = naming.target_output_repo(RECIPE.publish, demo.TARGET_REPO)
PAIR = (
    demo.SeededRepo(demo.TARGET_REPO, SEEDED_KIND, "target"),
    demo.SeededRepo(demo.DRAFT_REPO, SEEDED_KIND, "draft"),
)
ANNOTATION = re.compile(r"\s*<hidden_states_decoder_layers [^>]*/>")


# ---- the pure parts ----


def test_the_recipe_names_official_repos_by_template_and_an_empty_list_turns_it_off():
    publish = RECIPE.publish
    assert publish.official_target_repos("Qwen/Qwen3-8B") == ["OpenVINO/Qwen3-8B-int4-ov"]
    two = ["OpenVINO/{target_name}-int4-ov", "me/{target_namespace}__{target_name}"]
    both = PublishSettings(namespace="me", official_targets=two)
    assert both.official_target_repos("Qwen/Qwen3-8B") == ["OpenVINO/Qwen3-8B-int4-ov", "me/Qwen__Qwen3-8B"]
    assert PublishSettings(namespace="me", official_targets=[]).official_target_repos("Qwen/Qwen3-8B") == []
    for bad in ("{target_name}-int4-ov", "OpenVINO/{model}", "OpenVINO/{target_name", "me/{target_namespace}"):
        with pytest.raises(ValueError, match="official"):
            PublishSettings(namespace="me", official_targets=[bad])


def test_an_official_repo_is_pinned_only_with_its_ir_and_tokenizer_irs():
    sizes = {
        "openvino_model.xml": 10,
        "openvino_model.bin": 100,
        "openvino_tokenizer.xml": 1,
        "openvino_tokenizer.bin": 1,
        "openvino_detokenizer.xml": 1,
        "openvino_detokenizer.bin": 1,
        "config.json": 1,
        "tokenizer.json": 1,
        "README.md": 1,
        "model.safetensors": 1,
        "setup.py": 1,
        "sub/openvino_model.xml": 1,
    }
    head = RepoFiles(repo_id=OFFICIAL, sha="c" * 40, sizes=sizes, gated=False, private=False)
    pinned, why_not = pin_official(head, is_vlm=False)
    assert why_not is None and pinned is not None
    assert set(pinned.files) == set(sizes) - {"README.md", "model.safetensors", "setup.py", "sub/openvino_model.xml"}
    del sizes["openvino_detokenizer.bin"]
    pinned, why_not = pin_official(head, is_vlm=False)
    assert pinned is None and why_not == "holds no openvino_detokenizer.bin"
    assert pin_official(head, is_vlm=True)[1].startswith("holds no openvino_language_model.xml")


def test_tokenizers_compare_by_vocabulary_not_by_bytes(tmp_path):
    tokenizer = {
        "version": "1.0",
        "added_tokens": [{"id": 3, "content": "<|im_end|>", "special": True}],
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
    }
    source, official = tmp_path / "source", tmp_path / "official"
    source.mkdir(), official.mkdir()
    (source / "tokenizer.json").write_text(json.dumps(tokenizer))
    # Saved again by another transformers: merges as pairs, other formatting, keys added.
    resaved = {**tokenizer, "model": {**tokenizer["model"], "merges": [["a", "b"]], "ignore_merges": False}}
    (official / "tokenizer.json").write_text(json.dumps(resaved, indent=2))
    compare_tokenizers(source, official)
    other = {**tokenizer, "model": {**tokenizer["model"], "vocab": {"a": 0, "b": 2, "ab": 1}}}
    (official / "tokenizer.json").write_text(json.dumps(other))
    with pytest.raises(Failure, match=r"tokenizer is not the source target's \(tokenizer.json"):
        compare_tokenizers(source, official)
    (official / "tokenizer.json").unlink()
    (official / "tokenizer.model").write_bytes(b"sentencepiece")
    assert set(tokenizer_fingerprints(official)) == {"tokenizer.model"}
    with pytest.raises(Failure, match="no tokenizer file to compare"):
        compare_tokenizers(source, official)


def test_an_official_target_repo_is_never_stale_in_the_status_memory_nor_foreign_to_it():
    from tests.status.test_memory import DRAFT, NS, published

    entry = published(target_repo=OFFICIAL, repo_shas={DRAFT: "1" * 40})
    listing = {DRAFT: "1" * 40}  # a listing of the bot's namespace never shows the official repo
    assert stale_published([entry], listing) == [OFFICIAL]
    assert stale_published([entry], listing, namespace=NS) == []
    assert stale_published([entry], {}, namespace=NS) == [DRAFT]  # the bot's own repos are still held to it
    publish = RECIPE.publish.model_copy(update={"namespace": NS})
    assert foreign_repos(entry, publish) is None
    assert "does not publish" in (foreign_repos(entry.model_copy(update={"target_repo": "else/where"}), publish) or "")


# ---- the real thing: runs on the local Hub ----


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory) -> LocalHub:
    """The demo's pair, a reader token, and the official repo holding the bot's own export of the demo's target."""
    seed = tmp_path_factory.mktemp("seed")
    demo.seed(hub.url, TOKEN, seed, PAIR)
    hub.add_token(READER, "reader")
    work = tmp_path_factory.mktemp("official")
    source = safe_copy(seed / SEEDED_KIND / "target", work / "src")
    request = ExportRequest(
        role="target", source=source, output=work / "ir", task=target_task(False), trust_remote_code=False
    )
    exported = export_model(request, RECIPE.export, log_dir=work / "logs", home=work / "home")
    assert ANNOTATION.search((exported.ir_dir / "openvino_model.xml").read_text(encoding="utf-8"))
    api = HfApi(endpoint=hub.url, token=TOKEN)
    api.create_repo(OFFICIAL)
    api.upload_folder(repo_id=OFFICIAL, folder_path=exported.ir_dir, commit_message="Upload the official int4 IR")
    # An official repo serves only a draft of the model its card names (bot.plan.official.why_not_named).
    card = f"---\nbase_model: {demo.TARGET_REPO}\nbase_model_relation: quantized\n---\n# {OFFICIAL}\n"
    api.upload_file(path_or_fileobj=card.encode(), path_in_repo="README.md", repo_id=OFFICIAL)
    return hub


def _run(hub: LocalHub, work: Path):
    return run(RECIPE, Hub(hub.url, READER), Hub(hub.url, TOKEN), RunOptions(work=work))


def _outcome(report):
    return next(o for o in report.outcomes if o.source == demo.DRAFT_REPO)


@pytest.fixture(scope="module")
def served(hub, tmp_path_factory):
    """The first run, with the annotated official IR on the Hub."""
    api = HfApi(endpoint=hub.url, token=TOKEN)
    return _run(hub, tmp_path_factory.mktemp("served")), api.model_info(OFFICIAL).sha


def test_an_official_target_with_the_hidden_state_annotation_serves_and_no_target_repo_is_made(hub, served):
    report, official_sha = served
    outcome = _outcome(report)
    assert outcome.status == "published", outcome
    draft_repo = outcome.repos[0]
    assert outcome.repos == [draft_repo, OFFICIAL]
    assert f"validated against the official target {OFFICIAL}@{official_sha[:7]}" in outcome.reason
    api = HfApi(endpoint=hub.url, token=TOKEN)
    assert not api.repo_exists(TARGET_OUT)  # nothing exported, nothing published under the bot's namespace
    assert report.exit_code == 0

    reader = Hub(hub.url, TOKEN)
    record = reader.draft_record(draft_repo)
    assert record is not None and record.passed and record.validation.lossless
    assert record.official_target is not None
    assert record.official_target.model_dump() == {
        "repo": OFFICIAL,
        "revision": official_sha,
        "used": True,
        "reason": None,
    }
    assert record.repos is not None and record.repos.target == OFFICIAL
    assert record.target.repo == demo.TARGET_REPO  # the model is still the source target
    assert "export-target" not in record.resources and record.quality is not None
    assert record.inspect.target.hidden_state_layers  # checked on the official IR
    # The record lists the official files the draft was validated with, as the Hub lists them at that commit.
    assert record.files is not None
    listed = {f.rfilename: f for f in api.model_info(OFFICIAL, files_metadata=True).siblings}
    assert "openvino_model.bin" in record.files.target
    for name, digest in record.files.target.items():
        hub_file = listed[name]
        assert (hub_file.lfs.sha256 if hub_file.lfs else digest.git_blob_id) == (
            digest.sha256 if hub_file.lfs else hub_file.blob_id
        )
    assert "tokenizer.json" in record.files.target_source

    card = reader.read_file(draft_repo, "README.md").decode()
    assert f"[{OFFICIAL}](https://huggingface.co/{OFFICIAL}), the official OpenVINO export" in card
    assert f"commit `{official_sha}`" in card
    assert f'hf.snapshot_download("{OFFICIAL}", revision="{official_sha}")' in card

    # The status page and the collection name the official repo as the pair's target, never a bot-made one.
    status = read_status(reader, RECIPE.status_repo_id)
    assert status is not None and status.entry(demo.DRAFT_REPO).target_repo == OFFICIAL
    assert report.collection is not None
    items = {item.item_id for item in api.get_collection(report.collection.rsplit("/collections/", 1)[-1]).items}
    assert draft_repo in items and TARGET_OUT not in items


def test_a_second_run_finds_the_pair_current_and_commits_nothing(hub, served, tmp_path):
    report = _run(hub, tmp_path)
    assert _outcome(report).status == "up-to-date"
    assert report.commits == [] and report.status_commit is None and not report.failed


def test_an_official_ir_without_the_annotation_is_refused_and_the_target_is_exported(hub, served, tmp_path):
    api = HfApi(endpoint=hub.url, token=TOKEN)
    plain = tmp_path / "plain"
    xml = Path(api.hf_hub_download(OFFICIAL, "openvino_model.xml", local_dir=tmp_path / "dl"))
    plain.mkdir()
    text = xml.read_text(encoding="utf-8")
    (plain / "openvino_model.xml").write_text(ANNOTATION.sub("", text), encoding="utf-8")
    assert "hidden_states_decoder_layers" not in (plain / "openvino_model.xml").read_text(encoding="utf-8")
    api.upload_folder(repo_id=OFFICIAL, folder_path=plain, commit_message="An IR exported before optimum-intel 2.2")
    official_sha = api.model_info(OFFICIAL).sha
    # A new source commit: the draft is rebuilt, and its target tried again.
    api.upload_file(path_or_fileobj=b"# note\n", path_in_repo="NOTES.md", repo_id=demo.DRAFT_REPO)
    shutil.rmtree(tmp_path / "dl")

    report = _run(hub, tmp_path / "work")
    outcome = _outcome(report)
    assert outcome.status == "published", outcome
    reason = f"official target {OFFICIAL} not used: target IR has no hidden_states_decoder_layers rt_info"
    assert reason in outcome.reason
    assert outcome.repos[1] == TARGET_OUT and api.repo_exists(TARGET_OUT)
    assert "openvino_model.bin" in set(api.list_repo_files(TARGET_OUT))
    record = Hub(hub.url, TOKEN).draft_record(outcome.repos[0])
    assert record is not None and record.official_target is not None
    assert record.official_target.used is False and record.official_target.revision == official_sha
    assert record.official_target.reason and "hidden_states_decoder_layers" in record.official_target.reason
    assert record.repos is not None and record.repos.target == TARGET_OUT and "export-target" in record.resources
