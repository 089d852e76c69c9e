"""Classification and cross-checks: every broken or unsupported checkpoint is refused before any export."""

from __future__ import annotations

import json
import struct

import pytest

from bot.core.errors import Skip
from bot.core.toolchain import CAPABILITY_DFLASH, CAPABILITY_DSPARK, CAPABILITY_PER_ROW, Toolchain, detect
from bot.discover.candidates import classify_folders
from bot.discover.checkpoints import classify_draft, load_config, parse_config_text, read_target
from bot.discover.fetch import safe_copy
from bot.discover.weights import safetensors_size
from tests.conftest import fast_recipe

BROKEN = {
    "broken-llama": "model_type 'llama'",
    "broken-layer-ids": "target_layer_ids [1, 40] reach beyond",
    "broken-hidden-size": "hidden_size 256 differs",
    "broken-mask-token": "mask_token_id 5000 is outside",
    "broken-no-dflash-config": "has no dflash_config",
    "broken-config-json": "not valid JSON",
    "broken-pickle": "pickle format (pytorch_model.bin)",
    "broken-truncated": "is truncated",
}


def _refusal(tiny, kind: str, toolchain: Toolchain | None = None) -> Skip:
    pair = tiny(kind)
    with pytest.raises(Skip) as caught:
        classify_folders(pair.draft, pair.target, fast_recipe(), toolchain=toolchain or detect())
    return caught.value


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_each_broken_variant_is_refused_before_export_with_its_own_reason(tiny, kind):
    error = _refusal(tiny, kind)
    assert BROKEN[kind] in error.message
    assert error.stage in ("classify", "cross-check")


def test_broken_reasons_are_distinct(tiny):
    messages = {kind: _refusal(tiny, kind).message for kind in BROKEN}
    assert len(set(messages.values())) == len(BROKEN)


@pytest.mark.parametrize(
    "kind,needs",
    [("dspark", "dflash-per-row"), ("dspark-markov", "markov_rank 256"), ("dflash2", "dflash2 capability")],
)
def test_unsupported_kinds_name_the_missing_exporter_capability(tiny, kind, needs):
    error = _refusal(tiny, kind)
    assert needs in error.message
    assert "optimum-intel 2.2.0" in error.message


def test_dspark_becomes_buildable_when_the_toolchain_gains_the_capability(tiny):
    richer = Toolchain(
        versions=detect().versions, capabilities=frozenset({CAPABILITY_DFLASH, CAPABILITY_PER_ROW, CAPABILITY_DSPARK})
    )
    pair = tiny("dspark")
    classified = classify_folders(pair.draft, pair.target, fast_recipe(), toolchain=richer)
    assert classified.kind == "dspark" and classified.draft_format == "per-row"


def test_valid_pair_classifies(tiny):
    pair = tiny("dflash")
    classified = classify_folders(pair.draft, pair.target, fast_recipe(), toolchain=detect())
    assert classified.kind == "dflash" and classified.draft_format == "stateful"
    assert classified.target_model_type == "qwen3" and not classified.target_is_vlm
    assert classify_draft(load_config(pair.draft)).target_layer_ids == (1, 2)
    target = read_target(load_config(pair.target))
    assert target.num_hidden_layers == 4 and target.vocab_size == 512


def test_vlm_target_dimensions_come_from_text_config():
    config = {
        "model_type": "qwen3_5",
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "text_config": {
            "hidden_size": 256,
            "num_hidden_layers": 8,
            "vocab_size": 1024,
            "layer_types": ["linear_attention"] * 3
            + ["full_attention"]
            + ["linear_attention"] * 3
            + ["full_attention"],
        },
    }
    target = read_target(config)
    assert (target.hidden_size, target.num_hidden_layers, target.vocab_size) == (256, 8, 1024)
    assert target.is_vlm and target.full_attention_layers == 2
    assert target.linear_attention  # its GatedDeltaNet layers need GenAI's linear-attention state pool


def test_gemma4_sliding_window_layers_count_as_attention_layers():
    """Gemma 4's sliding-window layers are softmax attention (one PagedAttention op each), not linear attention."""
    text = {"hidden_size": 5376, "num_hidden_layers": 6, "vocab_size": 262144}
    config = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "text_config": text}
    text["layer_types"] = ["sliding_attention"] * 5 + ["full_attention"]
    target = read_target(config)
    assert target.is_vlm and (target.num_hidden_layers, target.full_attention_layers) == (6, 6)
    assert not target.linear_attention  # GenAI refuses a linear-attention state pool for it (bot.builder.validate)


def test_dspark_detected_by_projector_type():
    spec = classify_draft(
        {
            "architectures": ["DFlashDraftModel"],
            "model_type": "qwen3",
            "dflash_config": {"projector_type": "dspark", "mask_token_id": 3, "target_layer_ids": [1]},
        }
    )
    assert spec.kind == "dspark"


