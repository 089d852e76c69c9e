"""Weight tensors for the tiny targets and drafts.

Where acceptance matters the weights are constructed, not random: see `bigram_tables` for why the
``dflash`` and ``oracle`` pairs accept a known number of tokens per target step.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import torch

from tinymodels.tokenizer import Vocab

VOCAB_SIZE = 512
TARGET_LAYER_IDS = (1, 2)

TargetBehaviour = Literal["bigram", "constant", "random"]

# INIT_STD is Qwen3's initializer_range. QUIET_STD silences a layer's residual branch without zeroing it,
# so int4 group quantization still sees an ordinary (if narrow) weight range.
INIT_STD = 0.02
_QUIET_STD = 1e-4
_EMBED_NOISE = 0.1
# The winning logit of a constructed target. Rivals sit near INIT_STD * sqrt(hidden) ~ 0.2, so a gap of
# ~30 survives int4 weights, a u8 KV cache and int8 dynamic activation quantization alike.
_WINNING_LOGIT = 30.0
# Random lm_head rows are scaled up so that top-2 logit gaps are not lost to rounding.
_RANDOM_HEAD_GAIN = 20.0


@dataclasses.dataclass(frozen=True)
class Dims:
    """Qwen3 decoder sizes. Hidden and intermediate sizes are multiples of 128, NNCF's default int4 group."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int


TARGET_DIMS = Dims(hidden=128, layers=4, heads=4, kv_heads=2, head_dim=32, intermediate=256)
DRAFT_DIMS = Dims(hidden=128, layers=2, heads=4, kv_heads=2, head_dim=32, intermediate=256)
WIDE_DRAFT_DIMS = Dims(hidden=256, layers=2, heads=8, kv_heads=4, head_dim=32, intermediate=512)
# The demo's target: deep enough that its step, not the draft's or GenAI's per-step overhead, dominates a speculative
# step on CPU, so a draft accepted about half the time speeds decoding up (the 4-layer TARGET_DIMS slows it down).
DEEP_TARGET_DIMS = Dims(hidden=128, layers=32, heads=4, kv_heads=2, head_dim=32, intermediate=256)


def generator(seed: int, *, stream: int) -> torch.Generator:
    """Independent random streams, so a pair's target stays the same when only its draft differs."""
    return torch.Generator().manual_seed(seed * 16 + stream)


def normal(rng: torch.Generator, *shape: int, std: float) -> torch.Tensor:
    return torch.randn(shape, generator=rng) * std


def target_weights(
    behaviour: TargetBehaviour, vocab: Vocab, rng: torch.Generator, dims: Dims = TARGET_DIMS
) -> dict[str, torch.Tensor]:
    """A Qwen3ForCausalLM state dict (float32; the writer casts to bf16) with the decoder sizes `dims`."""
    quiet = behaviour != "random"
    weights: dict[str, torch.Tensor] = {}
    for i in range(dims.layers):
        weights |= _decoder_layer(f"model.layers.{i}", dims, rng, quiet=quiet)
    weights["model.norm.weight"] = torch.ones(dims.hidden)
    if behaviour == "random":
        embed = normal(rng, VOCAB_SIZE, dims.hidden, std=INIT_STD)
        head = normal(rng, VOCAB_SIZE, dims.hidden, std=INIT_STD * _RANDOM_HEAD_GAIN)
    else:
        embed, head = bigram_tables(vocab, rng, bigram=behaviour == "bigram", hidden=dims.hidden)
    weights["model.embed_tokens.weight"] = embed
    weights["lm_head.weight"] = head
    return weights


