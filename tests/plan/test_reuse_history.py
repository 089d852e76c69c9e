"""Issue 29, classes 3 and 6: reuse believes a published target only when the bot wrote its files.

On a real local Hub, a target repo is seeded as the publisher writes it (`Export target ...` with the files and
their record, then card-only commits), without an export. A collaborator who replaces the IR and the chat template
and rewrites the record to match, followed by a card-only commit of the bot, leaves a head commit by the bot over
her files: `plan_reuse` must read the history and refuse, naming her commit. A card commit of a second recipe that
shares the target (same bot user) must not make the target look changed outside the bot, even when the status
memory of the first recipe says its sha moved.
"""

from __future__ import annotations

import hashlib

import pytest
from huggingface_hub import CommitOperationAdd, HfApi

from bot.core import record
from bot.core.recipe import ExportSettings
from bot.core.record import FileDigest, TargetRecord
from bot.core.toolchain import Toolchain
from bot.hub.client import Hub
from bot.plan.reuse import plan_reuse
from bot.publish.publisher import _message
from tests.conftest import HUB_TOKEN
from tests.publish.handmade import TARGET
from tests.records import TARGET_SHA, TOOLCHAIN, build_record

pytestmark = [
    pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Warnings while validating metadata in README.md"),  # the seeded cards
]

NS = "OpenVINO-drafts"
BOT = "maintainer"  # the local Hub's main user: the bot's
ALICE, ALICE_TOKEN = "alice", "hf_alice_collaborator_write"
TASK = "text-generation-with-past"
TOOLS = Toolchain(versions=dict(TOOLCHAIN), capabilities=frozenset({"dflash-stateful"}))


@pytest.fixture(scope="module")
def hub(hub):
    hub.add_token(ALICE_TOKEN, ALICE, write=True, orgs=[NS])
    return hub


def _record(files: dict[str, bytes], recipe: str = "dflash", drafts: int = 0) -> bytes:
    listed = {
        name: FileDigest(
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            git_blob_id=hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(),  # what the Hub lists for it
        )
        for name, data in files.items()
    }
    built = build_record()
    built = built.model_copy(update={"recipe": built.recipe.model_copy(update={"name": recipe})})
    target = TargetRecord.from_build(built, [], "fp").model_copy(update={"files": listed})
    summaries = [built.summary(f"{NS}/Draft-{i}-int4-ov") for i in range(drafts)]
    for summary in summaries:
        target = target.with_draft(summary, "fp")
    return record.to_json(target).encode()


def _commit(token: str, repo: str, files: dict[str, bytes], title: str) -> str:
    api = HfApi(endpoint=HUB_URL[0], token=token)
    operations = [CommitOperationAdd(name, data) for name, data in sorted(files.items())]
    return api.create_commit(repo, operations, commit_message=title).oid


HUB_URL: list[str] = []


def _publish_target(hub, repo: str) -> None:
    """The target repo as the publisher leaves it: the export commit, then a card-only commit."""
    HUB_URL[:] = [hub.url]
    HfApi(endpoint=hub.url, token=HUB_TOKEN).create_repo(repo)
    title = _message("target", build_record().target, "int4")
    _commit(HUB_TOKEN, repo, {**TARGET, record.PROVENANCE_FILE: _record(TARGET), "README.md": b"# t\n"}, title)
    card = {record.PROVENANCE_FILE: _record(TARGET, drafts=1), "README.md": b"# t, 1 draft\n"}
    _commit(HUB_TOKEN, repo, card, "List 1 validated draft(s) on the model card")


def _reuse(hub, repo: str, **kwargs):
    reader = Hub(hub.url)
    return plan_reuse(reader, repo, TARGET_SHA, ExportSettings(), TASK, TOOLS, bot_user=BOT, **kwargs)


