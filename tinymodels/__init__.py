"""Tiny generated checkpoints, laid out like real Hub checkouts, for tests and the offline demo.

There is no Hub access where the bot is developed, so every stage is exercised on pairs written here: a
Qwen3 target (as the Qwen org publishes it) and a draft (as z-lab, DeepSeek or the DFlash2 authors
publish it). Files, key names, dtypes and card text follow the real repositories so that the discover,
export and validate stages see what they would see on the Hub; only the sizes are tiny.

The ``dflash`` and ``oracle`` pairs are constructed so that their greedy output, and so the speculative
accept length, is known in closed form (`weights.bigram_tables`). Measured through int4 export and
OpenVINO GenAI on CPU: ``oracle`` accepts num_assistant_tokens + 1 tokens per target step, ``dflash``
about 2 (1.85 for k=3 and 1.92 for k=7 over 25 and 49 tokens), ``random`` 1; all three are token-identical
to plain greedy, ``dflash`` and ``oracle`` under default CPU properties too.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import cast

from tinymodels import layouts, moe, qwen3_5
from tinymodels.tokenizer import FOLLOWER_WORD, PREDICTED_WORD, build_tokenizer, vocab_of
from tinymodels.weights import DEEP_TARGET_DIMS, TARGET_DIMS, WIDE_DRAFT_DIMS, Dims, TargetBehaviour, generator

__all__ = ["DEFAULT_TARGET_REPO", "FOLLOWER_WORD", "PREDICTED_WORD", "TINY_KINDS", "TinyPair", "make_tiny"]

DEFAULT_TARGET_REPO = "Qwen/Qwen3-Tiny"
DEFAULT_TARGET_REPOS = MappingProxyType(
    {
        "qwen3": DEFAULT_TARGET_REPO,
        "qwen3_5": "Qwen/Qwen3.5-Tiny",
        "qwen3_moe": "Qwen/Qwen3-MoE-Tiny",
        "qwen3_5_moe": "Qwen/Qwen3.5-MoE-Tiny",
    }
)


@dataclasses.dataclass(frozen=True)
class TinyPair:
    """Where `make_tiny` wrote a target checkout and its draft checkout.

    Attributes:
        kind: The `TINY_KINDS` entry that was built.
        target: Directory holding the Qwen3 target, tokenizer included.
        draft: Directory holding the draft (deliberately broken for the ``broken-*`` kinds).
    """

    kind: str
    target: Path
    draft: Path


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How to build one kind: the target's weights, the draft, and any damage done to the written draft."""

    description: str
    target: TargetBehaviour | qwen3_5.Qwen3_5Behaviour
    draft: layouts.DraftBuilder
    damage: Callable[[Path], None] | None = None
    # The target's family (its model_type): "qwen3" (Qwen3ForCausalLM), "qwen3_5" (VLM, hybrid attention), or their
    # mixture-of-experts kin "qwen3_moe" and "qwen3_5_moe" (`tinymodels.moe`).
    family: str = "qwen3"
    target_dims: Dims = TARGET_DIMS  # Qwen3 targets only


def _deep(description: str, target: TargetBehaviour) -> _Kind:
    """A pair with the 32-layer target (`DEEP_TARGET_DIMS`) and a 2-layer draft tapping its layers."""
    return _Kind(
        description,
        target=target,
        draft=functools.partial(layouts.dflash_draft, num_target_layers=DEEP_TARGET_DIMS.layers),
        target_dims=DEEP_TARGET_DIMS,
    )


