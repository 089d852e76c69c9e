"""Random-weight checkpoints of real Qwen shapes, for measuring what a real build costs (bench/scale.py).

A random checkpoint has the same tensors, dtypes and bytes as a trained one, so export memory, disk and time
carry over (notes/scale-on-cpu.md); accept lengths do not. Tensor names and shapes come from transformers itself:
the model is instantiated on the ``meta`` device (no memory, no time), and each tensor is then written as random
bf16 values, shard by shard, so writing a 4B checkpoint never holds more than one shard in memory. Shards and
``model.safetensors.index.json`` follow the layout the Qwen repos use.

Drafts follow z-lab's DFlash-b16 checkpoints: the target's hidden size, 5 decoder layers, a fuser over 5 target
layers spread from layer 1 to layer ``layers - 3`` (``[1, 9, 17, 25, 33]`` on a 36-layer target, as in
z-lab/Qwen3-8B-DFlash-b16, whose 2,097,259,104 bytes this layout reproduces for the 8B shape).

The tokenizer is the tiny pairs' 490-token one: the embedding keeps the real vocabulary (151,936 rows), as real
Qwen checkpoints pad their embedding past the tokenizer.

A shape named ``NAME@N`` (`shape_named`) is NAME with its target cut to N decoder layers and every width kept: what
bench/scale.py measures per target family when the whole model does not fit the machine (docs/scale.md);
``NAME@NxE`` also cuts a MoE layer to E experts, for a MoE too wide for more than one or two depths here. Mixture-of-
experts targets are written as their Hub repos store them, one tensor per expert (transformers fuses them at load).

Gemma 4 (``gemma-4-31b``) needs transformers >= 5.5, which only its toolchain profile's environment has (the bot's own
pins Qwen3.5 to 5.2): where the running transformers lacks Gemma 4, `make_shape` and `target_shapes` run themselves
in that profile's python (`bot.core.profiles.toolchain_for`, created on first use), as the build runs its stages.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

import torch
from safetensors.torch import save_file

from tinymodels import TinyPair, layouts, qwen3_5
from tinymodels.tokenizer import build_tokenizer, vocab_of
from tinymodels.weights import INIT_STD, Dims, generator

QWEN3_VOCAB = 151936
QWEN3_MASK_TOKEN = 151669  # z-lab's DFlash mask token for Qwen3 (an added token of the real tokenizer)
QWEN3_5_VOCAB = 248320
QWEN3_5_MASK_TOKEN = 248070
GEMMA4_VOCAB = 262144
GEMMA4_MASK_TOKEN = 4  # <mask> in Gemma's vocabulary: the mask token of z-lab's Gemma 4 DFlash drafts
# The Gemma 4 tiny tokenizer: the Qwen3 one's tokens, then Gemma 4's image and video tokens (begin, end, placeholder).
GEMMA4_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>", "<|image>", "<image|>", "<|image|>", "<|video|>",
)  # fmt: skip
GEMMA4_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for item in message['content'] %}"
    "{%- if item['type'] == 'image' %}{{- '<|image|>' }}"
    "{%- elif item['type'] == 'video' %}{{- '<|video|>' }}"
    "{%- elif item['type'] == 'text' %}{{- item['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
DRAFT_LAYERS = 5
DRAFT_TAPS = 5
SHARD_BYTES = 2 * 10**9  # largest shard written; bounds the writer's memory


@dataclasses.dataclass(frozen=True)
class Experts:
    """A sparse mixture-of-experts block: `count` experts `intermediate` wide, `per_token` of them routed to each
    token, and a shared expert `shared` wide (0: none)."""

    count: int
    per_token: int
    intermediate: int
    shared: int = 0


@dataclasses.dataclass(frozen=True)
class FullAttention:
    """Gemma 4's full-attention layers (every 6th, and the last) beside its sliding-window ones: their own head width
    and KV heads, keys reused as values (`attention_k_eq_v`: no v_proj), and the sliding layers' window."""

    head_dim: int
    kv_heads: int
    sliding_window: int
    keys_are_values: bool = True


