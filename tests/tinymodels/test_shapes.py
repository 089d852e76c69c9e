"""Real-shape random checkpoints (tinymodels.shapes): the Hub's tensor names, shapes, bytes and shard layout."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors import safe_open

from tinymodels import shapes
from tinymodels.shapes import SHAPES, Shape, checkpoint_bytes, draft_shapes, make_shape, target_shapes
from tinymodels.weights import Dims


@pytest.mark.parametrize(
    ("name", "target_bytes", "draft_bytes"),
    [
        ("qwen3-1.7b", 3_441_149_952, 545_311_232),
        ("qwen3-4b", 8_044_936_192, 1_074_854_400),  # notes/scale-on-cpu.md: 8.05 GB
        ("qwen3-8b", 16_381_470_720, 2_097_252_864),  # z-lab/Qwen3-8B-DFlash-b16: 2,097,259,104 with its header
        # google/gemma-4-31B-it: 31,273,088,876 bf16 parameters (its published count), vision tower included; the
        # tensors come from transformers 5.5.4 in the gemma4 profile's python (the default pins lack Gemma 4).
        ("gemma-4-31b", 62_546_177_752, 3_071_934_976),
    ],
)
def test_shapes_have_the_real_checkpoints_bytes(name, target_bytes, draft_bytes):
    assert checkpoint_bytes(target_shapes(SHAPES[name])) == target_bytes
    assert checkpoint_bytes(draft_shapes(SHAPES[name])) == draft_bytes


def test_draft_taps_follow_zlab():
    assert SHAPES["qwen3-4b"].target_layer_ids == (1, 9, 17, 25, 33)  # z-lab's 36-layer targets
    assert SHAPES["qwen3-1.7b"].target_layer_ids == (1, 7, 13, 19, 25)


def test_a_small_shape_is_written_in_shards_that_transformers_loads(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    small = Shape(
        "qwen3-small",
        "Qwen/Qwen3-Small",
        "qwen3",
        Dims(hidden=128, layers=12, heads=4, kv_heads=2, head_dim=32, intermediate=256),
        tied=True,
    )
    monkeypatch.setattr(shapes, "SHARD_BYTES", 20_000_000)  # the 151,936-row embedding alone is 39 MB
    pair = make_shape(small, tmp_path / "pair")
    index = json.loads((pair.target / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    assert index["metadata"]["total_size"] == checkpoint_bytes(target_shapes(small))
    model, info = AutoModelForCausalLM.from_pretrained(pair.target, output_loading_info=True, dtype=torch.bfloat16)
    assert not any(info.values()), info  # no missing, unexpected or mismatched tensor
    assert model.config.vocab_size == 151936 and model.config.tie_word_embeddings

    config = json.loads((pair.draft / "config.json").read_text())
    assert config["dflash_config"] == {"mask_token_id": 151669, "target_layer_ids": [1, 3, 5, 7, 9]}
    assert config["num_target_layers"] == 12 and config["num_hidden_layers"] == 5
    with safe_open(pair.draft / "model.safetensors", "pt") as f:
        names = f.keys()  # a safe_open has keys() but cannot be iterated
        assert {name: tuple(f.get_slice(name).get_shape()) for name in names} == draft_shapes(small)
        assert f.get_tensor("fc.weight").dtype == torch.bfloat16
    assert "in conjunction with the target model Qwen/Qwen3-Small" in (pair.draft / "README.md").read_text()


def test_unknown_shape_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"qwen3-0\.6b, qwen3-1\.7b"):
        make_shape("qwen3-3b", tmp_path)
    assert dataclasses.is_dataclass(SHAPES["qwen3.5-0.8b"])


def test_a_qwen3_5_cut_keeps_both_attention_kinds_and_refuses_one_layer():
    # optimum-intel's Qwen3.5 export looks up a linear-attention layer: a one-layer cut (full attention only) fails
    # its trace with "'linear_attention' is not in list", so the cut is refused before minutes of weights are written.
    with pytest.raises(ValueError, match="linear- and a full-attention layer"):
        shapes.shape_named("qwen3.5-27b@1")
    assert shapes.layer_types(2) == ["linear_attention", "full_attention"]
    assert shapes.shape_named("qwen3-coder-30b-a3b@1").dims.layers == 1


def test_a_gemma4_cut_keeps_both_attention_kinds_and_refuses_one_layer():
    # Gemma 4 makes its last layer full attention whatever the config says: a one-layer cut has no sliding layer.
    with pytest.raises(ValueError, match="sliding-window and a full-attention layer"):
        shapes.shape_named("gemma-4-31b@1")
    assert shapes.gemma4_layer_types(2) == ["sliding_attention", "full_attention"]
    assert shapes.gemma4_layer_types(7) == ["sliding_attention"] * 5 + ["full_attention"] * 2
    assert SHAPES["gemma-4-31b"].target_layer_ids == (1, 12, 23, 34, 45, 56)  # six taps, as z-lab's 31B draft


def test_a_moe_cut_keeps_the_widths_and_drops_whole_experts():
    # bench/scale.py measures qwen3_5_moe at more depths than its 256 experts a layer fit here (`NAME@NxE`): the cut
    # drops whole experts, so what it saves is exactly their tensors, and every width and the routing stay real.
    cut = shapes.shape_named("qwen3.5-35b-a3b@3x64")
    whole = shapes.shape_named("qwen3.5-35b-a3b@3")
    assert (cut.name, cut.dims, cut.experts.count) == ("qwen3.5-35b-a3b@3x64", whole.dims, 64)
    assert dataclasses.replace(cut.experts, count=256) == whole.experts
    expert_bytes = (3 * 2048 * 512 + 2048) * 2  # gate, up and down of one expert and its router row, bf16
    saved = checkpoint_bytes(target_shapes(whole)) - checkpoint_bytes(target_shapes(cut))
    assert saved == 3 * (256 - 64) * expert_bytes
    with pytest.raises(ValueError, match="no experts"):
        shapes.shape_named("qwen3-8b@2x4")
    with pytest.raises(ValueError, match="256 experts, 8 routed"):
        shapes.shape_named("qwen3.5-35b-a3b@2x4")
    with pytest.raises(ValueError, match=r"or qwen3\.5-35b-a3b@2x64"):
        shapes.shape_named("qwen3.5-35b-a3b@2x")
