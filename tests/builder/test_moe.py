"""Mixture-of-experts targets end to end, in the default toolchain profile: Qwen3-MoE (`qwen3_moe`, an LLM, the
family of Qwen3-Coder-30B-A3B) and Qwen3.5-MoE (`qwen3_5_moe`, a VLM with hybrid attention, Qwen3.5-35B-A3B's).

optimum-intel 2.2.0 exports both and writes their hidden-state annotation (`convert.py` lists both model types);
these builds prove it on the oracle pairs (`tinymodels.moe`): built, inspected (one PagedAttention op per attention
layer, no state left), validated lossless with every drafted token accepted. Two real builds per session, from the
session's `built` fixture (about 1.5 and 2.5 minutes on two quiet cores).
"""

from __future__ import annotations

import json

import pytest
from safetensors import safe_open

from bot.core.profiles import select_profile

# kind -> (model_type, attention layers, linear-attention layers, pipeline)
PAIRS = {
    "oracle-qwen3_moe": ("qwen3_moe", 4, 0, "LLMPipeline"),
    "oracle-qwen3_5_moe": ("qwen3_5_moe", 2, 6, "VLMPipeline"),
}


def record(outcome) -> dict:
    assert outcome.error is None, outcome.error.one_line()
    return outcome.bundle.record.model_dump(mode="json", by_alias=True)


def weight_names(folder) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
        return set(weights.keys())


@pytest.mark.parametrize("kind", list(PAIRS))
def test_the_tiny_moe_target_stores_one_tensor_per_expert_as_the_hub_does(tiny, kind):
    model_type = PAIRS[kind][0]
    pair = tiny(kind)
    config = json.loads((pair.target / "config.json").read_text())
    text = config.get("text_config", config)
    assert config["model_type"] == model_type and text["num_experts"] == 4 and text["num_experts_per_tok"] == 2
    names = weight_names(pair.target)
    prefix = "model.language_model." if "text_config" in config else "model."
    expert = f"{prefix}layers.0.mlp.experts"
    assert {f"{expert}.{e}.{proj}.weight" for e in range(4) for proj in ("gate_proj", "up_proj", "down_proj")} <= names
    assert not any(name.endswith(("gate_up_proj", "experts.down_proj")) for name in names)  # none fused
    if model_type == "qwen3_5_moe":
        assert f"{prefix}layers.0.mlp.shared_expert.down_proj.weight" in names


@pytest.mark.parametrize("kind", list(PAIRS))
def test_the_moe_family_builds_in_the_default_profile(kind):
    assert select_profile(PAIRS[kind][0]).name == "default"


@pytest.mark.parametrize("kind", list(PAIRS))
def test_a_moe_pair_is_built_inspected_and_validated_lossless(built, kind):
    model_type, attention, linear, pipeline = PAIRS[kind]
    p = record(built(kind))
    assert p["status"] == "validated"
    assert p["target"]["model_type"] == model_type and p["toolchain"]["profile"] == "default"
    target = p["inspect"]["target"]
    # One PagedAttention op per attention layer, nothing of SDPA or state left: GenAI's continuous batching runs it.
    assert (target["attention_layers"], target["paged_attention_ops"]) == (attention, attention)
    assert target["paged_attention_ready"] and target["sdpa_left"] == 0 and target["state_ops_left"] == 0
    assert target["linear_attention_layers"] == linear
    # The exporter annotated every layer's hidden state: what GenAI taps for the draft.
    assert target["hidden_state_layers"] == list(range(attention + linear))
    v = p["validation"]
    assert v["pipeline"] == pipeline and v["lossless"] is True and v["mismatches"] == []
    assert v["default_properties"]["lossless"] is True
    for run in v["runs"]:  # the oracle draft is always right: every drafted token accepted
        assert run["accept_length"] == pytest.approx(run["num_assistant_tokens"] + 1)
