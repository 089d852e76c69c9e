"""What goes into each checkout directory: configs, cards, code files and weights, as the Hub has them.

Targets follow the Qwen/Qwen3-* repositories, DFlash drafts z-lab's, DSpark drafts deepseek-ai/DeepSpec's
and DFlash2 drafts the published ``DFlash2DraftModel`` checkpoints. Field names and spellings are copied
from those (for example ``rope_theta`` rather than transformers 5's ``rope_parameters``), because the bot
classifies checkpoints from exactly these files.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tinymodels.tokenizer import Vocab
from tinymodels.weights import (
    DRAFT_DIMS,
    INIT_STD,
    TARGET_DIMS,
    TARGET_LAYER_IDS,
    VOCAB_SIZE,
    Dims,
    TargetBehaviour,
    draft_trunk,
    normal,
    target_weights,
)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Everything written into one checkout directory, besides the tokenizer."""

    config: dict
    weights: dict[str, torch.Tensor]
    readme: str
    generation_config: dict
    code: Mapping[str, str] = dataclasses.field(default_factory=dict)
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)  # other text files (processor configs)


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """Inputs shared by the draft builders."""

    kind: str
    seed: int
    vocab: Vocab
    target_repo: str
    target_weights: dict[str, torch.Tensor]
    rng: torch.Generator
    transformers_version: str


DraftBuilder = Callable[[BuildContext], Checkpoint]


