"""Classification and cross-checks: every broken or unsupported checkpoint is refused before any export."""

from __future__ import annotations

import json

import pytest

from bot.build import SourceRef, classify_pair
from bot.checkpoints import classify_draft, read_target
from bot.errors import Skip
from bot.fetch import safe_copy
from bot.toolchain import CAPABILITY_DFLASH, CAPABILITY_DSPARK, CAPABILITY_PER_ROW, Toolchain, detect
from tests.conftest import fast_recipe

BROKEN = {
    "broken-llama": "model_type 'llama'",
    "broken-layer-ids": "target_layer_ids [1, 40] reach beyond",
    "broken-hidden-size": "hidden_size 256 differs",
    "broken-mask-token": "mask_token_id 5000 is outside",
    "broken-no-dflash-config": "has no dflash_config",
    "broken-config-json": "not valid JSON",
    "broken-pickle": "pickle format (pytorch_model.bin)",
    "broken-truncated": "is truncated",
}


def _refusal(tiny, kind: str, toolchain: Toolchain | None = None) -> Skip:
    pair = tiny(kind)
    with pytest.raises(Skip) as caught:
        classify_pair(SourceRef(pair.draft), SourceRef(pair.target), fast_recipe(), toolchain or detect())
    return caught.value


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_each_broken_variant_is_refused_before_export_with_its_own_reason(tiny, kind):
    error = _refusal(tiny, kind)
    assert BROKEN[kind] in error.message
    assert error.stage in ("classify", "cross-check")


def test_broken_reasons_are_distinct(tiny):
    messages = {kind: _refusal(tiny, kind).message for kind in BROKEN}
    assert len(set(messages.values())) == len(BROKEN)


@pytest.mark.parametrize("kind,needs", [("dspark", "dflash-per-row"), ("dspark-markov", "markov_rank 256"),
                                        ("dflash2", "dflash2 capability")])
def test_unsupported_kinds_name_the_missing_exporter_capability(tiny, kind, needs):
    error = _refusal(tiny, kind)
    assert needs in error.message
    assert "optimum-intel 2.2.0" in error.message


def test_dspark_becomes_buildable_when_the_toolchain_gains_the_capability(tiny):
    richer = Toolchain(versions=detect().versions,
                       capabilities=frozenset({CAPABILITY_DFLASH, CAPABILITY_PER_ROW, CAPABILITY_DSPARK}))
    pair = tiny("dspark")
    classified = classify_pair(SourceRef(pair.draft), SourceRef(pair.target), fast_recipe(), richer)
    assert classified.draft.kind == "dspark" and classified.draft_format == "per-row"


def test_valid_pair_classifies(tiny):
    pair = tiny("dflash")
    classified = classify_pair(SourceRef(pair.draft), SourceRef(pair.target), fast_recipe(), detect())
    assert classified.draft.kind == "dflash" and classified.draft_format == "stateful"
    assert classified.draft.target_layer_ids == (1, 2)
    assert classified.target.num_hidden_layers == 4 and classified.target.vocab_size == 512


def test_vlm_target_dimensions_come_from_text_config():
    config = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
              "text_config": {"hidden_size": 256, "num_hidden_layers": 8, "vocab_size": 1024,
                              "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
                              + ["full_attention"]}}
    target = read_target(config)
    assert (target.hidden_size, target.num_hidden_layers, target.vocab_size) == (256, 8, 1024)
    assert target.is_vlm and target.full_attention_layers == 2


def test_dspark_detected_by_projector_type():
    spec = classify_draft({"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
                           "dflash_config": {"projector_type": "dspark", "mask_token_id": 3,
                                             "target_layer_ids": [1]}})
    assert spec.kind == "dspark"


def test_safe_copy_drops_code_and_pickles_and_strips_auto_map(tiny, tmp_path):
    pair = tiny("dflash")
    (pair.draft / "evil.bin").write_bytes(b"not copied")
    copy = safe_copy(pair.draft, tmp_path / "copy")
    names = sorted(p.name for p in copy.iterdir())
    assert "dflash.py" not in names and "evil.bin" not in names
    assert "model.safetensors" in names and "config.json" in names
    assert "auto_map" not in json.loads((copy / "config.json").read_text())
    (pair.draft / "evil.bin").unlink()