_KINDS: dict[str, _Kind] = {
    "dflash": _Kind(
        "DFlash pair whose draft is right about half the time (about 2 tokens per target step)",
        target="bigram",
        draft=layouts.dflash_draft,
    ),
    "oracle": _Kind(
        "DFlash pair whose draft is always right (num_assistant_tokens + 1 tokens per target step)",
        target="constant",
        draft=layouts.dflash_draft,
    ),
    "dflash-deep": _deep(
        "DFlash pair like dflash, but with a 32-layer target whose step dominates the draft's (still slower than plain "
        "greedy on CPU: at about 2 tokens per step GenAI's per-step overhead outweighs it)",
        target="bigram",
    ),
    "oracle-deep": _deep(
        "DFlash pair like oracle (the draft always right), with dflash-deep's 32-layer target: the demo's pair, "
        "clearly faster than plain greedy on CPU",
        target="constant",
    ),
    "random": _Kind(
        "random-weight target and DFlash draft: lossless, almost nothing accepted",
        target="random",
        draft=functools.partial(layouts.dflash_draft, quiet=False),
    ),
    "dspark": _Kind(
        "DSpark draft (Qwen3DSparkModel, markov_rank 0, confidence head)",
        target="bigram",
        draft=functools.partial(layouts.dspark_draft, markov_rank=0),
    ),
    "dspark-markov": _Kind(
        "DSpark draft like the released ones (markov_rank 256, confidence head fed the Markov state)",
        target="bigram",
        draft=functools.partial(layouts.dspark_draft, markov_rank=256),
    ),
    "dflash2": _Kind(
        "DFlash2 draft (DFlash2DraftModel with selector and convolution weights)",
        target="bigram",
        draft=layouts.dflash2_draft,
    ),
    "broken-llama": _Kind(
        "dflash pair, but the draft declares model_type llama",
        target="bigram",
        draft=layouts.with_config_defect(layouts.set_model_type_llama),
    ),
    "broken-layer-ids": _Kind(
        "dflash pair, but target_layer_ids [1, 40] on a 4-layer target (and on the demo's 32-layer one)",
        target="bigram",
        draft=layouts.with_config_defect(layouts.set_layer_ids_beyond_target),
    ),
    "broken-hidden-size": _Kind(
        "dflash pair, but the draft's hidden size is 256 against the target's 128",
        target="bigram",
        draft=functools.partial(layouts.dflash_draft, dims=WIDE_DRAFT_DIMS),
    ),
    "broken-mask-token": _Kind(
        "dflash pair, but mask_token_id 5000 lies outside the 512-token vocabulary",
        target="bigram",
        draft=layouts.with_config_defect(layouts.set_mask_token_beyond_vocab),
    ),
    "broken-no-dflash-config": _Kind(
        "dflash pair, but the draft config has no dflash_config",
        target="bigram",
        draft=layouts.with_config_defect(layouts.drop_dflash_config),
    ),
    "broken-config-json": _Kind(
        "dflash pair, but the draft config.json is cut off (invalid JSON)",
        target="bigram",
        draft=layouts.dflash_draft,
        damage=layouts.truncate_config,
    ),
    "broken-pickle": _Kind(
        "dflash pair, but the draft weights are only a pickled pytorch_model.bin",
        target="bigram",
        draft=layouts.dflash_draft,
        damage=layouts.repickle_weights,
    ),
    "broken-truncated": _Kind(
        "dflash pair, but the draft model.safetensors ends before its header's offsets",
        target="bigram",
        draft=layouts.dflash_draft,
        damage=layouts.truncate_weights,
    ),
    "dflash-qwen3_5": _Kind(
        "Qwen3.5 VLM target (hybrid linear/full attention) and a DFlash draft right about half the time",
        target="bigram",
        draft=qwen3_5.dflash_draft,
        family="qwen3_5",
    ),
    "oracle-qwen3_5": _Kind(
        "Qwen3.5 VLM target and a DFlash draft that is always right (num_assistant_tokens + 1 per step)",
        target="constant",
        draft=qwen3_5.dflash_draft,
        family="qwen3_5",
    ),
    "partial-qwen3_5": _Kind(
        "Qwen3.5 VLM target with live layers and a draft accepted in part: the linear-attention state rolls back",
        target="partial",
        draft=qwen3_5.dflash_draft,
        family="qwen3_5",
    ),
    "oracle-qwen3_moe": _Kind(
        "Qwen3-MoE target (4 experts, 2 routed per token) and a DFlash draft that is always right",
        target="constant",
        draft=layouts.dflash_draft,
        family="qwen3_moe",
    ),
    "oracle-qwen3_5_moe": _Kind(
        "Qwen3.5-MoE VLM target (hybrid attention, routed and shared experts) and a DFlash draft that is always right",
        target="constant",
        draft=qwen3_5.dflash_draft,
        family="qwen3_5_moe",
    ),
}