@dataclasses.dataclass(frozen=True)
class Shape:
    """One real model shape: the target's decoder sizes and its family.

    Attributes:
        name: Short name (``qwen3-4b``) for `make_shape` and ``make-tiny --shape``.
        target_repo: The real repo this shape copies (named in the draft's card).
        family: The target's model_type: ``qwen3`` (Qwen3ForCausalLM), ``qwen3_moe`` (Qwen3MoeForCausalLM),
            ``qwen3_5`` or ``qwen3_5_moe`` (VLMs with hybrid linear/full attention), ``gemma4``
            (Gemma4ForConditionalGeneration: a VLM with sliding-window and full attention).
        dims: Decoder sizes of the target's text model (`intermediate` is the dense MLP's; unused by MoE layers).
        tied: Whether the target ties its lm_head to its embedding (then no lm_head tensor is written).
        experts: The MoE block of every layer (MoE families only).
        linear_heads: Qwen3.5's GatedDeltaNet key and value head counts (128 wide each).
        vision: The vision tower (Qwen3.5, Gemma 4) as (depth, hidden, intermediate, heads).
        full_attention: Gemma 4's full-attention layers (`dims` are its sliding layers').
        draft_dims: The DFlash draft's decoder sizes when they are not the target's (its layer count is
            DRAFT_LAYERS whatever these say).
        draft_taps: How many target layers the draft's fuser reads.
    """

    name: str
    target_repo: str
    family: str
    dims: Dims
    tied: bool
    experts: Experts | None = None
    linear_heads: tuple[int, int] = (16, 16)
    vision: tuple[int, int, int, int] = (12, 768, 3072, 12)
    full_attention: FullAttention | None = None
    draft_dims: Dims | None = None
    draft_taps: int = DRAFT_TAPS

    @property
    def target_layer_ids(self) -> tuple[int, ...]:
        """z-lab's taps: `draft_taps` layers evenly spread from 1 to layers - 3 (every layer of a target cut to
        fewer than taps + 3 layers, up to `draft_taps`)."""
        taps = self.draft_taps
        if self.dims.layers < taps + 3:
            return tuple(range(min(taps, self.dims.layers)))
        last = self.dims.layers - 3
        step = (last - 1) // (taps - 1)
        return tuple(1 + i * step for i in range(taps))

    @property
    def is_vlm(self) -> bool:
        return self.family in ("qwen3_5", "qwen3_5_moe", "gemma4")

    def at_depth(self, layers: int, experts: int | None = None) -> Shape:
        """This shape with its target cut to `layers` decoder layers (`NAME@N`), every width kept; for a MoE
        shape `experts` also cuts each layer's expert count (`NAME@NxE`: routing, expert and shared widths kept),
        so that more depths of a wide MoE fit the machine."""
        # A Qwen3.5 cut needs a linear- and a full-attention layer: optimum-intel's export looks up both; a Gemma 4
        # cut keeps a sliding-window layer beside its last, full-attention one, for the same reason.
        least = 2 if self.is_vlm else 1
        kinds = "a sliding-window" if self.family == "gemma4" else "a linear-"
        if not least <= layers <= self.dims.layers:
            raise ValueError(
                f"{self.name} has {self.dims.layers} layers; a depth of {layers} is not {least}..that"
                + (f" (a {self.family} cut needs {kinds} and a full-attention layer)" if self.is_vlm else "")
            )
        if experts is None:
            return dataclasses.replace(
                self, name=f"{self.name}@{layers}", dims=dataclasses.replace(self.dims, layers=layers)
            )
        if self.experts is None or not self.experts.per_token <= experts <= self.experts.count:
            having = f"{self.experts.count} experts, {self.experts.per_token} routed" if self.experts else "no experts"
            raise ValueError(f"{self.name} has {having}; an expert count of {experts} is not a cut of them")
        return dataclasses.replace(
            self.at_depth(layers),
            name=f"{self.name}@{layers}x{experts}",
            experts=dataclasses.replace(self.experts, count=experts),
        )