def test_a_collaborators_files_under_a_card_commit_of_the_bot_are_not_reused(hub):
    repo = f"{NS}/Qwen3-Tiny-int4-ov"
    _publish_target(hub, repo)
    reused, why_not = _reuse(hub, repo)
    assert why_not is None and reused is not None  # the control: the bot's own files are reused

    # She replaces the IR and the chat template, and rewrites the record to list her files: consistent.
    hers = {**TARGET, "openvino_model.bin": b"\x66" * 64, "chat_template.jinja": b"{{ 'pwned' }}"}
    changed = {name: hers[name] for name in ("openvino_model.bin", "chat_template.jinja")}
    her_commit = _commit(ALICE_TOKEN, repo, {**changed, record.PROVENANCE_FILE: _record(hers)}, "Better weights")
    # The bot's next run lists a new draft on the card: a card-only commit by the bot on top of her files.
    _commit(HUB_TOKEN, repo, {record.PROVENANCE_FILE: _record(hers, drafts=2), "README.md": b"# t, 2\n"}, "List 2")
    assert HfApi(endpoint=hub.url).list_repo_commits(repo)[0].authors == [BOT]

    reused, why_not = _reuse(hub, repo)
    assert reused is None
    assert why_not == (
        f"{repo} not reused: target repo changed outside the bot: commit {her_commit[:7]} ('Better weights') is by "
        f"{ALICE}, not {BOT}"
    )


def test_a_card_commit_of_another_recipe_sharing_the_target_is_the_bots(hub):
    """Two recipes publish as one user: the second's card commit moves the sha the first recipe's status memory
    recorded (`changed_outside`), yet every file is still the bot's export's, so both reuse the target."""
    repo = f"{NS}/Qwen3-Shared-int4-ov"
    _publish_target(hub, repo)
    card = {record.PROVENANCE_FILE: _record(TARGET, recipe="dspark", drafts=2), "README.md": b"# t, 2\n"}
    _commit(HUB_TOKEN, repo, card, "List 2 validated draft(s) on the model card")
    reused, why_not = _reuse(hub, repo, changed_outside=True)
    assert why_not is None and reused is not None and reused.revision == Hub(hub.url).head(repo)


def test_a_record_whose_file_list_no_export_commit_of_the_bot_wrote_is_not_reused(hub):
    """Her files, committed by the bot's user in a card-only commit (the list copied from a record she wrote
    before her commit was rewritten away): the export commit's record lists other files."""
    repo = f"{NS}/Qwen3-Copied-int4-ov"
    _publish_target(hub, repo)
    hers = {**TARGET, "chat_template.jinja": b"{{ 'pwned' }}"}
    files = {"chat_template.jinja": hers["chat_template.jinja"], record.PROVENANCE_FILE: _record(hers)}
    _commit(HUB_TOKEN, repo, files, "List 1 validated draft(s) on the model card")
    reused, why_not = _reuse(hub, repo)
    assert reused is None and why_not is not None
    assert "its record lists other files than the bot's export commit" in why_not


def test_publish_commits_the_bots_files_over_a_collaborators_consistent_record(hub, tmp_path):
    """The publisher's side of the same check: a new draft for a target whose files and record she rewrote is
    published with the target's files committed again (before: a card-only commit certified her files)."""
    from bot.core.record import Repos
    from bot.publish.publisher import publish_bundle
    from tests.publish.handmade import make_bundle, seed_sources

    seed_sources(hub.url, HUB_TOKEN)
    repos = Repos(draft=f"{NS}/Qwen3-Tiny-DFlash-b16-forged-int4-ov", target=f"{NS}/Qwen3-Forged-int4-ov")
    _publish_target(hub, repos.target)
    hers = {**TARGET, "openvino_model.bin": b"\x66" * 64, "chat_template.jinja": b"{{ 'pwned' }}"}
    changed = {name: hers[name] for name in ("openvino_model.bin", "chat_template.jinja")}
    _commit(ALICE_TOKEN, repos.target, {**changed, record.PROVENANCE_FILE: _record(hers)}, "Better weights")

    result = publish_bundle(Hub(hub.url, HUB_TOKEN), make_bundle(tmp_path / "b", repos=repos), repos, private=False)
    assert [repo for repo, _ in result.commits].count(repos.target) >= 1
    reader = Hub(hub.url)
    assert reader.read_file(repos.target, "chat_template.jinja") == TARGET["chat_template.jinja"]
    assert reader.read_file(repos.target, "openvino_model.bin") == TARGET["openvino_model.bin"]
    titles = [c.title for c in HfApi(endpoint=hub.url).list_repo_commits(repos.target)]
    assert any(title.startswith("Export target ") for title in titles[: titles.index("Better weights")])
    assert _reuse(hub, repos.target)[1] is None  # the bot's own files again: reusable