def test_safe_copy_drops_code_and_pickles_and_strips_auto_map(tiny, tmp_path):
    pair = tiny("dflash")
    (pair.draft / "evil.bin").write_bytes(b"not copied")
    copy = safe_copy(pair.draft, tmp_path / "copy")
    names = sorted(p.name for p in copy.iterdir())
    assert "dflash.py" not in names and "evil.bin" not in names
    assert "model.safetensors" in names and "config.json" in names
    assert "auto_map" not in json.loads((copy / "config.json").read_text())
    (pair.draft / "evil.bin").unlink()


# Hostile numbers (issue 12.1): every number read from a source is checked where it enters; a bad one is a Skip
# naming the file and the field, never an OverflowError or ValueError.

DFLASH = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 1,
    "dflash_config": {"mask_token_id": 5, "target_layer_ids": [1, 2]},
}
TARGET = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "vocab_size": 512,
}


def _with(config: dict, dotted: str, raw: str) -> bytes:
    """`config` as JSON text with the field at `dotted` spelled as the raw JSON `raw` (e.g. Infinity, 1e400)."""
    data = json.loads(json.dumps(config))
    *parents, key = dotted.split(".")
    holder = data
    for parent in parents:
        holder = holder[parent]
    holder[key] = "__RAW__"
    return json.dumps(data).replace('"__RAW__"', raw).encode()


HOSTILE = [
    ("Infinity", "Infinity"),
    ("-Infinity", "-Infinity"),
    ("NaN", "NaN"),
    ("1e400", "Infinity"),
    ("64.0", "64.0"),
    ("true", "true"),
    ("false", "false"),
    ('"64"', "'64'"),
    ("-1", "-1"),
    ("[64]", "[64]"),
    ("{}", "{}"),
    ("4294967296", "4294967296"),
    ("1" + "0" * 40, "an integer of 41 digits"),
    ("9" * 5000, "an integer of 5000 digits"),
]


@pytest.mark.parametrize("raw,shown", HOSTILE, ids=[h[0][:12] for h in HOSTILE])
@pytest.mark.parametrize(
    "field", ["hidden_size", "num_hidden_layers", "dflash_config.mask_token_id", "dflash_config.target_layer_ids.1"]
)
def test_hostile_numbers_in_a_draft_config_are_a_named_skip(field, raw, shown):
    if field.endswith(".1"):  # a list item: patch the list in place
        config = json.loads(json.dumps(DFLASH))
        data = json.dumps(config).replace("[1, 2]", f"[1, {raw}]").encode()
        named = "dflash_config.target_layer_ids[1]"
    else:
        data, named = _with(DFLASH, field, raw), field
    with pytest.raises(Skip) as caught:
        classify_draft(parse_config_text(data, subject="org/draft"), subject="org/draft")
    error = caught.value
    assert error.subject == "org/draft" and error.stage == "classify"
    assert error.message.startswith(f"config.json: {named} ") and shown in error.message, error.message
    if raw == "-1" and "mask" not in field and "layer_ids" not in field:
        assert "outside [1, " in error.message


@pytest.mark.parametrize("raw,shown", HOSTILE, ids=[h[0][:12] for h in HOSTILE])
@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "vocab_size"])
def test_hostile_numbers_in_a_target_config_are_a_named_skip(field, raw, shown):
    with pytest.raises(Skip) as caught:
        read_target(parse_config_text(_with(TARGET, field, raw), subject="org/target"), subject="org/target")
    assert caught.value.message.startswith(f"config.json: {field} ") and shown in caught.value.message
    vlm = {"model_type": "qwen3_5", "text_config": dict(TARGET)}
    with pytest.raises(Skip, match=rf"^config.json: text_config\.{field} "):
        read_target(parse_config_text(_with(vlm, f"text_config.{field}", raw)))


def test_dspark_fields_are_checked_at_top_level_and_nested():
    top = {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "mask_token_id": 5,
        "target_layer_ids": [1],
        "markov_rank": 0,
    }
    with pytest.raises(Skip, match=r"^config.json: markov_rank must be an integer, got Infinity"):
        classify_draft(parse_config_text(_with(top, "markov_rank", "Infinity")))
    with pytest.raises(Skip, match=r"^config.json: num_target_layers is 0, outside \[1, "):
        classify_draft(parse_config_text(_with(top, "num_target_layers", "0")))
    nested = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "dflash_config": {"projector_type": "dspark", "mask_token_id": 3, "target_layer_ids": [1]},
    }
    with pytest.raises(Skip, match=r"^config.json: dflash_config.mask_token_id must be an integer, got true"):
        classify_draft(parse_config_text(_with(nested, "dflash_config.mask_token_id", "true")))