def target_checkpoint(
    behaviour: TargetBehaviour,
    vocab: Vocab,
    *,
    target_repo: str,
    seed: int,
    rng: torch.Generator,
    transformers_version: str,
    dims: Dims = TARGET_DIMS,
) -> Checkpoint:
    """A Qwen3 checkout as the Qwen org ships it, including its sampling defaults in generation_config.json."""
    config = _qwen3_config(dims, vocab, transformers_version) | {
        "architectures": ["Qwen3ForCausalLM"],
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    readme = _card(
        {"license": "apache-2.0", "library_name": "transformers", "pipeline_tag": "text-generation"},
        title=_repo_name(target_repo),
        body=f"Tiny generated Qwen3 model ({behaviour} weights, seed {seed}) for offline tests.",
    )
    generation_config = {
        "bos_token_id": vocab.endoftext,
        "do_sample": True,
        "eos_token_id": [vocab.im_end, vocab.endoftext],
        "pad_token_id": vocab.endoftext,
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
        "transformers_version": transformers_version,
    }
    return Checkpoint(
        config=config,
        weights=target_weights(behaviour, vocab, rng, dims),
        readme=readme,
        generation_config=generation_config,
    )


def dflash_draft(
    context: BuildContext,
    *,
    quiet: bool = True,
    dims: Dims = DRAFT_DIMS,
    target_layer_ids: tuple[int, ...] = TARGET_LAYER_IDS,
    num_target_layers: int = TARGET_DIMS.layers,
    name_suffix: str = "-DFlash-b16",
    extra_config: dict | None = None,
) -> Checkpoint:
    """A DFlash draft as z-lab publishes it: no embedding, no lm_head, remote-code auto_map.

    Args:
        context: Shared build inputs.
        quiet: Quiet layers make the draft always propose the bigram target's predicted word
            (`weights.bigram_tables`); otherwise the draft is random.
        dims: Draft sizes; only the broken-hidden-size kind departs from the target's hidden size.
        target_layer_ids, num_target_layers: the taps into the target and its depth (other target families).
        name_suffix: appended to the target's name for the card title, as z-lab names its repos.
        extra_config: config fields of another target family (say, its rope_theta).
    """
    config = (
        _qwen3_config(dims, context.vocab, context.transformers_version)
        | {
            "architectures": ["DFlashDraftModel"],
            "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
            "block_size": 16,
            "dflash_config": {"mask_token_id": context.vocab.mask, "target_layer_ids": list(target_layer_ids)},
            "dtype": "bfloat16",
            "layer_types": ["full_attention"] * dims.layers,
            "num_target_layers": num_target_layers,
            "tie_word_embeddings": True,
        }
        | (extra_config or {})
    )
    return Checkpoint(
        config=config,
        weights=draft_trunk(dims, context.rng, quiet=quiet, taps=len(target_layer_ids)),
        readme=_zlab_card(context, title=f"{_repo_name(context.target_repo)}{name_suffix}", family="DFlash"),
        generation_config=_draft_generation_config(context),
        code={"dflash.py": _code_stub("DFlashDraftModel")},
    )


def dflash2_draft(context: BuildContext) -> Checkpoint:
    """A DFlash2 draft: DFlash plus grouped dynamic convolutions and a low-rank candidate selector."""
    dims, rng, group, taps, rank = DRAFT_DIMS, context.rng, 16, 2, 32
    weights = draft_trunk(dims, rng, quiet=False)
    for i in range(dims.layers):
        for conv in ("attention_conv", "mlp_conv"):
            # base_kernel is [side (in/out), tap, channel]; the projection yields per-token deltas per
            # (side, tap, channel group).
            weights[f"layers.{i}.{conv}.base_kernel"] = normal(rng, 2, taps, dims.hidden, std=INIT_STD)
            weights[f"layers.{i}.{conv}.kernel_projection.weight"] = normal(
                rng, 2 * taps * dims.hidden // group, dims.hidden, std=INIT_STD
            )
    weights["candidate_selector.hidden_projection.weight"] = normal(rng, rank, dims.hidden, std=INIT_STD)
    weights["candidate_selector.predecessor_codebook"] = normal(rng, VOCAB_SIZE, rank, std=INIT_STD)
    weights["candidate_selector.successor_codebook"] = normal(rng, VOCAB_SIZE, rank, std=INIT_STD)
    config = _qwen3_config(dims, context.vocab, context.transformers_version) | {
        "architectures": ["DFlash2DraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlash2DraftModel"},
        "dflash_config": {
            "block_size": 8,
            "conv_group_size": group,
            "conv_kernel_size": taps,
            "mask_token_id": context.vocab.mask,
            "selector_rank": rank,
            "selector_top_k": 16,
            "target_layer_ids": list(TARGET_LAYER_IDS),
        },
        "dtype": "bfloat16",
        "is_causal": False,
        "layer_types": ["full_attention"] * dims.layers,
        "num_target_layers": TARGET_DIMS.layers,
        "tie_word_embeddings": True,
    }
    return Checkpoint(
        config=config,
        weights=weights,
        readme=_zlab_card(context, title=f"{_repo_name(context.target_repo)}-DFlash2", family="DFlash2"),
        generation_config=_draft_generation_config(context),
        code={"dflash.py": _code_stub("DFlash2DraftModel")},
    )


def dspark_draft(context: BuildContext, *, markov_rank: int) -> Checkpoint:
    """A DSpark draft as deepseek-ai/DeepSpec saves it.

    Unlike DFlash its fields are top level and it carries copies of the target's embedding and lm_head,
    a confidence head (``confidence_head.proj``, as DeepSpec's ``AcceptRatePredictor`` names it) and, when
    ``markov_rank > 0``, a low-rank Markov head. The released checkpoints feed the Markov state into the
    confidence head, so ``confidence_head_with_markov`` follows markov_rank here.
    """
    dims, rng = DRAFT_DIMS, context.rng
    with_markov = markov_rank > 0
    weights = draft_trunk(dims, rng, quiet=False)
    weights["embed_tokens.weight"] = context.target_weights["model.embed_tokens.weight"].clone()
    weights["lm_head.weight"] = context.target_weights["lm_head.weight"].clone()
    confidence_inputs = dims.hidden + (markov_rank if with_markov else 0)
    weights["confidence_head.proj.weight"] = normal(rng, 1, confidence_inputs, std=INIT_STD)
    weights["confidence_head.proj.bias"] = torch.zeros(1)
    if with_markov:
        weights["markov_head.markov_w1.weight"] = normal(rng, VOCAB_SIZE, markov_rank, std=INIT_STD)
        weights["markov_head.markov_w2.weight"] = normal(rng, VOCAB_SIZE, markov_rank, std=INIT_STD)
    config = _qwen3_config(dims, context.vocab, context.transformers_version) | {
        "architectures": ["Qwen3DSparkModel"],
        "block_size": 7,
        "confidence_head_with_markov": with_markov,
        "dtype": "bfloat16",
        "enable_confidence_head": True,
        "layer_types": ["full_attention"] * dims.layers,
        "markov_head_type": "vanilla",
        "markov_rank": markov_rank,
        "mask_token_id": context.vocab.mask,
        "num_anchors": 512,
        "num_target_layers": TARGET_DIMS.layers,
        "target_layer_ids": list(TARGET_LAYER_IDS),
        "tie_word_embeddings": False,
    }
    # This card names the target in metadata only, the first place the bot looks.
    readme = _card(
        {
            "license": "mit",
            "library_name": "transformers",
            "base_model": context.target_repo,
            "tags": ["dspark", "speculative-decoding", "draft-model", "qwen3"],
        },
        title=f"dspark_{_repo_name(context.target_repo).lower()}_block7",
        body=f"Tiny generated DSpark drafter (kind `{context.kind}`, seed {context.seed}) for offline tests.",
    )
    return Checkpoint(
        config=config, weights=weights, readme=readme, generation_config=_draft_generation_config(context)
    )


def with_config_defect(defect: Callable[[dict], None]) -> DraftBuilder:
    """A builder for an agreeing DFlash draft whose config then gets one ``defect`` (edited in place)."""

    def build(context: BuildContext) -> Checkpoint:
        checkpoint = dflash_draft(context)
        config = copy.deepcopy(checkpoint.config)
        defect(config)
        return dataclasses.replace(checkpoint, config=config)

    return build


def set_model_type_llama(config: dict) -> None:
    config["model_type"] = "llama"


def set_layer_ids_beyond_target(config: dict) -> None:
    config["dflash_config"]["target_layer_ids"] = [1, 40]


def set_mask_token_beyond_vocab(config: dict) -> None:
    config["dflash_config"]["mask_token_id"] = 5000


def drop_dflash_config(config: dict) -> None:
    del config["dflash_config"]


def truncate_config(draft: Path) -> None:
    """Cut config.json in half, as an interrupted upload or a bad merge would leave it."""
    path = draft / "config.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def repickle_weights(draft: Path) -> None:
    """Leave only a torch.save pickle: loadable by transformers, but code execution risk from a watched repo."""
    path = draft / "model.safetensors"
    torch.save(load_file(path), draft / "pytorch_model.bin")
    path.unlink()


def truncate_weights(draft: Path) -> None:
    """Keep the safetensors header intact but cut the data short of the offsets it declares."""
    path = draft / "model.safetensors"
    data = path.read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little")
    path.write_bytes(data[: header_end + (len(data) - header_end) // 2])


def write_checkpoint(directory: Path, checkpoint: Checkpoint) -> None:
    """Write a checkout; weights go to one bf16 model.safetensors with the metadata transformers writes."""
    directory.mkdir(parents=True, exist_ok=True)
    _write_json(directory / "config.json", checkpoint.config)
    _write_json(directory / "generation_config.json", checkpoint.generation_config)
    (directory / "README.md").write_text(checkpoint.readme)
    for name, source in {**checkpoint.code, **checkpoint.files}.items():
        (directory / name).write_text(source)
    weights = {name: tensor.to(torch.bfloat16).contiguous() for name, tensor in checkpoint.weights.items()}
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})


def _qwen3_config(dims: Dims, vocab: Vocab, transformers_version: str) -> dict:
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": vocab.endoftext,
        "eos_token_id": vocab.im_end,
        "head_dim": dims.head_dim,
        "hidden_act": "silu",
        "hidden_size": dims.hidden,
        "initializer_range": INIT_STD,
        "intermediate_size": dims.intermediate,
        "max_position_embeddings": 4096,
        "max_window_layers": dims.layers,
        "model_type": "qwen3",
        "num_attention_heads": dims.heads,
        "num_hidden_layers": dims.layers,
        "num_key_value_heads": dims.kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "transformers_version": transformers_version,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB_SIZE,
    }