TINY_KINDS: Mapping[str, str] = MappingProxyType({name: kind.description for name, kind in _KINDS.items()})
"""Every kind `make_tiny` builds, with a one-line description (for the CLI's choices and help)."""


def make_tiny(kind: str, out: Path, *, target_repo: str | None = None, seed: int = 0) -> TinyPair:
    """Write a tiny target checkout to ``out/target`` and a draft checkout to ``out/draft``.

    The same kind, target_repo and seed give byte-identical files. For one seed, every kind except
    ``oracle`` and ``random`` shares the same (bigram) target, so a broken kind differs from ``dflash``
    only in its defect. The first call in a process takes about a second (imports and tokenizer
    training); later calls take milliseconds.

    Args:
        kind: One of `TINY_KINDS`.
        out: Parent directory; created if missing.
        target_repo: Repo id the draft card names as its target (default: `DEFAULT_TARGET_REPOS` for the
            kind's family, e.g. ``Qwen/Qwen3-Tiny`` or ``Qwen/Qwen3.5-Tiny``).
        seed: Seed for every random weight.

    Returns:
        The directories written.

    Raises:
        ValueError: Unknown kind (with the closest names), or a negative seed.
        FileExistsError: ``out/target`` or ``out/draft`` exists and is not empty; nothing is overwritten.
    """
    spec = _KINDS.get(kind)
    if spec is None:
        close = difflib.get_close_matches(kind, _KINDS, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"Unknown tiny kind {kind!r}; choose one of {', '.join(_KINDS)}.{hint}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    target_repo = target_repo or DEFAULT_TARGET_REPOS[spec.family]
    out = Path(out)
    pair = TinyPair(kind=kind, target=out / "target", draft=out / "draft")
    for directory in (pair.target, pair.draft):
        if directory.exists() and any(directory.iterdir()):
            raise FileExistsError(f"{directory} is not empty; choose a fresh output directory.")

    import transformers  # deferred: importing it takes seconds, and only building needs it

    if spec.family in ("qwen3_5", "qwen3_5_moe"):
        tokenizer = qwen3_5.tokenizer()
        vocab = vocab_of(tokenizer)
        target = qwen3_5.target_checkpoint(
            cast("qwen3_5.Qwen3_5Behaviour", spec.target),  # the family says which behaviours apply
            tokenizer,
            vocab,
            target_repo=target_repo,
            seed=seed,
            rng=generator(seed, stream=0),
            transformers_version=transformers.__version__,
            moe=spec.family == "qwen3_5_moe",
        )
    elif spec.family == "qwen3_moe":
        tokenizer = build_tokenizer()
        vocab = vocab_of(tokenizer)
        target = moe.qwen3_moe_target(
            cast(TargetBehaviour, spec.target),
            vocab,
            target_repo=target_repo,
            seed=seed,
            rng=generator(seed, stream=0),
            transformers_version=transformers.__version__,
        )
    else:
        tokenizer = build_tokenizer()
        vocab = vocab_of(tokenizer)
        target = layouts.target_checkpoint(
            cast(TargetBehaviour, spec.target),
            vocab,
            target_repo=target_repo,
            seed=seed,
            rng=generator(seed, stream=0),
            transformers_version=transformers.__version__,
            dims=spec.target_dims,
        )
    context = layouts.BuildContext(
        kind=kind,
        seed=seed,
        vocab=vocab,
        target_repo=target_repo,
        target_weights=target.weights,
        rng=generator(seed, stream=1),
        transformers_version=transformers.__version__,
    )
    layouts.write_checkpoint(pair.target, target)
    tokenizer.save_pretrained(pair.target)
    layouts.write_checkpoint(pair.draft, spec.draft(context))
    if spec.damage is not None:
        spec.damage(pair.draft)
    return pair