def bigram_tables(
    vocab: Vocab, rng: torch.Generator, *, bigram: bool, hidden: int = TARGET_DIMS.hidden
) -> tuple[torch.Tensor, torch.Tensor]:
    """Embedding and lm_head of a model whose next token depends only on its current token.

    With quiet layers the final hidden state is the normalised embedding of the current token. Every
    embedding lies near a shared unit direction u, except (when ``bigram``) the predicted word's, which
    lies on an orthogonal v. lm_head maps u to the predicted word and v to the follower, so the greedy
    output is "predicted follower predicted follower ..." for a bigram target and "predicted predicted ..."
    otherwise.

    A quiet DFlash draft reproduces its (mask-token) input embedding at every block position, and GenAI
    scores it with the target's lm_head, so it always proposes the predicted word: right after any other
    token, wrong after the predicted word itself. That gives about two tokens per target step for a bigram
    target and all of them for a constant one.
    """
    u = _unit(torch.randn(hidden, generator=rng))
    v = torch.randn(hidden, generator=rng)
    v = _unit(v - (v @ u) * u)
    directions = u.expand(VOCAB_SIZE, hidden).clone()
    if bigram:
        directions[vocab.predicted] = v
    embed = directions + normal(rng, VOCAB_SIZE, hidden, std=_EMBED_NOISE / math.sqrt(hidden))
    # RMSNorm scales the hidden state to norm sqrt(hidden); divide that out so the winner scores _WINNING_LOGIT.
    head = normal(rng, VOCAB_SIZE, hidden, std=INIT_STD)
    head[vocab.predicted] = u * _WINNING_LOGIT / math.sqrt(hidden)
    head[vocab.follower] = v * _WINNING_LOGIT / math.sqrt(hidden)
    return embed, head


def draft_trunk(
    dims: Dims, rng: torch.Generator, *, quiet: bool, taps: int = len(TARGET_LAYER_IDS)
) -> dict[str, torch.Tensor]:
    """Keys every block-diffusion draft shares: decoder layers, final norm, and the target-feature fuser.

    `taps` is the number of target layers the draft reads (the fuser `fc` takes their concatenation).
    """
    weights: dict[str, torch.Tensor] = {}
    for i in range(dims.layers):
        weights |= _decoder_layer(f"layers.{i}", dims, rng, quiet=quiet)
    weights["norm.weight"] = torch.ones(dims.hidden)
    weights["fc.weight"] = normal(rng, dims.hidden, taps * dims.hidden, std=INIT_STD)
    weights["hidden_norm.weight"] = torch.ones(dims.hidden)
    return weights


def _decoder_layer(prefix: str, dims: Dims, rng: torch.Generator, *, quiet: bool) -> dict[str, torch.Tensor]:
    """One Qwen3 decoder layer. A quiet layer leaves the residual stream almost untouched."""
    out_std = _QUIET_STD if quiet else INIT_STD
    q_width, kv_width = dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    return {
        f"{prefix}.self_attn.q_proj.weight": normal(rng, q_width, dims.hidden, std=INIT_STD),
        f"{prefix}.self_attn.k_proj.weight": normal(rng, kv_width, dims.hidden, std=INIT_STD),
        f"{prefix}.self_attn.v_proj.weight": normal(rng, kv_width, dims.hidden, std=INIT_STD),
        f"{prefix}.self_attn.o_proj.weight": normal(rng, dims.hidden, q_width, std=out_std),
        f"{prefix}.self_attn.q_norm.weight": torch.ones(dims.head_dim),
        f"{prefix}.self_attn.k_norm.weight": torch.ones(dims.head_dim),
        f"{prefix}.mlp.gate_proj.weight": normal(rng, dims.intermediate, dims.hidden, std=INIT_STD),
        f"{prefix}.mlp.up_proj.weight": normal(rng, dims.intermediate, dims.hidden, std=INIT_STD),
        f"{prefix}.mlp.down_proj.weight": normal(rng, dims.hidden, dims.intermediate, std=out_std),
        f"{prefix}.input_layernorm.weight": torch.ones(dims.hidden),
        f"{prefix}.post_attention_layernorm.weight": torch.ones(dims.hidden),
    }


def _unit(vector: torch.Tensor) -> torch.Tensor:
    return vector / vector.norm()