_SHAPES: dict[str, Shape] = {
    "qwen3-0.6b": Shape(
        "qwen3-0.6b",
        "Qwen/Qwen3-0.6B",
        "qwen3",
        Dims(hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=3072),
        True,
    ),
    "qwen3-1.7b": Shape(
        "qwen3-1.7b",
        "Qwen/Qwen3-1.7B",
        "qwen3",
        Dims(hidden=2048, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=6144),
        True,
    ),
    "qwen3-4b": Shape(
        "qwen3-4b",
        "Qwen/Qwen3-4B",
        "qwen3",
        Dims(hidden=2560, layers=36, heads=32, kv_heads=8, head_dim=128, intermediate=9728),
        True,
    ),
    "qwen3-8b": Shape(
        "qwen3-8b",
        "Qwen/Qwen3-8B",
        "qwen3",
        Dims(hidden=4096, layers=36, heads=32, kv_heads=8, head_dim=128, intermediate=12288),
        False,
    ),
    # Text sizes of Qwen3.5-0.8B (24 layers, hidden 1024, MLP 3584, 8/2 heads of 256); the linear-attention head
    # counts and the vision tower are transformers' defaults scaled to that width, so its bytes are approximate.
    "qwen3.5-0.8b": Shape(
        "qwen3.5-0.8b",
        "Qwen/Qwen3.5-0.8B",
        "qwen3_5",
        Dims(hidden=1024, layers=24, heads=8, kv_heads=2, head_dim=256, intermediate=3584),
        True,
    ),
    # The catalogue's large targets, from their published config.json: Qwen3-Coder-30B-A3B (qwen3_moe, 48 layers,
    # 128 experts of 768, 8 routed), Qwen3.5-35B-A3B (qwen3_5_moe, 40 layers, 256 experts of 512, 8 routed and a
    # shared one, 32/16 linear heads) and Qwen3.5-27B (qwen3_5, 64 layers, MLP 17408, 48/16 linear heads), each
    # with the real 27-block vision tower. Whole, they are for sizing (sparse); bench/scale.py builds them cut to
    # a few layers (`NAME@N`).
    "qwen3-coder-30b-a3b": Shape(
        "qwen3-coder-30b-a3b",
        "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "qwen3_moe",
        Dims(hidden=2048, layers=48, heads=32, kv_heads=4, head_dim=128, intermediate=6144),
        False,
        experts=Experts(count=128, per_token=8, intermediate=768),
    ),
    "qwen3.5-35b-a3b": Shape(
        "qwen3.5-35b-a3b",
        "Qwen/Qwen3.5-35B-A3B",
        "qwen3_5_moe",
        Dims(hidden=2048, layers=40, heads=16, kv_heads=2, head_dim=256, intermediate=512),
        False,
        experts=Experts(count=256, per_token=8, intermediate=512, shared=512),
        linear_heads=(16, 32),
        vision=(27, 1152, 4304, 16),
    ),
    "qwen3.5-27b": Shape(
        "qwen3.5-27b",
        "Qwen/Qwen3.5-27B",
        "qwen3_5",
        Dims(hidden=5120, layers=64, heads=24, kv_heads=4, head_dim=256, intermediate=17408),
        False,
        linear_heads=(16, 48),
        vision=(27, 1152, 4304, 16),
    ),
    # google/gemma-4-31B-it (gemma4, Gemma4ForConditionalGeneration with its vision tower, no audio), from its
    # published config.json as public parsers of it quote it: text 60 layers, hidden 5376, MLP 21504, 32 heads;
    # sliding-window layers (window 1024) with 16 KV heads of 256, every 6th layer full attention with 4 KV heads
    # of 512 and keys reused as values; vocabulary 262144, tied embedding. The vision tower (27 blocks, hidden
    # 1152, MLP 4304, 16 heads of 72) is the one the 26B-A4B's config.json states; with it transformers 5.5.4
    # instantiates 31,273,088,876 parameters, the 31B's published bf16 count (its card: 30.7B + ~550M vision).
    # The draft has the widths of z-lab's Gemma-4-31B DFlash config as quoted by a public test of its schema
    # (hidden 5376, 64 heads of 128, 8 KV heads, MLP 10752, 6 target layers, mask token 4) in this module's
    # layout (5 full-attention layers: the published one makes 4 of them sliding-window, same tensors).
    "gemma-4-31b": Shape(
        "gemma-4-31b",
        "google/gemma-4-31B-it",
        "gemma4",
        Dims(hidden=5376, layers=60, heads=32, kv_heads=16, head_dim=256, intermediate=21504),
        True,
        vision=(27, 1152, 4304, 16),
        full_attention=FullAttention(head_dim=512, kv_heads=4, sliding_window=1024),
        draft_dims=Dims(hidden=5376, layers=DRAFT_LAYERS, heads=64, kv_heads=8, head_dim=128, intermediate=10752),
        draft_taps=6,
    ),
}
# Qwen3.6-27B and Qwen3.6-35B-A3B reuse Qwen3.5's classes (model_type qwen3_5 and qwen3_5_moe) at the same sizes, as
# public readings of their config.json state them (64 layers of hidden 5120 with the 27-block vision tower; 40 layers
# of 256 experts of 512, 8 routed): the same shapes under their own repos.
_SHAPES |= {
    f"qwen3.6-{size}": dataclasses.replace(
        _SHAPES[f"qwen3.5-{size}"], name=f"qwen3.6-{size}", target_repo=f"Qwen/Qwen3.6-{size.upper()}"
    )
    for size in ("27b", "35b-a3b")
}
SHAPES: Mapping[str, Shape] = MappingProxyType(_SHAPES)
"""Every shape `make_shape` writes; the 8B and larger shapes are for sizing (16 GB of weights and more), not for this
machine, except cut to a few layers (`shape_named`)."""


