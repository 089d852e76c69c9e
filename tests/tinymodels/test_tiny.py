"""Tests for tinymodels: the generated checkouts look like the Hub's, and the constructed targets behave.

Export and GenAI runs on these pairs are covered by the export and validate tests; here everything stays
in files and torch, so the whole module runs in a few seconds.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file

from tinymodels import FOLLOWER_WORD, PREDICTED_WORD, TINY_KINDS, TinyPair, make_tiny

DFLASH_DRAFTS = ("dflash", "oracle", "random")
# The Qwen3.5 (VLM) kinds have their own checkout layout; tests/tinymodels/test_vlm.py covers them.
# The dense Qwen3 targets (the MoE kinds' are tests/builder/test_moe.py's).
QWEN3_KINDS = tuple(kind for kind in TINY_KINDS if not kind.endswith(("-qwen3_5", "_moe")))
CONFIG_DEFECTS = {
    "broken-llama": {"model_type": ("qwen3", "llama")},
    "broken-layer-ids": {"dflash_config.target_layer_ids": ([1, 2], [1, 40])},
    "broken-mask-token": {"dflash_config.mask_token_id": (489, 5000)},
    "broken-no-dflash-config": {
        "dflash_config.mask_token_id": (489, None),
        "dflash_config.target_layer_ids": ([1, 2], None),
    },
}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, TinyPair]:
    root = tmp_path_factory.mktemp("tiny")
    return {kind: make_tiny(kind, root / kind) for kind in QWEN3_KINDS}


def read_config(checkout: Path) -> dict:
    return json.loads((checkout / "config.json").read_text())


def read_card(checkout: Path) -> tuple[dict, str]:
    _, metadata, body = (checkout / "README.md").read_text().split("---\n", 2)
    return yaml.safe_load(metadata), body


def flatten(config: dict, prefix: str = "") -> dict:
    flat: dict = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat |= flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_changes(before: dict, after: dict) -> dict:
    old, new = flatten(before), flatten(after)
    return {key: (old.get(key), new.get(key)) for key in old.keys() | new.keys() if old.get(key) != new.get(key)}


def dflash_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """The tensors a z-lab DFlash checkpoint holds, with the shapes its config implies."""
    hidden, head_dim, inter = config["hidden_size"], config["head_dim"], config["intermediate_size"]
    q, kv = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    fused = len(config.get("dflash_config", {}).get("target_layer_ids", [1, 2])) * hidden
    shapes = {"norm.weight": (hidden,), "fc.weight": (hidden, fused), "hidden_norm.weight": (hidden,)}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}"
        shapes |= {
            f"{p}.self_attn.q_proj.weight": (q, hidden),
            f"{p}.self_attn.k_proj.weight": (kv, hidden),
            f"{p}.self_attn.v_proj.weight": (kv, hidden),
            f"{p}.self_attn.o_proj.weight": (hidden, q),
            f"{p}.self_attn.q_norm.weight": (head_dim,),
            f"{p}.self_attn.k_norm.weight": (head_dim,),
            f"{p}.mlp.gate_proj.weight": (inter, hidden),
            f"{p}.mlp.up_proj.weight": (inter, hidden),
            f"{p}.mlp.down_proj.weight": (hidden, inter),
            f"{p}.input_layernorm.weight": (hidden,),
            f"{p}.post_attention_layernorm.weight": (hidden,),
        }
    return shapes


def assert_bf16_with_shapes(weights: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]]) -> None:
    assert {name: tuple(t.shape) for name, t in weights.items()} == expected
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}


def test_kinds_have_one_line_descriptions():
    assert set(TINY_KINDS) == {
        "dflash", "oracle", "random", "dspark", "dspark-markov", "dflash2", "broken-llama", "broken-layer-ids",
        "broken-hidden-size", "broken-mask-token", "broken-no-dflash-config", "broken-config-json",
        "broken-pickle", "broken-truncated", "dflash-qwen3_5", "oracle-qwen3_5", "partial-qwen3_5", "dflash-deep",
        "oracle-deep", "oracle-qwen3_moe", "oracle-qwen3_5_moe",
    }  # fmt: skip
    assert all(text and "\n" not in text for text in TINY_KINDS.values())


@pytest.mark.parametrize("kind", QWEN3_KINDS)
def test_target_is_a_qwen3_checkout(pairs, kind):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    target = pairs[kind].target
    assert {p.name for p in target.iterdir()} >= {
        "config.json", "generation_config.json", "model.safetensors", "README.md",
        "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
    }  # fmt: skip
    config = read_config(target)
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["torch_dtype"] == "bfloat16"
    assert config["tie_word_embeddings"] is False
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(target))
    weights = load_file(target / "model.safetensors")
    assert_bf16_with_shapes(weights, {name: tuple(t.shape) for name, t in model.state_dict().items()})
    dims = model.config.hidden_size, model.config.num_hidden_layers, model.config.intermediate_size
    assert dims == ((128, 32, 256) if kind in ("dflash-deep", "oracle-deep") else (128, 4, 256))

    tokenizer = AutoTokenizer.from_pretrained(target)
    assert len(tokenizer) < config["vocab_size"] == 512
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    messages = [{"role": "user", "content": "hi"}]
    chat = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert read_card(target)[0] == {
        "license": "apache-2.0", "library_name": "transformers", "pipeline_tag": "text-generation"
    }  # fmt: skip


@pytest.mark.parametrize("kind", [*DFLASH_DRAFTS, "broken-hidden-size"])
def test_dflash_draft_is_a_zlab_checkout(pairs, kind):
    draft = pairs[kind].draft
    config = read_config(draft)
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["model_type"] == "qwen3"
    assert config["auto_map"] == {"AutoModel": "dflash.DFlashDraftModel"}
    assert config["dflash_config"] == {"mask_token_id": 489, "target_layer_ids": [1, 2]}
    assert (config["block_size"], config["num_target_layers"], config["dtype"]) == (16, 4, "bfloat16")
    assert config["tie_word_embeddings"] is True
    assert len(config["layer_types"]) == config["num_hidden_layers"] == 2
    assert_bf16_with_shapes(load_file(draft / "model.safetensors"), dflash_shapes(config))

    metadata, body = read_card(draft)
    assert metadata["license"] == "mit"
    assert metadata["tags"] == ["dflash", "speculative-decoding", "block-diffusion", "draft-model", "qwen3"]
    assert "This drafter must be used in conjunction with the target model Qwen/Qwen3-Tiny." in body


def test_draft_hidden_size_defect(pairs):
    assert read_config(pairs["broken-hidden-size"].draft)["hidden_size"] == 256
    assert read_config(pairs["broken-hidden-size"].target)["hidden_size"] == 128


def test_checkpoint_code_fails_loudly_if_executed(pairs):
    spec = importlib.util.spec_from_file_location("dflash", pairs["dflash"].draft / "dflash.py")
    with pytest.raises(RuntimeError, match="checkpoint code executed"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


@pytest.mark.parametrize(("kind", "markov_rank"), [("dspark", 0), ("dspark-markov", 256)])
def test_dspark_draft_is_a_deepspec_checkout(pairs, kind, markov_rank):
    draft = pairs[kind].draft
    config = read_config(draft)
    assert config["architectures"] == ["Qwen3DSparkModel"]
    assert "dflash_config" not in config and "auto_map" not in config
    assert {k: config[k] for k in ("mask_token_id", "target_layer_ids", "block_size", "num_target_layers")} == {
        "mask_token_id": 489, "target_layer_ids": [1, 2], "block_size": 7, "num_target_layers": 4
    }  # fmt: skip
    assert (config["markov_rank"], config["markov_head_type"]) == (markov_rank, "vanilla")
    assert config["enable_confidence_head"] is True
    assert config["confidence_head_with_markov"] is (markov_rank > 0)

    markov = {"markov_head.markov_w1.weight": (512, 256), "markov_head.markov_w2.weight": (512, 256)}
    expected = dflash_shapes(config) | {
        "embed_tokens.weight": (512, 128),
        "lm_head.weight": (512, 128),
        "confidence_head.proj.weight": (1, 128 + markov_rank),
        "confidence_head.proj.bias": (1,),
    }
    weights = load_file(draft / "model.safetensors")
    assert_bf16_with_shapes(weights, expected | (markov if markov_rank else {}))
    target = load_file(pairs[kind].target / "model.safetensors")
    assert torch.equal(weights["lm_head.weight"], target["lm_head.weight"])
    assert read_card(draft)[0]["base_model"] == "Qwen/Qwen3-Tiny"


def test_dflash2_draft_has_selector_and_convolutions(pairs):
    draft = pairs["dflash2"].draft
    config = read_config(draft)
    assert config["architectures"] == ["DFlash2DraftModel"]
    selector_fields = {"selector_rank", "selector_top_k", "conv_kernel_size", "conv_group_size"}
    assert selector_fields <= config["dflash_config"].keys()
    weights = load_file(draft / "model.safetensors")
    assert dflash_shapes(config).keys() < weights.keys()
    assert "candidate_selector.hidden_projection.weight" in weights
    assert weights["layers.0.attention_conv.kernel_projection.weight"].shape == (32, 128)
    assert "This drafter must be used in conjunction with the target model" in read_card(draft)[1]


@pytest.mark.parametrize("kind", CONFIG_DEFECTS)
def test_broken_config_has_exactly_its_defect(pairs, kind):
    good, broken = pairs["dflash"], pairs[kind]
    assert config_changes(read_config(good.draft), read_config(broken.draft)) == CONFIG_DEFECTS[kind]
    assert (broken.draft / "model.safetensors").read_bytes() == (good.draft / "model.safetensors").read_bytes()


@pytest.mark.parametrize("kind", [kind for kind in TINY_KINDS if kind.startswith("broken-")])
def test_broken_pairs_keep_the_dflash_target(pairs, kind):
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (pairs[kind].target / name).read_bytes() == (pairs["dflash"].target / name).read_bytes()


def test_broken_config_json_is_cut_off(pairs):
    text = (pairs["broken-config-json"].draft / "config.json").read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    assert (pairs["dflash"].draft / "config.json").read_text().startswith(text)


def test_broken_pickle_holds_the_same_weights_as_a_pickle(pairs):
    draft = pairs["broken-pickle"].draft
    assert not (draft / "model.safetensors").exists()
    pickled = torch.load(draft / "pytorch_model.bin", weights_only=True)
    good = load_file(pairs["dflash"].draft / "model.safetensors")
    assert pickled.keys() == good.keys()
    assert all(torch.equal(pickled[name], good[name]) for name in good)


def test_broken_truncated_keeps_header_but_loses_data(pairs):
    path = pairs["broken-truncated"].draft / "model.safetensors"
    data = path.read_bytes()
    header_size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_size])
    declared_end = max(entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__")
    assert len(data) < 8 + header_size + declared_end
    assert (
        header.keys()
        == json.loads((pairs["dflash"].draft / "model.safetensors").read_bytes()[8 : 8 + header_size]).keys()
    )
    with pytest.raises(Exception, match=r"incomplete metadata|file not fully covered"):
        safe_open(path, framework="pt")


def next_tokens(target: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's greedy next token after each single vocabulary token, and the top-2 logit gap."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.arange(model.config.vocab_size).view(-1, 1)).logits[:, -1]
    top = logits.topk(2, dim=-1)
    return top.indices[:, 0], top.values[:, 0] - top.values[:, 1]


def word_ids(target: Path) -> tuple[int, int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    (predicted,) = tokenizer.encode(PREDICTED_WORD, add_special_tokens=False)
    (follower,) = tokenizer.encode(FOLLOWER_WORD, add_special_tokens=False)
    return predicted, follower


@pytest.mark.parametrize("kind", ["dflash", "dflash-deep"])
def test_dflash_target_is_a_bigram_model(pairs, kind):
    target = pairs[kind].target
    predicted, follower = word_ids(target)
    following, gap = next_tokens(target)
    expected = torch.full_like(following, predicted)
    expected[predicted] = follower
    assert torch.equal(following, expected)
    # Wide gaps keep the output exact under int4 weights and OpenVINO's default (u8 KV, int8 activation) CPU path.
    assert gap.min() > 20


@pytest.mark.parametrize("kind", ["oracle", "oracle-deep"])
def test_oracle_target_always_predicts_one_word(pairs, kind):
    target = pairs[kind].target
    predicted, _ = word_ids(target)
    following, gap = next_tokens(target)
    assert set(following.tolist()) == {predicted}
    assert gap.min() > 20


def test_random_target_is_not_constructed(pairs):
    following, _ = next_tokens(pairs["random"].target)
    assert len(set(following.tolist())) > 20


def test_dflash_target_generates_the_demo_text(pairs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = pairs["dflash"].target
    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hello"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    output = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    assert tokenizer.decode(output[0, prompt["input_ids"].shape[1] :]) == (PREDICTED_WORD + FOLLOWER_WORD) * 3


@pytest.mark.parametrize(
    ("kind", "quiet"),
    [("dflash", True), ("oracle", True), ("random", False), ("dflash-deep", True), ("oracle-deep", True)],
)
def test_agreeing_drafts_propose_the_predicted_word(pairs, kind, quiet):
    """Quiet layers make the draft's output the normalised mask embedding, which GenAI scores with the
    target's lm_head; that proposal must be the predicted word for dflash and oracle, at every position."""
    weights = load_file(pairs[kind].draft / "model.safetensors")
    residual_writers = [t for name, t in weights.items() if name.endswith(("o_proj.weight", "down_proj.weight"))]
    assert all(t.abs().max() < 1e-3 for t in residual_writers) is quiet

    target = load_file(pairs[kind].target / "model.safetensors")
    mask = read_config(pairs[kind].draft)["dflash_config"]["mask_token_id"]
    hidden = target["model.embed_tokens.weight"][mask].float()
    proposal = int((target["lm_head.weight"].float() @ (hidden / hidden.norm())).argmax())
    assert (proposal == word_ids(pairs[kind].target)[0]) is quiet


