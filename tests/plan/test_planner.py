"""Plan decisions on plain records (no Hub, no export): when a published build is current, and why not."""

from __future__ import annotations

import pytest

from bot.core.hub_records import RepoListing
from bot.core.naming import draft_output_repo, target_output_repo
from bot.core.toolchain import CAPABILITY_DFLASH, CAPABILITY_PER_ROW, Toolchain
from bot.discover.candidates import Candidate
from bot.plan.job import BuildJob
from bot.plan.planner import Action, Decision, card_refreshes, decide
from tests.conftest import fast_recipe
from tests.records import SOURCE_SHA, TARGET_SHA, TOOLCHAIN, build_record

RECIPE = fast_recipe()
TOOLS = Toolchain(versions=dict(TOOLCHAIN), capabilities=frozenset({CAPABILITY_DFLASH}))


def listing(sha: str = SOURCE_SHA) -> RepoListing:
    return RepoListing(
        repo_id="z-lab/Qwen3-Tiny-DFlash-b16",
        sha=sha,
        last_modified=None,
        tags=(),
        gated=False,
        private=False,
        architectures=("DFlashDraftModel",),
        model_type="qwen3",
    )


def published(**kwargs):
    from tests.records import REPOS

    return build_record(recipe_fingerprint=RECIPE.fingerprint(), **kwargs).published_as(REPOS, "card")


def run_decide(record, *, sha=SOURCE_SHA, toolchain=TOOLS, card="card", target=TARGET_SHA, force=False):
    return decide(
        listing(sha),
        record,
        publish=RECIPE.publish,
        recipe_fingerprint=RECIPE.fingerprint(),
        toolchain=toolchain,
        card_fingerprint=card,
        target_revision=target,
        force=force,
    )


def test_nothing_published_is_a_new_build():
    decision = run_decide(None)
    assert (decision.action, decision.reasons) == (Action.BUILD, ("new",))
    assert decision.draft_repo is None  # nothing published: the build's measurement names the repo


def test_an_unchanged_source_is_up_to_date_and_names_both_repos():
    decision = run_decide(published())
    assert decision.action == Action.UP_TO_DATE and decision.reasons == ()
    assert decision.repos().target == "OpenVINO-drafts/Qwen3-Tiny-int4-ov"


def test_each_changed_input_rebuilds_with_its_reason():
    record = published()
    assert run_decide(record, sha="c" * 40).reasons == ("source changed (aaaaaaa -> ccccccc)",)
    assert run_decide(record, target="d" * 40).reasons == ("target changed (bbbbbbb -> ddddddd)",)
    newer = Toolchain(versions={**TOOLCHAIN, "nncf": "3.5.0"}, capabilities=TOOLS.capabilities)
    assert run_decide(record, toolchain=newer).reasons == ("toolchain changed (nncf 3.4.0 -> 3.5.0)",)
    per_row = Toolchain(versions=dict(TOOLCHAIN), capabilities=frozenset({CAPABILITY_DFLASH, CAPABILITY_PER_ROW}))
    assert run_decide(record, toolchain=per_row).reasons == ("draft format changed (stateful -> per-row)",)
    other_recipe = build_record(recipe_fingerprint="f" * 16)
    assert run_decide(other_recipe.published_as(record.repos, "card")).reasons == ("recipe changed",)


def test_an_unknown_target_revision_is_not_a_change():
    assert run_decide(published(), target=None).action == Action.UP_TO_DATE


def test_a_changed_card_template_only_rerenders_and_force_always_builds():
    assert run_decide(published(), card="new-card").action == Action.CARD
    assert run_decide(published(), force=True).reasons == ("forced",)


