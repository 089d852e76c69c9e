"""Tiny Qwen3.5 checkouts: a VLM target with a hybrid text model, and DFlash drafts that tap it.

A Qwen3.5 target is a `Qwen3_5ForConditionalGeneration`: a vision tower plus a text model whose layers are
GatedDeltaNet linear attention, with full attention every fourth layer. The checkout carries what the Hub
repos carry and what the export and `Qwen3VLProcessor` need: the Qwen vision special tokens, a chat template
that turns image items into ``<|vision_start|><|image_pad|><|vision_end|>``, and the two processor configs
(notes/qwen3_5-vlm-on-cpu.md §1).

The text weights follow `weights.bigram_tables`, so acceptance is known in advance:

* ``bigram`` and ``constant`` silence every residual writer (linear attention, full attention, MLP): the
  output depends on the current token only, and the quiet draft is right about half the time or always.
* ``partial`` keeps every layer live, so the next token depends on the GatedDeltaNet state; the predicted
  word gets a bias that makes it win some of the time, in runs of varying length. A quiet draft always
  proposes it, so verification windows accept a few tokens and then reject one: the linear-attention state
  must be rolled back in the middle of a window for the output to stay equal to plain greedy.
"""

from __future__ import annotations

import json
import math
from typing import Literal

import torch

from tinymodels import layouts
from tinymodels import moe as moe_sizes
from tinymodels.layouts import BuildContext, Checkpoint, _card, _repo_name
from tinymodels.tokenizer import Vocab, build_tokenizer
from tinymodels.weights import (
    INIT_STD,
    VOCAB_SIZE,
    bigram_tables,
    normal,
)

Qwen3_5Behaviour = Literal["bigram", "constant", "partial"]

# Qwen3.5's added tokens in Qwen's order; <|MASK|> is the DFlash mask token the draft repos add.
SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<think>", "</think>", "<|MASK|>",
)  # fmt: skip

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif item['type'] == 'video' %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Text model: 8 layers, full attention every 4th (layers 3 and 7). Hidden and intermediate sizes are
# multiples of 128 so every int4-compressed linear has whole 128-wide groups.
TEXT_LAYERS = 8
FULL_ATTENTION_INTERVAL = 4
LAYER_TYPES = tuple(
    "full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention" for i in range(TEXT_LAYERS)
)
# Two linear-attention layers and one full-attention layer: the draft reads both kinds of hidden state.
DRAFT_TARGET_LAYER_IDS = (1, 3, 5)
_HIDDEN = 128
# `partial` target (see `_text_weights`): the predicted word's logit along the mean greedy state, and how far its
# own embedding leans that way. Tuned on the probe prompts: the word wins in runs of 1 to ~20 tokens, broken by
# other tokens, about a third of the time (int4 GenAI: accept length 2.1 at k=4, 2.7 at k=15 on the recipe prompts).
_PARTIAL_GAIN = 32.0
_PARTIAL_PULL = 0.02
_RANDOM_HEAD_GAIN = 20.0
# Chat prompts whose greedy states set the `partial` target's direction: the default recipe's and a few more.
_PROBE_PROMPTS = (
    "Explain speculative decoding in one paragraph.",
    "Write a short poem about the sea.",
    "List three prime numbers and say why they are prime.",
    "What is OpenVINO?",
    "Hello",
)


def tokenizer():
    """A fresh Qwen3.5-style tokenizer (same BPE as the Qwen3 one, plus the vision special tokens)."""
    return build_tokenizer(SPECIAL_TOKENS, additional_special_tokens=SPECIAL_TOKENS[1:], chat_template=CHAT_TEMPLATE)


