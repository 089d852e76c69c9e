"""Every draft layout on the Hub, named (issue 32): the classifier on tiny copies of real configs, and a dry run of
the shipped recipe over a local Hub holding one repo of each layout."""

from __future__ import annotations

import pytest

from bot.core import draft_formats
from bot.core.errors import Skip
from bot.core.recipe import load_recipe
from bot.core.toolchain import CAPABILITY_DFLASH, CAPABILITY_DSPARK, CAPABILITY_PER_ROW, Toolchain, detect
from bot.discover.checkpoints import classify_draft, require_exportable
from tinymodels.hub_layouts import LAYOUT_REPOS, NOT_SOURCES, TARGET_REPOS, seed_layouts

STRANGER = "community/Qwen3-8B-DSpark-SpecForge"  # the one layout repo by an author the shipped recipe does not trust
LAYOUT_SKIPS = [repo for repo in LAYOUT_REPOS if repo.repo_id not in ("z-lab/gpt-oss-20b-DFlash",)]


@pytest.mark.parametrize("repo", LAYOUT_SKIPS, ids=lambda repo: repo.repo_id)
def test_each_layout_is_named_with_the_field_that_decided_it_and_what_it_waits_for(repo):
    draft = classify_draft(repo.config)
    assert draft.layout == repo.layout
    with pytest.raises(Skip) as caught:
        require_exportable(draft, detect(), target=repo.target)
    facts = draft_formats.describe_reason(caught.value.message)
    assert facts == draft_formats.SkipFacts(repo.layout, repo.target, draft_formats.layout(repo.layout).needs)
    assert repo.decided_by in caught.value.message


def test_speculators_format_is_told_by_its_model_type_not_its_borrowed_architecture():
    (dspark,) = [repo for repo in LAYOUT_REPOS if repo.layout == "speculators-dspark"]
    draft = classify_draft(dspark.config)
    assert draft.architecture == "DSparkDraftModel" and draft.kind == "dspark"
    # Counted from the embedding: hidden_states index 2 is the output of layer 1.
    assert draft.target_layer_ids == (1, 2) and draft.hidden_size == 64 and draft.candidate_offset == 0
    assert draft.target_hint == "Qwen/Qwen3-8B"
    richer = Toolchain(
        versions=detect().versions, capabilities=frozenset({CAPABILITY_DFLASH, CAPABILITY_PER_ROW, CAPABILITY_DSPARK})
    )
    # A toolchain that exports DSpark (per-row) still cannot read this layout.
    with pytest.raises(Skip, match="speculators-layout"):
        require_exportable(draft, richer)


def test_deepspec_dflash_becomes_a_per_row_build_and_true_dspark_keeps_waiting():
    by_layout = {repo.repo_id: classify_draft(repo.config) for repo in LAYOUT_REPOS}
    richer = Toolchain(
        versions=detect().versions, capabilities=frozenset({CAPABILITY_DFLASH, CAPABILITY_PER_ROW, CAPABILITY_DSPARK})
    )
    assert require_exportable(by_layout["deepseek-ai/dflash_qwen3_8b_block7"], richer) == "per-row"
    with pytest.raises(Skip, match="markov_rank 256"):
        require_exportable(by_layout["deepseek-ai/dspark_qwen3_8b_block7"], richer)


def test_a_dry_run_of_the_shipped_recipe_names_every_layout(tmp_path):
    """The shipped recipe's Hub-wide sources find every layout, whoever publishes it, and no OpenVINO export; each
    gets its layout, target and the capability it waits for, before any target lookup (gpt-oss: its family)."""
    from bot.hub.client import Hub
    from bot.hub.transport import configure_client
    from bot.plan.step import RunOptions
    from bot.run.pipeline import run
    from hubserver import LocalHub

    with LocalHub(tmp_path / "hub", user="maintainer", token="hf_write") as server:
        configure_client(server.url)
        seed_layouts(server.url, "hf_write", tmp_path / "seed")
        hub = Hub(server.url, "hf_write")
        report = run(load_recipe(), hub, hub, RunOptions(dry_run=True, work=tmp_path / "w"))
        # SpecForge's community upload is by an author the recipe does not trust: seen, not approved (issue 39); a
        # maintainer's dispatch of it gets its layout named like any other.
        dispatched = run(load_recipe(), hub, hub, RunOptions(dry_run=True, only=STRANGER, work=tmp_path / "d"))
    outcomes = {outcome.source: outcome for outcome in report.outcomes}
    assert not set(NOT_SOURCES) & set(outcomes) and not set(TARGET_REPOS) & set(outcomes)
    stranger = outcomes.pop(STRANGER)
    assert (stranger.status, stranger.stage) == ("skipped", "approve") and "author 'community'" in stranger.reason
    outcomes[STRANGER] = next(outcome for outcome in dispatched.outcomes if outcome.source == STRANGER)
    for repo in LAYOUT_REPOS:
        outcome = outcomes[repo.repo_id]
        facts = draft_formats.describe_reason(outcome.reason)
        assert outcome.status == "skipped" and facts is not None, (repo.repo_id, outcome)
        assert (facts.layout, facts.target) == (repo.layout, repo.target), outcome.reason
        assert repo.decided_by in outcome.reason
    gpt_oss = draft_formats.describe_reason(outcomes["z-lab/gpt-oss-20b-DFlash"].reason)
    assert gpt_oss is not None and "gpt_oss" in gpt_oss.waits_for