def test_a_build_job_carries_discoverys_facts_and_both_output_repos():
    candidate = Candidate(
        repo_id="z-lab/Qwen3-Tiny-DFlash-b16",
        revision=SOURCE_SHA,
        kind="dflash",
        draft_format="stateful",
        target_repo="Qwen/Qwen3-Tiny",
        target_revision=TARGET_SHA,
        target_model_type="qwen3",
        target_is_vlm=False,
        draft_bytes=10,
        target_bytes=20,
        profile="default",
    )
    job = BuildJob.from_candidate(candidate, ("new",), RECIPE.publish, formats=["int8", "int4"])
    assert job.repos.draft == draft_output_repo(RECIPE.publish, candidate.repo_id, "int8")  # the first format's
    assert job.repos_for("int4").draft == "OpenVINO-drafts/Qwen3-Tiny-DFlash-b16-int4-ov"
    assert job.published_format is None and job.replaced_repo("int4") is None
    # Published as int8 before: a build that chooses int4 goes to the int4 repo and replaces the int8 one.
    moved = BuildJob.from_candidate(
        candidate, ("forced",), RECIPE.publish, published=("OpenVINO-drafts/Qwen3-Tiny-DFlash-b16-int8-ov", "int8")
    )
    assert moved.replaced_repo("int4") == "OpenVINO-drafts/Qwen3-Tiny-DFlash-b16-int8-ov"
    assert moved.replaced_repo("int8") is None
    assert (
        job.repos.target
        == target_output_repo(RECIPE.publish, "Qwen/Qwen3-Tiny")
        == "OpenVINO-drafts/Qwen3-Tiny-int4-ov"
    )
    assert job.candidate == candidate and (job.source, job.target) == (candidate.repo_id, "Qwen/Qwen3-Tiny")
    assert BuildJob.model_validate_json(job.model_dump_json()) == job


def test_a_probe_with_the_per_row_and_dspark_capabilities_plans_reexports_and_dspark_builds():
    """What a toolchain bump that ships PR #2096 does to the next scheduled run (issue 15.5)."""
    from bot.core.errors import Skip
    from bot.core.toolchain import CAPABILITY_DSPARK
    from bot.discover.checkpoints import DraftSpec, classify_draft, require_exportable

    richer = Toolchain(
        versions=dict(TOOLCHAIN), capabilities=frozenset({CAPABILITY_DFLASH, CAPABILITY_PER_ROW, CAPABILITY_DSPARK})
    )
    # Every published stateful draft is re-exported in the per-row format, and only for that reason.
    assert run_decide(published(), toolchain=richer).reasons == ("draft format changed (stateful -> per-row)",)
    assert run_decide(published(), toolchain=TOOLS).action == Action.UP_TO_DATE
    # DSpark drafts are no longer ruled out by the listing, and a markov_rank 0 one plans as a per-row build.
    dspark = RepoListing(
        repo_id="deepseek-ai/dspark_qwen3_8b_block7",
        sha=SOURCE_SHA,
        last_modified=None,
        tags=(),
        gated=False,
        private=False,
        architectures=("Qwen3DSparkModel",),
        model_type="qwen3",
    )
    spec = DraftSpec.of_kind("dspark", dspark.architectures[0], dspark.model_type or "")
    with pytest.raises(Skip, match="DSpark drafts need the per-row DFlash export"):
        require_exportable(spec, TOOLS)
    require_exportable(spec, richer)  # exportable: no skip
    config = {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "mask_token_id": 3,
        "target_layer_ids": [1],
        "block_size": 7,
        "markov_rank": 0,
    }
    assert require_exportable(classify_draft(config), richer) == "per-row"
    with pytest.raises(Skip, match="markov_rank 256"):
        require_exportable(classify_draft({**config, "markov_rank": 256}), richer)


def card_decision(repo: str, action: Action, published=None) -> Decision:
    listing = RepoListing(
        repo_id=repo,
        sha="a" * 40,
        last_modified=None,
        tags=(),
        gated=False,
        private=False,
        architectures=(),
        model_type=None,
    )
    return Decision(listing=listing, action=action, reasons=(), draft_repo=None, published=published)


def test_card_refreshes_are_the_published_records_of_card_decisions():
    record = build_record()
    decisions = [
        card_decision("z/A", Action.CARD, record),
        card_decision("z/B", Action.BUILD, record),
        card_decision("z/C", Action.UP_TO_DATE, record),
        card_decision("z/D", Action.CARD, None),
    ]
    assert card_refreshes(decisions) == [record]