def test_an_overlong_integer_anywhere_in_config_json_is_a_skip_naming_its_field():
    """Python's json raises ValueError past 4300 digits; no loader can read such a config."""
    data = _with({**DFLASH, "extra": {"list": [0, 1]}}, "extra.list", "[0, " + "7" * 5000 + "]")
    with pytest.raises(Skip, match=r"^config.json: extra.list\[1\] is an integer of 5000 digits"):
        parse_config_text(data)
    # Below the limit it parses, and only a field the bot reads is judged.
    assert parse_config_text(_with(DFLASH, "note", "9" * 4000))["note"] > 0
    assert classify_draft(parse_config_text(_with(DFLASH, "rope_theta", "Infinity"))).kind == "dflash"


def test_valid_and_absent_numbers_still_classify():
    spec = classify_draft(json.loads(json.dumps(DFLASH)))
    assert (spec.hidden_size, spec.mask_token_id, spec.target_layer_ids, spec.num_layers) == (64, 5, (1, 2), 1)
    bare = {key: value for key, value in DFLASH.items() if key not in ("hidden_size", "num_hidden_layers")}
    assert classify_draft(bare).hidden_size is None
    assert classify_draft(_json_null(DFLASH, "hidden_size")).hidden_size is None
    target = read_target(TARGET)
    assert (target.hidden_size, target.num_hidden_layers, target.vocab_size) == (64, 4, 512)
    vlm_top_vocab = {
        "model_type": "qwen3_5",
        "vocab_size": 512,
        "text_config": {k: v for k, v in TARGET.items() if k != "vocab_size"},
    }
    assert read_target(vlm_top_vocab).vocab_size == 512
    with pytest.raises(Skip, match="target config lacks hidden_size"):
        read_target({"model_type": "qwen3", "hidden_size": 64})


def _json_null(config: dict, key: str) -> dict:
    return {**json.loads(json.dumps(config)), key: None}


def _safetensors(path, header: dict | bytes, data_bytes: int) -> None:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data_bytes)


def _one_tensor(offsets: str, shape: str = "[2, 2]", dtype: str = "F32") -> bytes:
    return f'{{"w": {{"dtype": "{dtype}", "shape": {shape}, "data_offsets": {offsets}}}}}'.encode()


@pytest.mark.parametrize(
    "offsets,shape,message",
    [
        ("[0, 1e400]", "[2, 2]", "data_offsets[1] must be an integer, got Infinity"),
        ("[0, Infinity]", "[2, 2]", "data_offsets[1] must be an integer, got Infinity"),
        ("[NaN, 16]", "[2, 2]", "data_offsets[0] must be an integer, got NaN"),
        ("[false, 16]", "[2, 2]", "data_offsets[0] must be an integer, got false"),
        ("[-16, 0]", "[2, 2]", "data_offsets[0] is -16, outside [0, "),
        ("[16, 0]", "[2, 2]", "data_offsets[1] is 0, outside [16, "),
        ("[0, " + "9" * 5000 + "]", "[2, 2]", "header: w.data_offsets[1] is an integer of 5000 digits"),
        ("[0, " + "9" * 40 + "]", "[2, 2]", "data_offsets[1] is an integer of 40 digits, outside"),
        ("[0, 16]", "[2, -2]", "shape[1] is -2, outside [0, "),
        ("[0, 16]", "[2, 2.5]", "shape[1] must be an integer, got 2.5"),
        ("[0, 16]", "[2, 3]", "has shape [2, 3] of F32 (24 bytes) but data_offsets [0, 16] (16 bytes)"),
        ("[0]", "[2, 2]", "has no valid data_offsets (two integers)"),
        ("[0, 16]", "null", "has no valid shape"),
    ],
)
def test_hostile_numbers_in_a_safetensors_header_are_a_named_skip(tmp_path, offsets, shape, message):
    path = tmp_path / "model.safetensors"
    _safetensors(path, _one_tensor(offsets, shape), 16)
    with pytest.raises(Skip) as caught:
        safetensors_size(path, subject="org/draft")
    assert caught.value.message.startswith("model.safetensors") and message in caught.value.message
    assert caught.value.subject == "org/draft" and caught.value.stage == "classify"


def test_a_valid_safetensors_header_passes_and_unknown_dtypes_are_not_sized(tmp_path):
    path = tmp_path / "model.safetensors"
    _safetensors(path, _one_tensor("[0, 16]"), 16)
    assert safetensors_size(path) == path.stat().st_size
    _safetensors(path, _one_tensor("[0, 3]", dtype="F4_PACKED"), 16)  # a dtype we do not know: offsets only
    assert safetensors_size(path) == path.stat().st_size
    _safetensors(
        path, {"__metadata__": {"format": "pt"}, "w": {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}}, 2
    )
    assert safetensors_size(path) == path.stat().st_size


def test_real_safetensors_files_pass(tiny):
    pair = tiny("dflash")
    for path in (pair.draft / "model.safetensors", pair.target / "model.safetensors"):
        assert safetensors_size(path) == path.stat().st_size