def test_same_seed_gives_identical_bytes(tmp_path):
    first, second = make_tiny("dflash", tmp_path / "a"), make_tiny("dflash", tmp_path / "b")
    for checkout in ("target", "draft"):
        one, two = getattr(first, checkout), getattr(second, checkout)
        assert sorted(p.name for p in one.iterdir()) == sorted(p.name for p in two.iterdir())
        assert all((one / p.name).read_bytes() == (two / p.name).read_bytes() for p in one.iterdir())


def test_other_seed_changes_weights_only(tmp_path):
    zero, one = make_tiny("dflash", tmp_path / "a", seed=0), make_tiny("dflash", tmp_path / "b", seed=1)
    assert read_config(zero.draft) == read_config(one.draft)
    assert (zero.draft / "model.safetensors").read_bytes() != (one.draft / "model.safetensors").read_bytes()
    assert (zero.target / "model.safetensors").read_bytes() != (one.target / "model.safetensors").read_bytes()


def test_target_repo_is_named_in_the_draft_card(tmp_path):
    pair = make_tiny("dflash", tmp_path, target_repo="Qwen/Qwen3-8B")
    assert "in conjunction with the target model Qwen/Qwen3-8B." in read_card(pair.draft)[1]
    assert "# Qwen3-8B-DFlash-b16" in read_card(pair.draft)[1]
    assert "# Qwen3-8B\n" in read_card(pair.target)[1]


def test_unknown_kind_suggests_the_closest(tmp_path):
    with pytest.raises(ValueError, match="Did you mean dflash"):
        make_tiny("dflsh", tmp_path)
    assert not any(tmp_path.iterdir())


def test_refuses_to_overwrite(tmp_path):
    make_tiny("dflash", tmp_path)
    with pytest.raises(FileExistsError, match="not empty"):
        make_tiny("oracle", tmp_path)
