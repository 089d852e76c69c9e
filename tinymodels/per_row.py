"""A tiny per-row DFlash draft IR, built the way optimum-intel PR #2096 describes the export (docs/design.md §5, §10).

No released optimum-intel writes this format yet, so the bot's per-row rules are tested on an IR made here: a
small PyTorch module converted with `openvino.convert_model`, made stateful with the plain KV-cache update, and
annotated with the DFlash rt_info. What it has, as the PR describes:

- inputs `inputs_embeds`, `hidden_states`, `position_ids`, `token_type_ids` over the `[context; block]` rows
  (token type 0: a context row, which reads the target's hidden states through `fc`; 1: a seed or mask row of
  the block, which reads its embedding), plus the stateful model's `beam_idx`;
- standard attention (`scaled_dot_product_attention`) whose mask is built from `token_type_ids` and the
  positions: causal, bidirectional inside the block, and limited to a window on the sliding layers (written in
  the shape transformers' mask functions take, so SDPAToPagedAttention reads each layer's window);
- the plain KV-cache update (past keys and values concatenated with the new rows, kept as model state);
- `last_hidden_state` over all rows, zero in the context rows;
- rt_info `dflash_mode`, `dflash/mask_token_id`, `dflash/target_layer_ids`, `dflash/candidate_position_offset`.

Broken variants (`DEFECTS`) each break one rule, so that a test can show that each is caught for its own reason.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from torch import nn

# The defects a broken variant can carry, each breaking one per-row rule of bot.builder.check_ir.
DEFECTS = {
    "sdpa-layer": "layer 0's keys take a detour between the cache and the attention, so it stays SDPA",
    "no-token-type-ids": "the mask comes from an attention_mask input; there is no token_type_ids input",
    "no-offset": "the rt_info lacks dflash/candidate_position_offset",
    "no-window": "the sliding layers' mask has no window, so no layer keeps its sliding window",
}


@dataclasses.dataclass(frozen=True)
class PerRowSpec:
    """Sizes and DFlash settings of the tiny per-row draft.

    Attributes:
        layer_types: one entry per decoder layer, "sliding_attention" or "full_attention".
        sliding_window: the window of the sliding layers, in positions.
        target_layer_ids: target layers whose hidden states the context rows read (concatenated, then `fc`).
    """

    hidden_size: int = 64
    num_heads: int = 4
    intermediate_size: int = 128
    layer_types: tuple[str, ...] = ("sliding_attention", "full_attention", "sliding_attention")
    sliding_window: int = 8
    mask_token_id: int = 3
    target_layer_ids: tuple[int, ...] = (1, 2)
    candidate_position_offset: int = 1

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def sliding_layers(self) -> tuple[int, ...]:
        return tuple(i for i, kind in enumerate(self.layer_types) if kind == "sliding_attention")


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Layer(nn.Module):
    def __init__(self, spec: PerRowSpec, *, detour: bool):
        super().__init__()
        h, d = spec.hidden_size, spec.head_dim
        self.spec, self.detour = spec, detour
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(h, h, bias=False) for _ in range(3))
        self.o_proj = nn.Linear(h, h, bias=False)
        self.gate_proj = nn.Linear(h, spec.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, spec.intermediate_size, bias=False)
        self.down_proj = nn.Linear(spec.intermediate_size, h, bias=False)
        self.input_norm = nn.Parameter(torch.ones(h))
        self.post_norm = nn.Parameter(torch.ones(h))
        self.q_norm, self.k_norm = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.spec.num_heads, self.spec.head_dim).transpose(1, 2)

    def forward(self, x, cos, sin, mask, past_k, past_v):
        normed = _rms(x, self.input_norm)
        q = _rms(self._heads(self.q_proj(normed)), self.q_norm)
        k = _rms(self._heads(self.k_proj(normed)), self.k_norm)
        v = self._heads(self.v_proj(normed))
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        # The plain KV-cache update: the new rows (context and block) are appended; the runtime starts the next
        # step at the committed length, so the block rows stored here are overwritten.
        keys, values = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        # The defect: two reversals leave the keys as they were, but hide the cache from the pattern matcher.
        attend_keys = torch.flip(torch.flip(keys, [2]), [2]) if self.detour else keys
        attended = nn.functional.scaled_dot_product_attention(q, attend_keys, values, attn_mask=mask)
        attended = attended.transpose(1, 2).reshape(x.shape[0], x.shape[1], self.spec.hidden_size)
        x = x + self.o_proj(attended)
        normed = _rms(x, self.post_norm)
        x = x + self.down_proj(nn.functional.silu(self.gate_proj(normed)) * self.up_proj(normed))
        return x, keys, values


class PerRowDraft(nn.Module):
    """The per-row draft backbone: rows `[context; block]` in, `last_hidden_state` over all rows out."""

    def __init__(self, spec: PerRowSpec, *, defects: frozenset[str] = frozenset()):
        super().__init__()
        self.spec, self.defects = spec, defects
        h = spec.hidden_size
        self.fc = nn.Linear(h * len(spec.target_layer_ids), h, bias=False)
        self.hidden_norm = nn.Parameter(torch.ones(h))
        self.norm = nn.Parameter(torch.ones(h))
        self.layers = nn.ModuleList(
            _Layer(spec, detour="sdpa-layer" in defects and i == 0) for i in range(len(spec.layer_types))
        )

    def _masks(self, position_ids, token_type_ids, past_length):
        """(full mask, sliding mask): additive float masks [batch, 1, rows, past + rows] (0 allowed, -inf not).

        Allowed: a key at or before the query's position, or any key of the block when the query is a block row
        (bidirectional block); the sliding layers also need the key inside the window. The and-chain has the shape
        transformers' mask functions give it (`and_masks(...)` → Broadcast → Select → Slice), the shape
        SDPAToPagedAttention reads a layer's sliding window from.
        """
        rows = position_ids.shape[1]
        total = past_length + rows
        kv_positions = torch.arange(total).unsqueeze(0)  # cache slots hold consecutive positions
        kv_types = torch.cat([torch.zeros_like(token_type_ids[:, :1]).expand(-1, past_length), token_type_ids], 1)
        q_idx = position_ids[:, None, :, None]
        kv_idx = kv_positions[:, None, None, :]
        q_block = token_type_ids[:, None, :, None] == 1
        kv_block = kv_types[:, None, None, :] == 1
        causal_or_block = (kv_idx <= q_idx) | (q_block & kv_block)
        in_cache = kv_idx >= 0
        query_row = q_idx >= 0
        known_kv = kv_types[:, None, None, :] >= 0

        def additive(window_check):
            allowed = (query_row & ((causal_or_block & window_check) & in_cache)) & known_kv
            allowed = allowed.expand(position_ids.shape[0], 1, rows, total)
            bias = torch.where(allowed, torch.zeros(()), torch.full((), float("-inf")))
            return bias[:, :, :, :total]

        full = additive(kv_idx >= 0)
        if "no-window" in self.defects:
            return full, full
        return full, additive(kv_idx > q_idx + (-self.spec.sliding_window))

    def forward(self, inputs_embeds, hidden_states, position_ids, token_type_ids, *past):
        h, d = self.spec.hidden_size, self.spec.head_dim
        block = (token_type_ids == 1)[:, :, None]
        # Context rows read the target's hidden states, block rows (seed + masks) their embeddings.
        context = self.fc(_rms(hidden_states, torch.ones(hidden_states.shape[-1])))
        x = torch.where(block, inputs_embeds, _rms(context, self.hidden_norm))
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        angles = position_ids[:, :, None].to(torch.float32) * inv_freq[None, None, :]
        angles = torch.cat([angles, angles], dim=-1)[:, None, :, :]
        cos, sin = angles.cos(), angles.sin()
        full_mask, sliding_mask = self._masks(position_ids, token_type_ids, past[0].shape[2])
        presents = []
        for i, layer in enumerate(self.layers):
            mask = sliding_mask if self.spec.layer_types[i] == "sliding_attention" else full_mask
            x, keys, values = layer(x, cos, sin, mask, past[2 * i], past[2 * i + 1])
            presents += [keys, values]
        # Only block rows are candidates: the context rows' output is zero.
        last_hidden_state = torch.where(block, _rms(x, self.norm), torch.zeros_like(x[:, :1, :1]))
        del h
        return (last_hidden_state, *presents)


def per_row_module(spec: PerRowSpec, *, defects: frozenset[str] = frozenset(), seed: int = 0) -> PerRowDraft:
    """The torch module `write_per_row_ir` converts (same seed, same weights): the reference for its IR."""
    torch.manual_seed(seed)
    return PerRowDraft(spec, defects=frozenset(defects)).eval()


def write_per_row_ir(
    out: Path, *, spec: PerRowSpec | None = None, defects: frozenset[str] | set[str] = frozenset(), seed: int = 0
) -> Path:
    """Convert the tiny per-row draft to `out/openvino_model.xml/.bin` with its DFlash rt_info.

    Args:
        out: folder to write (created).
        spec: sizes, layer kinds and DFlash settings.
        defects: names from `DEFECTS`; each breaks one per-row rule.
        seed: weight seed.

    Returns:
        The path of the written `openvino_model.xml`.

    Raises:
        ValueError: an unknown defect name.
    """
    import openvino as ov
    from openvino._offline_transformations import apply_make_stateful_transformation

    unknown = set(defects) - set(DEFECTS)
    if unknown:
        raise ValueError(f"unknown per-row defects {sorted(unknown)}; choose from {sorted(DEFECTS)}")
    defects = frozenset(defects)
    spec = spec or PerRowSpec()
    module = per_row_module(spec, defects=defects, seed=seed)
    rows, past_len, taps = 5, 3, len(spec.target_layer_ids)
    example = {
        "inputs_embeds": torch.randn(1, rows, spec.hidden_size),
        "hidden_states": torch.randn(1, rows, spec.hidden_size * taps),
        "position_ids": torch.arange(past_len, past_len + rows).unsqueeze(0),
        "token_type_ids": torch.tensor([[0, 0, 1, 1, 1]]),
    }
    past_names = [f"past_key_values.{i}.{kv}" for i in range(len(spec.layer_types)) for kv in ("key", "value")]
    past = [torch.randn(1, spec.num_heads, past_len, spec.head_dim) for _ in past_names]
    inputs = {**example, **dict(zip(past_names, past, strict=True))}
    shapes = {
        "inputs_embeds": [-1, -1, spec.hidden_size],
        "hidden_states": [-1, -1, spec.hidden_size * taps],
        "position_ids": [-1, -1],
        "token_type_ids": [-1, -1],
        **{name: [-1, spec.num_heads, -1, spec.head_dim] for name in past_names},
    }
    with torch.no_grad():
        model = ov.convert_model(
            module, example_input=tuple(inputs.values()), input=[ov.PartialShape(shape) for shape in shapes.values()]
        )
    for port, name in zip(model.inputs, inputs, strict=True):
        port.get_tensor().set_names({name})
    present_names = [name.replace("past_key_values", "present") for name in past_names]
    for port, name in zip(model.outputs, ["last_hidden_state", *present_names], strict=True):
        port.get_tensor().set_names({name})
    if "no-token-type-ids" in defects:
        model = _token_types_from_attention_mask(model)
    apply_make_stateful_transformation(model, dict(zip(past_names, present_names, strict=True)))
    _reorder_cache_by_beam_idx(model)
    model.set_rt_info("True", "dflash_mode")
    model.set_rt_info(str(spec.mask_token_id), ["dflash", "mask_token_id"])
    model.set_rt_info(",".join(str(i) for i in spec.target_layer_ids), ["dflash", "target_layer_ids"])
    if "no-offset" not in defects:
        model.set_rt_info(str(spec.candidate_position_offset), ["dflash", "candidate_position_offset"])
    out.mkdir(parents=True, exist_ok=True)
    path = out / "openvino_model.xml"
    ov.save_model(model, path, compress_to_fp16=False)
    # The export writes the draft's config beside the IR; the per-row rules read the layer kinds from it.
    (out / "config.json").write_text(json.dumps(draft_config(spec), indent=2) + "\n", encoding="utf-8")
    return path


def draft_config(spec: PerRowSpec) -> dict:
    """The config.json of the tiny per-row draft, with the fields of a z-lab DFlash draft config."""
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_heads,
        "head_dim": spec.head_dim,
        "num_hidden_layers": len(spec.layer_types),
        "layer_types": list(spec.layer_types),
        "sliding_window": spec.sliding_window,
        "dflash_config": {"mask_token_id": spec.mask_token_id, "target_layer_ids": list(spec.target_layer_ids)},
    }


def _token_types_from_attention_mask(model):
    """Rename the `token_type_ids` input to `attention_mask` (the defect: no token_type_ids input)."""
    for parameter in model.get_parameters():
        if parameter.get_output_tensor(0).get_any_name() == "token_type_ids":
            parameter.set_friendly_name("attention_mask")
            parameter.get_output_tensor(0).set_names({"attention_mask"})
    return model


def _reorder_cache_by_beam_idx(model) -> None:
    """Gather every cache state by a `beam_idx` input, as optimum-intel's stateful export does."""
    import openvino as ov
    import openvino.opset13 as ops

    beam_idx = ops.parameter(ov.PartialShape([-1]), ov.Type.i32, name="beam_idx")
    beam_idx.get_output_tensor(0).set_names({"beam_idx"})
    embeds = next(p for p in model.get_parameters() if p.get_output_tensor(0).get_any_name() == "inputs_embeds")
    batch = ops.gather(ops.shape_of(embeds, ov.Type.i64), ops.constant([0], ov.Type.i64), ops.constant(0, ov.Type.i64))
    for node in model.get_ops():
        if node.get_type_name() != "ReadValue":
            continue
        # An empty cache of the request's batch to start from (the state's initializer): [batch, heads, 0, dim].
        heads, _, head_dim = (d.get_length() if d.is_static else 0 for d in list(node.get_output_partial_shape(0))[1:])
        shape = ops.concat([batch, ops.constant([heads, 0, head_dim], ov.Type.i64)], 0)
        node.set_arguments([ops.broadcast(ops.constant(0.0, node.get_output_element_type(0)), shape)])
        consumers = list(node.output(0).get_target_inputs())
        gathered = ops.gather(node.output(0), beam_idx, ops.constant(0, ov.Type.i64))
        for consumer in consumers:
            consumer.replace_source_output(gathered.output(0))
    model.add_parameters([beam_idx])
    model.validate_nodes_and_infer_types()