def shape_named(name: str) -> Shape:
    """`SHAPES[name]`, or for ``NAME@N`` that shape cut to N decoder layers, for ``NAME@NxE`` (MoE shapes) also to
    E experts a layer (`Shape.at_depth`).

    Raises:
        ValueError: Unknown shape (listing the known ones), or a depth that is not a whole number in range.
    """
    base, _, depth = name.partition("@")
    shape = SHAPES.get(base)
    if shape is None:
        raise ValueError(f"Unknown shape {name!r}; choose one of {', '.join(SHAPES)} (NAME@N: cut to N layers).")
    if not depth:
        return shape
    layers, cut, experts = depth.partition("x")
    if not layers.isdigit() or (cut and not experts.isdigit()):
        raise ValueError(
            f"{name!r}: after '@' come a number of layers and, for a MoE shape, 'x' and a number of experts, "
            f"e.g. {base}@2 or {base}@2x64"
        )
    return shape.at_depth(int(layers), int(experts) if experts else None)


def make_shape(name: str | Shape, out: Path, *, seed: int = 0, sparse: bool = False) -> TinyPair:
    """Write a random-weight target checkout to ``out/target`` and its DFlash draft to ``out/draft``.

    Args:
        name: One of `SHAPES`, ``NAME@N`` (cut to N layers), or a `Shape`.
        out: Parent directory; created if missing.
        seed: Seed for every random weight.
        sparse: Write all-zero weights as sparse files instead (`write_sparse_weights`): the real files, bytes and
            headers in no disk and no time, for what reads only sizes and configs (planning, sizing); not for export.

    Returns:
        The two directories (`TinyPair.kind` is the shape's name).

    Raises:
        ValueError: Unknown shape (listing the known ones).
        FileExistsError: ``out/target`` or ``out/draft`` exists and is not empty.
    """
    shape = name if isinstance(name, Shape) else shape_named(name)
    dirs = TinyPair(kind=shape.name, target=Path(out) / "target", draft=Path(out) / "draft")
    for directory in (dirs.target, dirs.draft):
        if directory.exists() and any(directory.iterdir()):
            raise FileExistsError(f"{directory} is not empty; choose a fresh output directory.")
    if not _transformers_knows(shape.family):
        _in_profile(shape, "make_shape", str(Path(out).resolve()), str(seed), str(sparse))
        return dirs
    import transformers  # deferred: seconds to import

    version = transformers.__version__
    if shape.family == "gemma4":
        tokenizer = gemma4_tokenizer()
        target_config, model_class = _gemma4_target(shape, tokenizer, version)
        mask_token, vocab_size = GEMMA4_MASK_TOKEN, GEMMA4_VOCAB
        rope_theta = 1000000
    elif shape.is_vlm:
        tokenizer = qwen3_5.tokenizer()
        target_config, model_class = _qwen3_5_target(shape, tokenizer, version)
        mask_token, vocab_size = QWEN3_5_MASK_TOKEN, QWEN3_5_VOCAB
        rope_theta = 10000000
    else:
        tokenizer = build_tokenizer()
        target_config, model_class = _qwen3_target(shape, version)
        mask_token, vocab_size = QWEN3_MASK_TOKEN, QWEN3_VOCAB
        rope_theta = 1000000
    vocab = vocab_of(tokenizer)
    dirs.target.mkdir(parents=True, exist_ok=True)
    _write_json(dirs.target / "config.json", target_config)
    _write_json(
        dirs.target / "generation_config.json",
        {
            "bos_token_id": vocab.endoftext,
            "do_sample": True,
            "eos_token_id": [vocab.im_end, vocab.endoftext],
            "pad_token_id": vocab.endoftext,
            "temperature": 0.6,
            "top_k": 20,
            "top_p": 0.95,
            "transformers_version": version,
        },
    )
    (dirs.target / "README.md").write_text(
        layouts._card(
            {
                "license": "apache-2.0",
                "library_name": "transformers",
                "pipeline_tag": "image-text-to-text" if shape.is_vlm else "text-generation",
            },
            title=layouts._repo_name(shape.target_repo),
            body=f"Random-weight checkpoint with the shape of {shape.target_repo} (seed {seed}), for scale benchmarks.",
        )
    )
    if shape.is_vlm:
        files = _gemma4_processor_files() if shape.family == "gemma4" else qwen3_5._processor_files()
        for file_name, text in files.items():
            (dirs.target / file_name).write_text(text)
    tokenizer.save_pretrained(dirs.target)
    target_shapes = per_expert(_state_shapes(model_class, target_config, tied=shape.tied))
    write_weights = write_sparse_weights if sparse else functools.partial(write_random_weights, seed=seed)
    write_weights(dirs.target, target_shapes, stream=0)

    draft_config = layouts._qwen3_config(shape.draft_dims or shape.dims, vocab, version) | {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "block_size": 16,
        "dflash_config": {"mask_token_id": mask_token, "target_layer_ids": list(shape.target_layer_ids)},
        "dtype": "bfloat16",
        "layer_types": ["full_attention"] * DRAFT_LAYERS,
        "max_window_layers": DRAFT_LAYERS,
        "num_hidden_layers": DRAFT_LAYERS,
        "num_target_layers": shape.dims.layers,
        "rope_theta": rope_theta,
        "tie_word_embeddings": True,
        "vocab_size": vocab_size,
    }
    dirs.draft.mkdir(parents=True, exist_ok=True)
    _write_json(dirs.draft / "config.json", draft_config)
    _write_json(
        dirs.draft / "generation_config.json",
        {"bos_token_id": vocab.endoftext, "eos_token_id": vocab.im_end, "transformers_version": version},
    )
    (dirs.draft / "README.md").write_text(
        layouts._card(
            {
                "license": "mit",
                "library_name": "transformers",
                "pipeline_tag": "text-generation",
                "tags": ["dflash", "speculative-decoding", "block-diffusion", "draft-model", "qwen3"],
            },
            title=f"{layouts._repo_name(shape.target_repo)}-DFlash-b16",
            body=(
                f"Random-weight DFlash drafter with the shape of z-lab's drafts (seed {seed}), "
                "for scale benchmarks.\n\n"
                f"This drafter must be used in conjunction with the target model {shape.target_repo}."
            ),
        )
    )
    (dirs.draft / "dflash.py").write_text(layouts._code_stub("DFlashDraftModel"))
    write_weights(dirs.draft, draft_shapes(shape), stream=1)
    return dirs


