"""Tiny mixture-of-experts targets: Qwen3-MoE (`qwen3_moe`, an LLM) checkouts, and the expert layout both MoE families
(this one and Qwen3.5-MoE, `qwen3_5.target_checkpoint(moe=True)`) are written in.

The Hub repos of both families store one tensor per expert (``mlp.experts.{e}.gate_proj.weight``, ...), and
transformers fuses them into ``experts.gate_up_proj`` / ``experts.down_proj`` when it loads them; the tiny checkouts
are written the Hub's way (`split_experts`) so that an export reads what it would read from the Hub.

Like the dense kinds, a ``constant`` or ``bigram`` target silences every residual writer (attention output, every
expert's down projection) so its next token depends on the current token only (`weights.bigram_tables`): a quiet
draft is then right always (``constant``) or about half the time (``bigram``), whatever the router picks.
"""

from __future__ import annotations

import torch

from tinymodels.layouts import Checkpoint, _card, _qwen3_config, _repo_name
from tinymodels.tokenizer import Vocab
from tinymodels.weights import _QUIET_STD, TARGET_DIMS, TargetBehaviour, bigram_tables, normal

# Four experts of 128 (whole int4 groups), two routed per token: every token mixes experts, and each expert's
# tensors are small enough to keep the checkout a few megabytes.
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
EXPERT_WIDTH = 128
# Names ending so are residual writers: quiet ones make the output depend on the current token only.
RESIDUAL_WRITERS = (
    "self_attn.o_proj.weight",
    "linear_attn.out_proj.weight",
    "mlp.down_proj.weight",
    "mlp.experts.down_proj",
    "mlp.shared_expert.down_proj.weight",
)


def split_experts(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' fused expert tensors (``experts.gate_up_proj`` [E, 2I, H], gate rows first, and
    ``experts.down_proj`` [E, H, I]) as one tensor per expert, the layout the Hub repos store."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in weights.items():
        if name.endswith("experts.gate_up_proj"):
            stem, width = name.removesuffix("gate_up_proj"), tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                out[f"{stem}{e}.gate_proj.weight"] = tensor[e, :width].clone()
                out[f"{stem}{e}.up_proj.weight"] = tensor[e, width:].clone()
        elif name.endswith("experts.down_proj"):
            stem = name.removesuffix("down_proj")
            for e in range(tensor.shape[0]):
                out[f"{stem}{e}.down_proj.weight"] = tensor[e].clone()
        else:
            out[name] = tensor
    return out


def quiet_writers(weights: dict[str, torch.Tensor], rng: torch.Generator, prefix: str) -> dict[str, torch.Tensor]:
    """Every residual writer under `prefix` replaced by a near-zero tensor of its shape (not zero: int4 groups still
    see an ordinary, narrow range)."""
    return {
        name: normal(rng, *tensor.shape, std=_QUIET_STD)
        for name, tensor in weights.items()
        if name.startswith(prefix) and name.endswith(RESIDUAL_WRITERS)
    }


def qwen3_moe_target(
    behaviour: TargetBehaviour,
    vocab: Vocab,
    *,
    target_repo: str,
    seed: int,
    rng: torch.Generator,
    transformers_version: str,
) -> Checkpoint:
    """A Qwen3-MoE checkout as the Qwen org ships one (Qwen3-Coder-30B-A3B's layout), `TARGET_DIMS` wide."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = _qwen3_config(TARGET_DIMS, vocab, transformers_version) | {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "moe_intermediate_size": EXPERT_WIDTH,
        "norm_topk_prob": True,
        "num_experts": EXPERTS,
        "num_experts_per_tok": EXPERTS_PER_TOKEN,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    fields = {k: v for k, v in config.items() if k not in ("architectures", "transformers_version", "model_type")}
    # The module initialisers draw from the global generator; fork it so the caller's stream is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=rng)))
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**fields)).float().eval()
    weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    if behaviour != "random":
        weights |= quiet_writers(weights, rng, "model.layers.")
        embed, head = bigram_tables(vocab, rng, bigram=behaviour == "bigram", hidden=TARGET_DIMS.hidden)
        weights |= {"model.embed_tokens.weight": embed, "lm_head.weight": head}
    readme = _card(
        {"license": "apache-2.0", "library_name": "transformers", "pipeline_tag": "text-generation"},
        title=_repo_name(target_repo),
        body=f"Tiny generated Qwen3-MoE model ({behaviour} weights, seed {seed}) for offline tests.",
    )
    generation_config = {
        "bos_token_id": vocab.endoftext, "do_sample": True, "eos_token_id": [vocab.im_end, vocab.endoftext],
        "pad_token_id": vocab.endoftext, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
        "transformers_version": transformers_version,
    }  # fmt: skip
    return Checkpoint(config=config, weights=split_experts(weights), readme=readme, generation_config=generation_config)
