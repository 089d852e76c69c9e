"""Qwen3.5 targets end to end: a VLM with a hybrid (GatedDeltaNet + full attention) text model.

Two real builds per session (about 45 s each on two cores): the oracle pair, whose draft is always right, and the
partial pair, whose live target accepts a few drafted tokens and then rejects one, so that GenAI has to roll the
linear-attention state back inside a verification window and must still match plain greedy token for token.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bot.builder.bundle import find_local_paths, local_path_markers
from bot.core.errors import Skip
from bot.core.record import Repos, TargetRecord
from bot.core.toolchain import Toolchain, detect
from bot.discover.candidates import classify_folders
from bot.publish.card import render_draft_card, render_target_card
from tests.conftest import fast_recipe

# k = 15 is what real b16 drafts run at; anything above 5 needs num_linear_attention_blocks raised.
SWEEP = [4, 15]


@pytest.fixture(scope="session")
def built_vlm(built):
    """built_vlm(kind) -> DraftBuild (its bundle or error) of one real Qwen3.5 build per kind, swept up to k = 15."""
    return lambda kind: built(kind, tuple(SWEEP))


def read_json(path):
    return json.loads(path.read_text())


def test_tiny_qwen3_5_checkout_is_a_vlm_with_hybrid_attention(tiny):
    pair = tiny("oracle-qwen3_5")
    config = read_json(pair.target / "config.json")
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["model_type"] == "qwen3_5" and config["text_config"]["model_type"] == "qwen3_5_text"
    text, vision = config["text_config"], config["vision_config"]
    assert text["layer_types"] == ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + [
        "full_attention"
    ]
    assert text["hidden_size"] % 128 == 0 and text["intermediate_size"] % 128 == 0
    assert vision["out_hidden_size"] == text["hidden_size"]
    for name in (
        "preprocessor_config.json",
        "video_preprocessor_config.json",
        "chat_template.jinja",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        assert (pair.target / name).is_file(), name
    vocab = read_json(pair.target / "tokenizer.json")["added_tokens"]
    ids = {token["content"]: token["id"] for token in vocab}
    assert {
        config["image_token_id"],
        config["video_token_id"],
        config["vision_start_token_id"],
        config["vision_end_token_id"],
    } == {ids["<|image_pad|>"], ids["<|video_pad|>"], ids["<|vision_start|>"], ids["<|vision_end|>"]}
    draft = read_json(pair.draft / "config.json")
    taps = draft["dflash_config"]["target_layer_ids"]
    assert {text["layer_types"][i] for i in taps} == {"linear_attention", "full_attention"}
    assert draft["num_target_layers"] == 8 and draft["hidden_size"] == text["hidden_size"]
    assert draft["dflash_config"]["mask_token_id"] == ids["<|MASK|>"]


def test_processor_loads_the_checkout_tokens(tiny):
    """The Qwen3-VL processor finds its placeholder tokens (the video processor needs torchvision, absent here)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny("oracle-qwen3_5").target)
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert chat == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n<|im_start|>assistant\n"


def test_qwen3_5_pair_builds_and_validates(built_vlm, tiny):
    outcome = built_vlm("oracle-qwen3_5")
    assert outcome.error is None, outcome.error and outcome.error.one_line()
    p = outcome.bundle.record.model_dump(mode="json", by_alias=True)
    assert p["status"] == "validated"
    assert p["target"]["model_type"] == "qwen3_5" and p["target"]["is_vlm"] is True
    assert p["export"]["task"]["target"] == "image-text-to-text"
    assert p["toolchain"]["profile"] == "default" and p["toolchain"]["transformers"] == "5.2.0"
    v = p["validation"]
    assert v["pipeline"] == "VLMPipeline" and v["image_prompts"] == 1
    assert v["num_linear_attention_blocks"] == max(SWEEP) + 2
    assert v["lossless"] is True and v["mismatches"] == []
    assert [run["num_assistant_tokens"] for run in v["runs"]] == SWEEP

    target = p["inspect"]["target"]
    assert target["ir_file"] == "openvino_language_model.xml"
    assert (target["attention_layers"], target["paged_attention_ops"]) == (2, 2)
    assert target["linear_attention_layers"] == 6
    assert target["linear_attention_ops"] == {"PagedGatedDeltaNet": 6, "PagedCausalConv1D": 6}
    assert target["linear_attention_state_tables"] == 12 and target["state_ops_left"] == 0
    assert "paged" in target["linear_attention_state"]
    assert target["hidden_state_layers"] == list(range(8))  # linear and full layers are both tapped


def test_oracle_qwen3_5_accepts_k_plus_one_up_to_k15(built_vlm):
    runs = {
        r["num_assistant_tokens"]: r
        for r in built_vlm("oracle-qwen3_5").bundle.record.model_dump(mode="json", by_alias=True)["validation"]["runs"]
    }
    for k in SWEEP:
        assert runs[k]["accept_length"] == pytest.approx(k + 1)