def _model_config(ids: dict[str, int], vocab: Vocab, *, moe: bool = False):
    from transformers.models.qwen3_5 import Qwen3_5Config
    from transformers.models.qwen3_5_moe import Qwen3_5MoeConfig

    text = {
        "vocab_size": VOCAB_SIZE, "hidden_size": _HIDDEN, "intermediate_size": 256,
        "num_hidden_layers": TEXT_LAYERS, "layer_types": list(LAYER_TYPES), "full_attention_interval": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "linear_key_head_dim": 64, "linear_value_head_dim": 64, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_conv_kernel_dim": 4, "max_position_embeddings": 4096,
        # mrope_section sums to head_dim * partial_rotary_factor / 2.
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [3, 3, 2], "mrope_interleaved": True},
        "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": vocab.im_end,
        "pad_token_id": vocab.endoftext, "dtype": "bfloat16",
    }  # fmt: skip
    vision = {
        "depth": 2, "hidden_size": _HIDDEN, "intermediate_size": 256, "num_heads": 2, "patch_size": 16,
        "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": _HIDDEN,
        "num_position_embeddings": 2304,
    }  # fmt: skip
    if moe:  # Qwen3.5-MoE: every layer's MLP is routed experts beside a shared one (tinymodels.moe's sizes)
        text |= {
            "moe_intermediate_size": moe_sizes.EXPERT_WIDTH, "shared_expert_intermediate_size": moe_sizes.EXPERT_WIDTH,
            "num_experts": moe_sizes.EXPERTS, "num_experts_per_tok": moe_sizes.EXPERTS_PER_TOKEN,
        }  # fmt: skip
    config = (Qwen3_5MoeConfig if moe else Qwen3_5Config)(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"]
    return config


def special_ids(tok) -> dict[str, int]:
    return {token: tok.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}


def target_checkpoint(
    behaviour: Qwen3_5Behaviour,
    tok,
    vocab: Vocab,
    *,
    target_repo: str,
    seed: int,
    rng: torch.Generator,
    transformers_version: str,
    moe: bool = False,
) -> Checkpoint:
    """A Qwen3.5 checkout as the Qwen org ships it: config with text/vision sub-configs, processor configs; with
    `moe`, a Qwen3.5-MoE one (experts stored one tensor each, `tinymodels.moe.split_experts`)."""
    from transformers.models.qwen3_5 import Qwen3_5ForConditionalGeneration
    from transformers.models.qwen3_5_moe import Qwen3_5MoeForConditionalGeneration

    ids = special_ids(tok)
    model_config = _model_config(ids, vocab, moe=moe)
    model_class = Qwen3_5MoeForConditionalGeneration if moe else Qwen3_5ForConditionalGeneration
    # The module initialisers draw from the global generator; fork it so the caller's stream is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=rng)))
        model = model_class(model_config).float().eval()
    weights = {name: tensor.detach().clone().float() for name, tensor in model.state_dict().items()}
    probes = [
        tok.encode(
            tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )
        for text in _PROBE_PROMPTS
    ]
    weights |= _text_weights(behaviour, model, vocab, rng, probes)
    model_config.dtype = torch.bfloat16  # as written: the checkpoint is saved in bf16
    config = json.loads(model_config.to_json_string(use_diff=False))
    config["transformers_version"] = transformers_version
    readme = _card(
        {"license": "apache-2.0", "library_name": "transformers", "pipeline_tag": "image-text-to-text"},
        title=_repo_name(target_repo),
        body=f"Tiny generated Qwen3.5 vision-language model ({behaviour} text weights, seed {seed}) for offline tests.",
    )
    generation_config = {
        "bos_token_id": vocab.endoftext, "do_sample": True, "eos_token_id": [vocab.im_end, vocab.endoftext],
        "pad_token_id": vocab.endoftext, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
        "transformers_version": transformers_version,
    }  # fmt: skip
    return Checkpoint(
        config=config,
        weights=moe_sizes.split_experts(weights) if moe else weights,
        readme=readme,
        generation_config=generation_config,
        files=_processor_files(),
    )


def _text_weights(
    behaviour: Qwen3_5Behaviour, model, vocab: Vocab, rng: torch.Generator, probes: list[list[int]]
) -> dict[str, torch.Tensor]:
    """The text model's constructed tensors (everything else keeps the random initialisation)."""
    prefix = "model.language_model."
    weights = model.state_dict()
    out: dict[str, torch.Tensor] = {}
    if behaviour in ("bigram", "constant"):
        out |= moe_sizes.quiet_writers(weights, rng, prefix + "layers.")
        embed, head = bigram_tables(vocab, rng, bigram=behaviour == "bigram")
    else:
        # Live layers: a random model whose final hidden states have a mean direction m. The predicted word's
        # lm_head row points along m, so it wins where the state leans that way; its embedding leans along m
        # a little, so once it wins it tends to win again, for a while.
        embed = normal(rng, VOCAB_SIZE, _HIDDEN, std=INIT_STD)
        head = normal(rng, VOCAB_SIZE, _HIDDEN, std=INIT_STD * _RANDOM_HEAD_GAIN)
        # Special and unused ids never win: a generated <|image_pad|> would read as a vision placeholder.
        head[vocab.endoftext :] = normal(rng, VOCAB_SIZE - vocab.endoftext, _HIDDEN, std=INIT_STD)
        with torch.no_grad():
            model.model.language_model.embed_tokens.weight.copy_(embed)
            model.lm_head.weight.copy_(head)
            # The mean direction of the states greedy decoding visits (not of random inputs: greedy settles).
            states = []
            for probe in probes:
                run = model.generate(
                    torch.tensor([probe]),
                    attention_mask=torch.ones(1, len(probe), dtype=torch.long),
                    max_new_tokens=32,
                    do_sample=False,
                    output_hidden_states=True,
                    return_dict_in_generate=True,
                    pad_token_id=vocab.endoftext,
                )
                states += [step[-1][0, -1] for step in run.hidden_states]
        final = torch.stack(states)
        final = final / final.norm(dim=-1, keepdim=True)
        mean = final.mean(0)
        mean = mean / mean.norm()
        head[vocab.predicted] = mean * _PARTIAL_GAIN / math.sqrt(_HIDDEN)
        embed[vocab.predicted] = mean * _PARTIAL_PULL
        # A quiet draft proposes what its (mask-token) input embedding scores under the target's lm_head.
        embed[vocab.mask] = mean * INIT_STD * math.sqrt(_HIDDEN)
    out[prefix + "embed_tokens.weight"] = embed
    out["lm_head.weight"] = head
    return out


def _processor_files() -> dict[str, str]:
    image = {
        "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "image_processor_type": "Qwen2VLImageProcessorFast", "merge_size": 2, "patch_size": 16,
        "processor_class": "Qwen3VLProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
        "size": {"longest_edge": 16777216, "shortest_edge": 65536}, "temporal_patch_size": 2,
    }  # fmt: skip
    video = {
        "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "do_sample_frames": True,
        "fps": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "merge_size": 2, "patch_size": 16,
        "processor_class": "Qwen3VLProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
        "size": {"longest_edge": 25165824, "shortest_edge": 4096}, "temporal_patch_size": 2,
        "video_processor_type": "Qwen3VLVideoProcessor",
    }  # fmt: skip
    return {
        "preprocessor_config.json": json.dumps(image, indent=2, sort_keys=True) + "\n",
        "video_preprocessor_config.json": json.dumps(video, indent=2, sort_keys=True) + "\n",
    }


def dflash_draft(context: BuildContext) -> Checkpoint:
    """A z-lab-style DFlash draft for a Qwen3.5 target: a Qwen3 trunk that taps linear and full layers."""
    return layouts.dflash_draft(
        context,
        target_layer_ids=DRAFT_TARGET_LAYER_IDS,
        num_target_layers=TEXT_LAYERS,
        name_suffix="-DFlash",
        extra_config={"rope_theta": 10000000},
    )