def draft_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of a z-lab DFlash draft for `shape`: no embedding, no lm_head (it uses the target's)."""
    dims = dataclasses.replace(shape.draft_dims or shape.dims, layers=DRAFT_LAYERS)
    q_width, kv_width = dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    out: dict[str, tuple[int, ...]] = {}
    for i in range(dims.layers):
        p = f"layers.{i}"
        out |= {
            f"{p}.self_attn.q_proj.weight": (q_width, dims.hidden),
            f"{p}.self_attn.k_proj.weight": (kv_width, dims.hidden),
            f"{p}.self_attn.v_proj.weight": (kv_width, dims.hidden),
            f"{p}.self_attn.o_proj.weight": (dims.hidden, q_width),
            f"{p}.self_attn.q_norm.weight": (dims.head_dim,),
            f"{p}.self_attn.k_norm.weight": (dims.head_dim,),
            f"{p}.mlp.gate_proj.weight": (dims.intermediate, dims.hidden),
            f"{p}.mlp.up_proj.weight": (dims.intermediate, dims.hidden),
            f"{p}.mlp.down_proj.weight": (dims.hidden, dims.intermediate),
            f"{p}.input_layernorm.weight": (dims.hidden,),
            f"{p}.post_attention_layernorm.weight": (dims.hidden,),
        }
    out["norm.weight"] = (dims.hidden,)
    out["fc.weight"] = (dims.hidden, len(shape.target_layer_ids) * dims.hidden)
    out["hidden_norm.weight"] = (dims.hidden,)
    return out


def checkpoint_bytes(tensor_shapes: Mapping[str, tuple[int, ...]]) -> int:
    """bf16 bytes of these tensors (the safetensors data, without its header)."""
    total = 0
    for dims in tensor_shapes.values():
        count = 1
        for d in dims:
            count *= d
        total += 2 * count
    return total


def target_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of the target, as transformers would save them."""
    if not _transformers_knows(shape.family):
        return {name: tuple(dims) for name, dims in _in_profile(shape, "target_shapes").items()}
    import transformers

    if shape.family == "gemma4":
        config, model_class = _gemma4_target(shape, gemma4_tokenizer(), transformers.__version__)
    elif shape.is_vlm:
        config, model_class = _qwen3_5_target(shape, qwen3_5.tokenizer(), transformers.__version__)
    else:
        config, model_class = _qwen3_target(shape, transformers.__version__)
    return per_expert(_state_shapes(model_class, config, tied=shape.tied))


def per_expert(tensor_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """transformers' fused expert tensors (``experts.gate_up_proj`` [E, 2I, H], ``experts.down_proj`` [E, H, I]) as
    the Hub repos store them: ``experts.{e}.{gate,up,down}_proj.weight``, one per expert, which transformers fuses
    again when it loads them (a copy at load: what the MoE rows of docs/scale.md measure)."""
    out: dict[str, tuple[int, ...]] = {}
    for name, dims in tensor_shapes.items():
        if name.endswith("experts.gate_up_proj"):
            count, double, hidden = dims
            stem = name.removesuffix("gate_up_proj")
            for e in range(count):
                out[f"{stem}{e}.gate_proj.weight"] = (double // 2, hidden)
                out[f"{stem}{e}.up_proj.weight"] = (double // 2, hidden)
        elif name.endswith("experts.down_proj"):
            count, hidden, width = dims
            stem = name.removesuffix("down_proj")
            for e in range(count):
                out[f"{stem}{e}.down_proj.weight"] = (hidden, width)
        else:
            out[name] = dims
    return out


def write_random_weights(
    directory: Path, tensor_shapes: Mapping[str, tuple[int, ...]], *, seed: int, stream: int
) -> None:
    """Write bf16 random tensors (norms: ones) as Hub-style shards, one shard in memory at a time.

    One shard is ``model.safetensors``; more are ``model-0000i-of-0000n.safetensors`` plus
    ``model.safetensors.index.json``, as transformers' `save_pretrained` names them.
    """
    rng = generator(seed, stream=stream)

    def write_shard(path: Path, names: list[str]) -> None:
        save_file(
            {name: _random_tensor(name, tensor_shapes[name], rng) for name in names}, path, metadata={"format": "pt"}
        )

    _write_shards(directory, tensor_shapes, write_shard)


def write_sparse_weights(directory: Path, tensor_shapes: Mapping[str, tuple[int, ...]], *, stream: int = 0) -> None:
    """Write the same shards as `write_random_weights`, all zeros, as sparse files: a valid safetensors header
    followed by a hole of the tensors' size, so an 8 GB checkpoint takes a few kilobytes of disk and no time."""
    del stream  # zeros need no random stream; the argument keeps the two writers interchangeable

    def write_shard(path: Path, names: list[str]) -> None:
        header: dict[str, object] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name in names:
            nbytes = checkpoint_bytes({name: tensor_shapes[name]})
            header[name] = {
                "dtype": "BF16",
                "shape": list(tensor_shapes[name]),
                "data_offsets": [offset, offset + nbytes],
            }
            offset += nbytes
        encoded = json.dumps(header, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes
        with open(path, "wb") as handle:
            handle.write(len(encoded).to_bytes(8, "little") + encoded)
            handle.truncate(8 + len(encoded) + offset)

    _write_shards(directory, tensor_shapes, write_shard)


def _write_shards(
    directory: Path, tensor_shapes: Mapping[str, tuple[int, ...]], write_shard: Callable[[Path, list[str]], None]
) -> None:
    shards = list(_plan_shards(tensor_shapes))
    weight_map: dict[str, str] = {}
    for index, names in enumerate(shards, start=1):
        file_name = "model.safetensors" if len(shards) == 1 else f"model-{index:05d}-of-{len(shards):05d}.safetensors"
        write_shard(directory / file_name, names)
        weight_map |= dict.fromkeys(names, file_name)
    if len(shards) > 1:
        _write_json(
            directory / "model.safetensors.index.json",
            {
                "metadata": {"total_size": checkpoint_bytes(tensor_shapes)},
                "weight_map": dict(sorted(weight_map.items())),
            },
        )


def _plan_shards(tensor_shapes: Mapping[str, tuple[int, ...]]) -> Iterator[list[str]]:
    shard: list[str] = []
    size = 0
    for name, dims in tensor_shapes.items():
        nbytes = checkpoint_bytes({name: dims})
        if shard and size + nbytes > SHARD_BYTES:
            yield shard
            shard, size = [], 0
        shard.append(name)
        size += nbytes
    if shard:
        yield shard


def _random_tensor(name: str, dims: tuple[int, ...], rng: torch.Generator) -> torch.Tensor:
    if name.endswith(("norm.weight", "layernorm.weight", "layer_scalar")):  # Gemma 4 scales each layer's output
        return torch.ones(dims, dtype=torch.bfloat16)
    out = torch.empty(dims, dtype=torch.bfloat16)
    flat = out.view(-1)
    chunk = 1 << 24  # float32 scratch of 64 MB at a time
    for start in range(0, flat.numel(), chunk):
        part = flat[start : start + chunk]
        part.copy_(torch.randn(part.numel(), generator=rng) * INIT_STD)
    return out


def _state_shapes(model_class, config, *, tied: bool) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the model's state dict, from a meta-device instance (allocates nothing)."""
    with torch.device("meta"):
        model = model_class(config)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if tied:
        shapes.pop("lm_head.weight", None)  # save_pretrained drops the tied copy
    return shapes


def _qwen3_target(shape: Shape, version: str):
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    vocab = vocab_of(build_tokenizer())
    raw = layouts._qwen3_config(shape.dims, vocab, version) | {
        "architectures": ["Qwen3ForCausalLM"],
        "max_position_embeddings": 40960,
        "tie_word_embeddings": shape.tied,
        "torch_dtype": "bfloat16",
        "vocab_size": QWEN3_VOCAB,
    }
    fields = {k: v for k, v in raw.items() if k not in ("architectures", "transformers_version", "model_type")}
    if shape.experts is None:
        config = Qwen3Config(**fields)
        return raw, lambda _: Qwen3ForCausalLM(config)
    raw |= {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "moe_intermediate_size": shape.experts.intermediate,
        "norm_topk_prob": True,
        "num_experts": shape.experts.count,
        "num_experts_per_tok": shape.experts.per_token,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
    }
    moe = Qwen3MoeConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "transformers_version")})
    return raw, lambda _: Qwen3MoeForCausalLM(moe)