def test_partial_acceptance_rolls_back_linear_attention_state_losslessly(built_vlm):
    outcome = built_vlm("partial-qwen3_5")
    assert outcome.bundle is not None, outcome.error and outcome.error.one_line()
    v = outcome.bundle.record.model_dump(mode="json", by_alias=True)["validation"]
    assert v["lossless"] is True and v["mismatches"] == [], v["mismatches"]
    for run in v["runs"]:
        # Some drafted tokens accepted, some rejected inside a window: the state was rolled back mid-window.
        assert 1.0 < run["accept_length"] < run["num_assistant_tokens"] + 1, run


def test_bundle_keeps_the_source_processor_configs_and_no_local_path(built_vlm, tiny):
    bundle = built_vlm("oracle-qwen3_5").bundle
    source = tiny("oracle-qwen3_5").target
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        assert (bundle.target_dir / name).read_bytes() == (source / name).read_bytes()
    for name in (
        "openvino_language_model.xml",
        "openvino_text_embeddings_model.xml",
        "openvino_vision_embeddings_model.xml",
        "openvino_vision_embeddings_merger_model.xml",
        "openvino_tokenizer.xml",
        "openvino_detokenizer.xml",
        "config.json",
    ):
        assert (bundle.target_dir / name).is_file(), name
    assert find_local_paths(bundle.root, local_path_markers(source.parent, bundle.root)) == []


def test_genai_runs_the_vlm_pair_from_the_bundle_folders(built_vlm):
    """What a user downloads: the two published folders, VLMPipeline, an image, k = 15."""
    bundle = built_vlm("oracle-qwen3_5").bundle
    script = """
import sys, numpy as np, openvino as ov, openvino_genai as g
t, d = sys.argv[1], sys.argv[2]
sc = g.SchedulerConfig(); sc.enable_prefix_caching = False; sc.num_linear_attention_blocks = 17
image = ov.Tensor(np.random.default_rng(0).integers(0, 255, (64, 96, 3), dtype=np.uint8))
cfg = g.GenerationConfig(); cfg.max_new_tokens = 16; cfg.ignore_eos = True
plain = g.VLMPipeline(t, "CPU", scheduler_config=sc).generate("Describe it.", images=[image], generation_config=cfg)
cfg.num_assistant_tokens = 15
spec = g.VLMPipeline(t, "CPU", draft_model=g.draft_model(d, "CPU"), scheduler_config=sc).generate(
    "Describe it.", images=[image], generation_config=cfg)
assert str(spec) == str(plain) and str(plain).strip(), (str(spec), str(plain))
print("same")
"""
    done = subprocess.run(
        [sys.executable, "-c", script, str(bundle.target_dir), str(bundle.draft_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "same" in done.stdout


def test_cards_show_vlm_usage_and_the_profile(built_vlm):
    built = built_vlm("oracle-qwen3_5").bundle.record
    repos = Repos(draft="org/Qwen3.5-Tiny-DFlash-int4-ov", target="org/Qwen3.5-Tiny-int4-ov")
    draft_card = render_draft_card(built.published_as(repos, "fp"))
    assert "ov_genai.VLMPipeline(target_dir" in draft_card and "images=[image]" in draft_card
    assert "num_linear_attention_blocks = num_assistant_tokens + 2" in draft_card
    assert "LLMPipeline" not in draft_card
    assert "toolchain profile **default**" in draft_card
    target_card = render_target_card(TargetRecord.from_build(built, [], "fp"), target_repo=repos.target)
    assert "ov_genai.VLMPipeline(" in target_card and "LLMPipeline" not in target_card
    assert "pipeline_tag: image-text-to-text" in target_card and "pipeline_tag: text-generation" in draft_card
    assert "Toolchain profile: **default**" in target_card


def test_qwen3_5_target_under_wrong_transformers_is_a_skip_naming_the_versions(tiny):
    pair = tiny("oracle-qwen3_5")
    current = detect()
    gemma4 = Toolchain(
        versions={**current.versions, "transformers": "5.5.4"}, capabilities=current.capabilities, profile="gemma4"
    )
    with pytest.raises(Skip) as raised:
        classify_folders(pair.draft, pair.target, fast_recipe(), toolchain=gemma4)
    message = raised.value.message
    assert "qwen3_5" in message and "transformers >=5.2.0,<=5.2.99" in message and "5.5.4" in message
    assert "profile 'default'" in message and raised.value.stage == "classify"


@pytest.mark.parametrize(("kind", "pattern"), [("dflash-qwen3_5", "PF"), ("oracle-qwen3_5", "PP")])
def test_constructed_qwen3_5_targets_generate_the_known_text(tiny, kind, pattern):
    """Quiet layers: the next token depends on the current one only, so acceptance is known before any export."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    from tinymodels import FOLLOWER_WORD, PREDICTED_WORD

    target = tiny(kind).target
    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForImageTextToText.from_pretrained(target, dtype=torch.float32)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hello"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    output = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    words = {"P": PREDICTED_WORD, "F": FOLLOWER_WORD}
    assert tokenizer.decode(output[0, prompt["input_ids"].shape[1] :]) == "".join(words[c] for c in pattern) * 3