def _draft_generation_config(context: BuildContext) -> dict:
    return {
        "bos_token_id": context.vocab.endoftext,
        "eos_token_id": context.vocab.im_end,
        "transformers_version": context.transformers_version,
    }


def _zlab_card(context: BuildContext, *, title: str, family: str) -> str:
    """z-lab's card: MIT, draft tags, and the sentence that names the target (the bot parses it)."""
    return _card(
        {
            "license": "mit",
            "library_name": "transformers",
            "pipeline_tag": "text-generation",
            "tags": ["dflash", "speculative-decoding", "block-diffusion", "draft-model", "qwen3"],
        },
        title=title,
        body=(
            f"Tiny generated {family} drafter (kind `{context.kind}`, seed {context.seed}) for offline tests.\n\n"
            f"This drafter must be used in conjunction with the target model {context.target_repo}."
        ),
    )


def _code_stub(class_name: str) -> str:
    """Stand-in for a draft repo's own modeling file. Importing it fails, so running it cannot go unnoticed."""
    return (
        '"""Placeholder for the draft authors\' modeling code in a generated test checkpoint.\n\n'
        "The bot must never execute code from a watched repository, so importing this module fails.\n"
        '"""\n\n\n'
        f"class {class_name}:\n"
        '    """Named like the real class so that auto_map points at something."""\n\n\n'
        'raise RuntimeError("checkpoint code executed")\n'
    )


def _card(metadata: dict, *, title: str, body: str) -> str:
    lines = ["---"]
    for key, value in metadata.items():
        if isinstance(value, list):
            lines += [f"{key}:", *(f"- {item}" for item in value)]
        else:
            lines.append(f"{key}: {value}")
    return "\n".join([*lines, "---", "", f"# {title}", "", body, ""])


def _repo_name(repo_id: str) -> str:
    return repo_id.rsplit("/", 1)[-1]


def _write_json(path: Path, value: dict) -> None:
    # Sorted and indented like transformers' own `to_json_file`.
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")