def layer_types(layers: int) -> list[str]:
    """Qwen3.5's hybrid pattern, full attention every 4th layer; a target cut below 4 layers keeps one full-attention
    layer, its last, so every cut depth of 2 or more has both kinds (`Shape.at_depth` refuses 1)."""
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    if layers < 4:
        types[-1] = "full_attention"
    return types


def _qwen3_5_target(shape: Shape, tokenizer, version: str):
    from transformers.models.qwen3_5 import Qwen3_5Config, Qwen3_5ForConditionalGeneration
    from transformers.models.qwen3_5_moe import Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration

    dims, ids = shape.dims, qwen3_5.special_ids(tokenizer)
    vocab = vocab_of(tokenizer)
    text = {
        "vocab_size": QWEN3_5_VOCAB, "hidden_size": dims.hidden, "intermediate_size": dims.intermediate,
        "num_hidden_layers": dims.layers, "layer_types": layer_types(dims.layers), "full_attention_interval": 4,
        "num_attention_heads": dims.heads, "num_key_value_heads": dims.kv_heads, "head_dim": dims.head_dim,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": shape.linear_heads[0],
        "linear_num_value_heads": shape.linear_heads[1], "linear_conv_kernel_dim": 4, "max_position_embeddings": 262144,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        "tie_word_embeddings": shape.tied, "bos_token_id": None, "eos_token_id": vocab.im_end,
        "pad_token_id": vocab.endoftext, "dtype": "bfloat16",
    }  # fmt: skip
    depth, width, mlp, heads = shape.vision
    vision = {
        "depth": depth, "hidden_size": width, "intermediate_size": mlp, "num_heads": heads, "patch_size": 16,
        "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": dims.hidden,
        "num_position_embeddings": 2304,
    }  # fmt: skip
    config_class: type = Qwen3_5Config
    model_class: type = Qwen3_5ForConditionalGeneration
    if shape.experts is not None:
        config_class, model_class = Qwen3_5MoeConfig, Qwen3_5MoeForConditionalGeneration
        text |= {
            "moe_intermediate_size": shape.experts.intermediate,
            "shared_expert_intermediate_size": shape.experts.shared,
            "num_experts": shape.experts.count,
            "num_experts_per_tok": shape.experts.per_token,
        }
    config = config_class(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=shape.tied,
    )
    return _as_written(config, model_class, version)


