"""The per-row rules of bot.builder.check_ir on the tiny per-row draft IR (tinymodels.per_row) and its broken variants.

The IRs are real: a torch module converted with openvino.convert_model, and the real SDPA→PagedAttention pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

from bot.builder.check_ir import inspect_draft
from bot.builder.inspect_ir import inspect_folder
from bot.builder.ir_read import read_rt_info
from bot.builder.per_row_rules import DraftLayout, check_per_row
from bot.core.errors import Failure
from bot.discover.checkpoints import DraftSpec
from tinymodels.per_row import DEFECTS, PerRowSpec

SPEC = PerRowSpec()


@pytest.fixture(scope="module")
def per_row_ir(tmp_path_factory):
    """per_row_ir(defect or None) -> IR folder, each written once."""
    from tinymodels.per_row import write_per_row_ir

    made = {}

    def get(defect: str | None = None):
        if defect not in made:
            folder = tmp_path_factory.mktemp(f"per-row-{defect or 'ok'}")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's tracer warnings about constants in the mask
                write_per_row_ir(folder, spec=SPEC, defects={defect} if defect else set())
            made[defect] = folder
        return made[defect]

    return get


def _draft_spec(num_layers: int = len(SPEC.layer_types)) -> DraftSpec:
    return DraftSpec(
        kind="dflash",
        architecture="DFlashDraftModel",
        model_type="qwen3",
        hidden_size=SPEC.hidden_size,
        mask_token_id=SPEC.mask_token_id,
        target_layer_ids=SPEC.target_layer_ids,
        num_layers=num_layers,
    )


def test_fixture_has_the_per_row_signature_and_rt_info(per_row_ir):
    import openvino as ov

    model = ov.Core().read_model(per_row_ir() / "openvino_model.xml")
    assert {i.get_any_name() for i in model.inputs} == {
        "inputs_embeds",
        "hidden_states",
        "position_ids",
        "token_type_ids",
        "beam_idx",
    }
    assert [o.get_any_name() for o in model.outputs] == ["last_hidden_state"]
    assert len(model.get_variables()) == 2 * len(SPEC.layer_types)  # plain KV cache, one key and one value a layer
    rt = read_rt_info(model)
    assert rt["dflash_mode"] == "True"
    assert rt["dflash"] == {"mask_token_id": "3", "target_layer_ids": "1,2", "candidate_position_offset": "1"}


def test_per_row_fixture_passes_every_rule(per_row_ir):
    folder = per_row_ir()
    report = check_per_row(folder / "openvino_model.xml", DraftLayout.read(folder))
    assert report.passed, report.failure_reason()
    assert [r.rule for r in report.rules] == [
        "signature",
        "rt_info",
        "paged_attention",
        "token_type_ids",
        "sliding_window",
    ]
    # One PagedAttention op per draft layer, each with its own window: sliding, full, sliding.
    assert report.paged_attention.paged_attention_ops == len(SPEC.layer_types)
    assert report.paged_attention.sdpa_left == 0 and report.paged_attention.state_ops_left == 0
    assert report.layer_windows == (SPEC.sliding_window, 0, SPEC.sliding_window)


@pytest.mark.parametrize(
    ("defect", "rule", "reason"),
    [
        ("sdpa-layer", "paged_attention", "1 layer(s) left as ScaledDotProductAttention"),
        ("no-token-type-ids", "signature", "missing input(s) ['token_type_ids']"),
        ("no-offset", "rt_info", "missing dflash/candidate_position_offset"),
        ("no-window", "sliding_window", "layer 0 (sliding_attention) has window 0, expected 8"),
    ],
)
def test_each_broken_variant_fails_with_its_own_reason(per_row_ir, defect, rule, reason):
    folder = per_row_ir(defect)
    report = check_per_row(folder / "openvino_model.xml", DraftLayout.read(folder))
    failed = {r.rule: r.detail for r in report.failed()}
    assert rule in failed and reason in failed[rule], failed
    # The variants break one thing each: the rules they do not touch still pass (or were not reached).
    if defect in ("no-offset", "no-window"):
        assert set(failed) == {rule}
    if defect == "sdpa-layer":
        assert set(failed) == {"paged_attention"}
        assert "2 PagedAttention ops for 3 draft attention layers" in failed[rule]


def test_inspect_draft_accepts_a_per_row_draft_as_paged_attention_ready(per_row_ir):
    report = inspect_draft(per_row_ir(), _draft_spec())
    assert report.format == "per-row"
    assert report.paged_attention_ready and report.paged_attention_ops == 3 and report.reason is None
    assert report.candidate_position_offset == 1
    # The check returns the record's own part: what the build record says is what the check found.
    recorded = report.model_dump(mode="json")
    assert recorded["layer_windows"] == [8, 0, 8]
    assert [rule["rule"] for rule in recorded["rules"]] == [
        "signature",
        "rt_info",
        "paged_attention",
        "token_type_ids",
        "sliding_window",
    ]
    assert all(rule["passed"] for rule in recorded["rules"])


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_inspect_draft_fails_a_broken_per_row_draft_naming_the_rule(per_row_ir, defect):
    with pytest.raises(Failure) as caught:
        inspect_draft(per_row_ir(defect), _draft_spec())
    expected_rule = {
        "sdpa-layer": "paged_attention:",
        "no-token-type-ids": "signature:",
        "no-offset": "rt_info:",
        "no-window": "sliding_window:",
    }[defect]
    assert "per-row draft IR breaks the per-row rules" in caught.value.message
    assert expected_rule in caught.value.message
    assert caught.value.stage == "inspect"


def test_inspect_command_prints_every_rule_as_json(per_row_ir):
    ok = subprocess.run(
        [sys.executable, "-m", "bot.cli", "inspect", str(per_row_ir())], capture_output=True, text=True, timeout=300
    )
    assert ok.returncode == 0, ok.stderr
    record = json.loads(ok.stdout)
    assert record["role"] == "draft" and record["format"] == "per-row" and record["passed"] is True
    assert record["paged_attention_ready"] is True and record["layer_windows"] == [8, 0, 8]
    assert {r["rule"] for r in record["rules"]} == {
        "signature",
        "rt_info",
        "paged_attention",
        "token_type_ids",
        "sliding_window",
    }

    broken = subprocess.run(
        [sys.executable, "-m", "bot.cli", "inspect", str(per_row_ir("no-offset"))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert broken.returncode == 1  # a failed check; 2 is a usage error
    record = json.loads(broken.stdout)
    assert record["passed"] is False
    assert [r["rule"] for r in record["rules"] if r["passed"] is False] == ["rt_info"]


def test_inspect_folder_reports_a_folder_without_a_model_as_a_failed_check(tmp_path):
    record = inspect_folder(tmp_path)
    assert record["passed"] is False and record["role"] == "unknown"
    assert [(r["rule"], r["passed"]) for r in record["rules"]] == [("ir_files", False)]
    assert "holds no openvino_model.xml" in record["rules"][0]["detail"]


def test_format_facts_agree_with_what_the_per_row_check_found(per_row_ir):
    from bot.core.draft_formats import PAGED_ATTENTION_READY, facts, report_note

    report = inspect_draft(per_row_ir(), _draft_spec())
    per_row = facts(report.format)
    assert per_row.paged_attention_ready is report.paged_attention_ready is True
    assert per_row.label == PAGED_ATTENTION_READY and "ContinuousBatchingPipeline" in per_row.validation
    assert report_note("per-row") == "per-row draft, PagedAttention-ready"
    stateful = facts("stateful")
    assert not stateful.paged_attention_ready and "one active request" in stateful.limits
    assert report_note("stateful") == "stateful draft" and report_note(None) == ""
    with pytest.raises(KeyError, match="unknown draft format"):
        facts("dflash2")


def test_a_dspark_style_offset_of_zero_passes(tmp_path):
    """DSpark drafts with markov_rank 0 export the same backbone with candidate_position_offset 0."""
    from dataclasses import replace

    from tinymodels.per_row import write_per_row_ir

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = write_per_row_ir(tmp_path, spec=replace(SPEC, candidate_position_offset=0))
    report = check_per_row(path, DraftLayout.read(tmp_path))
    assert report.passed, report.failure_reason()
    assert inspect_draft(tmp_path, _draft_spec()).candidate_position_offset == 0


def test_without_a_config_the_windows_are_reported_not_judged(per_row_ir, tmp_path):
    import shutil

    for name in ("openvino_model.xml", "openvino_model.bin"):
        shutil.copyfile(per_row_ir() / name, tmp_path / name)
    report = check_per_row(tmp_path / "openvino_model.xml", DraftLayout.read(tmp_path))
    window = next(r for r in report.rules if r.rule == "sliding_window")
    assert window.passed is None and "not checked: no config.json" in window.detail
    assert report.passed and report.layer_windows == (8, 0, 8)


def test_inspect_folder_on_a_stateful_bundle_reports_the_expected_refusal(built):
    """The other formats through the same command: a stateful draft (refused by SDPA→PagedAttention, as expected
    for that format) and a target (converted, with the hidden-state annotation)."""
    bundle = built("oracle").bundle
    draft = inspect_folder(bundle.draft_dir)
    assert draft["role"] == "draft" and draft["format"] == "stateful" and draft["passed"] is True
    rules = {r["rule"]: r for r in draft["rules"]}
    assert rules["paged_attention"]["passed"] is False and rules["paged_attention"]["required"] is False
    assert rules["kv_cache_state"]["passed"] and rules["rt_info"]["passed"]
    target = inspect_folder(bundle.target_dir)
    assert target["role"] == "target" and target["passed"] is True
    assert {r["rule"] for r in target["rules"]} == {"paged_attention", "hidden_states_decoder_layers"}


def test_the_ir_computes_what_the_module_does_with_a_bidirectional_block(per_row_ir):
    """The fixture is a working model, not only a graph: the IR's output equals the torch module's, context rows
    are zero, and a block row sees the block rows after it (bidirectional) while context rows do not."""
    import numpy as np
    import openvino as ov
    import torch

    from tinymodels.per_row import per_row_module

    compiled = ov.Core().compile_model(per_row_ir() / "openvino_model.xml", "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    generator = torch.Generator().manual_seed(1)
    embeds = torch.randn(1, 5, SPEC.hidden_size, generator=generator)
    hidden = torch.randn(1, 5, SPEC.hidden_size * len(SPEC.target_layer_ids), generator=generator)
    positions, types = torch.arange(5).unsqueeze(0), torch.tensor([[0, 0, 1, 1, 1]])

    def ir(embeds):
        request = compiled.create_infer_request()  # a fresh request: an empty KV cache
        return request.infer(
            {
                "inputs_embeds": embeds.numpy(),
                "hidden_states": hidden.numpy(),
                "position_ids": positions.numpy(),
                "token_type_ids": types.numpy(),
                "beam_idx": np.array([0], dtype=np.int32),
            }
        )["last_hidden_state"]

    empty = [torch.zeros(1, SPEC.num_heads, 0, SPEC.head_dim)] * (2 * len(SPEC.layer_types))
    with torch.no_grad():
        reference = per_row_module(SPEC)(embeds, hidden, positions, types, *empty)[0].numpy()
    got = ir(embeds)
    np.testing.assert_allclose(got, reference, atol=1e-4)
    assert not got[0, :2].any() and got[0, 2:].any()  # zero in the context rows
    changed = embeds.clone()
    changed[0, 4] += 1.0  # the last block row
    moved = np.abs(ir(changed) - got).max(axis=-1)[0]
    assert moved[2] > 1e-3 and moved[3] > 1e-3  # earlier block rows see it: the block is bidirectional