def _as_written(config, model_class, version: str):
    """A VLM target's config.json as its Hub repo holds it (bf16, every field, the transformers version that wrote
    it) and the builder of its model from that config."""
    config.architectures = [model_class.__name__]
    config.dtype = torch.bfloat16
    raw = json.loads(config.to_json_string(use_diff=False))
    raw["transformers_version"] = version
    return raw, lambda _: model_class(config)


def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")


def gemma4_layer_types(layers: int) -> list[str]:
    """Gemma 4's pattern: full attention every 6th layer and on the last one (transformers forces the last), sliding
    window otherwise; every cut of 2 layers or more has both kinds (`Shape.at_depth` refuses 1)."""
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
    types[-1] = "full_attention"
    return types


def gemma4_tokenizer():
    """The tiny tokenizer with Gemma 4's image and video tokens, named as `Gemma4Processor` looks them up."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from tinymodels.tokenizer import _tokenizer_json

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json(GEMMA4_SPECIAL_TOKENS)),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|MASK|>", "<|video|>"],
        extra_special_tokens={"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>"},
        chat_template=GEMMA4_CHAT_TEMPLATE,
        model_max_length=4096,
    )


def _gemma4_target(shape: Shape, tokenizer, version: str):
    from transformers.models.gemma4 import Gemma4Config, Gemma4ForConditionalGeneration

    dims, full = shape.dims, shape.full_attention
    assert full is not None, f"{shape.name}: a gemma4 shape states its full-attention layers"
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in GEMMA4_SPECIAL_TOKENS}
    text = {
        "vocab_size": GEMMA4_VOCAB, "hidden_size": dims.hidden, "intermediate_size": dims.intermediate,
        "num_hidden_layers": dims.layers, "layer_types": gemma4_layer_types(dims.layers),
        "num_attention_heads": dims.heads, "num_key_value_heads": dims.kv_heads, "head_dim": dims.head_dim,
        "global_head_dim": full.head_dim, "num_global_key_value_heads": full.kv_heads,
        "attention_k_eq_v": full.keys_are_values, "sliding_window": full.sliding_window,
        "final_logit_softcapping": 30.0, "max_position_embeddings": 262144, "hidden_size_per_layer_input": 0,
        "use_bidirectional_attention": "vision", "tie_word_embeddings": shape.tied,
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
    }  # fmt: skip
    depth, width, mlp, heads = shape.vision
    vision = {
        "num_hidden_layers": depth, "hidden_size": width, "intermediate_size": mlp, "num_attention_heads": heads,
        "num_key_value_heads": heads, "head_dim": width // heads, "patch_size": 16, "pooling_kernel_size": 3,
        "position_embedding_size": 10240, "standardize": True,
    }  # fmt: skip
    config = Gemma4Config(
        text_config=text,
        vision_config=vision,
        audio_config=None,
        image_token_id=ids["<|image|>"],
        boi_token_id=ids["<|image>"],
        eoi_token_id=ids["<image|>"],
        video_token_id=ids["<|video|>"],
        audio_token_id=None,
        boa_token_id=None,
        eoa_token_index=None,
        tie_word_embeddings=shape.tied,
    )
    return _as_written(config, Gemma4ForConditionalGeneration, version)


def _gemma4_processor_files() -> dict[str, str]:
    """`Gemma4Processor`'s two configs, with transformers 5.5.4's image-processor defaults (280 soft tokens an
    image, 16-pixel patches pooled 3 x 3)."""
    image = {
        "do_convert_rgb": True, "do_normalize": False, "do_rescale": True, "do_resize": True,
        "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0], "image_processor_type": "Gemma4ImageProcessor",
        "max_soft_tokens": 280, "patch_size": 16, "pooling_kernel_size": 3, "processor_class": "Gemma4Processor",
        "resample": 3, "rescale_factor": 0.00392156862745098,
    }  # fmt: skip
    processor = {
        "processor_class": "Gemma4Processor", "image_seq_length": 280, "audio_seq_length": 750,
        "audio_ms_per_token": 40,
    }  # fmt: skip
    return {
        "preprocessor_config.json": json.dumps(image, indent=2, sort_keys=True) + "\n",
        "processor_config.json": json.dumps(processor, indent=2, sort_keys=True) + "\n",
    }


def _transformers_knows(family: str) -> bool:
    """Whether this environment's transformers has the family's model (Gemma 4 needs 5.5; the others any pin)."""
    return family != "gemma4" or importlib.util.find_spec("transformers.models.gemma4") is not None


def _in_profile(shape: Shape, function: str, *args: str):
    """Run `function` of this module on `shape` (by name) in the python of the toolchain profile that builds its
    family, which imports this `tinymodels` and nothing else of this environment; returns what it prints as JSON.

    Raises:
        RuntimeError: the child failed (its last lines of output say why).
    """
    from bot.core.profiles import toolchain_for
    from bot.core.settings import Settings

    python = toolchain_for(shape.family, root=Settings.from_env(os.environ).profiles_dir).python
    if python is None or Path(python) == Path(sys.executable):
        raise RuntimeError(f"{shape.name}: this transformers lacks {shape.family} and no other profile covers it")
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from tinymodels import shapes\n"
        "shape = shapes.shape_named(sys.argv[1])\n"
        "if sys.argv[2] == 'make_shape':\n"
        "    shapes.make_shape(shape, Path(sys.argv[3]), seed=int(sys.argv[4]), sparse=sys.argv[5] == 'True')\n"
        "    print('null')\n"
        "else:\n"
        "    print(json.dumps(shapes.target_shapes(shape)))\n"
    )
    # Only this package on the child's path (this environment's site-packages would shadow the profile's pins).
    with tempfile.TemporaryDirectory(prefix="tinymodels-import-") as root:
        (Path(root) / "tinymodels").symlink_to(Path(__file__).resolve().parent)
        env = {**os.environ, "PYTHONPATH": root, "PYTHONSAFEPATH": "1"}
        done = subprocess.run(
            [str(python), "-c", code, shape.name, function, *args], env=env, capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"{shape.name}: {function} in {python} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
