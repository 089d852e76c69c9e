"""`bot.builder.ir_read` on a tiny OpenVINO model built here with the opset API: its rt_info read back as plain
dicts, its port names, the DFlash rt_info parsed (and every damaged value named as a problem), the hidden-state
annotation, NNCF's compression record, and SDPA→PagedAttention refusing a stateless model with its reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from bot.builder.ir_read import (
    check_layers_from_sdpa,
    hidden_state_layers,
    paged_attention_check,
    port_names,
    quantization_parameters,
    read_dflash_rt_info,
    read_rt_info,
)
from bot.core.errors import Failure, Stage


def _model() -> ov.Model:
    ids = ops.parameter([1, 4], np.float32, name="input_ids")
    hidden = ops.parameter([1, 4], np.float32, name="hidden_states")
    total = ops.add(ids, hidden)
    total.output(0).set_names({"logits"})
    model = ov.Model([total], [ids, hidden], "tiny")
    model.set_rt_info("True", "dflash_mode")
    model.set_rt_info("7", ["dflash", "mask_token_id"])
    model.set_rt_info("1,3", ["dflash", "target_layer_ids"])
    model.set_rt_info("int4_asym", ["nncf", "weight_compression", "mode"])
    model.set_rt_info("64", ["nncf", "weight_compression", "group_size"])
    model.set_rt_info("unrelated", ["nncf", "weight_compression", "not_a_card_key"])
    model.set_rt_info('{"layers": {"5": 0, "1": 0, "12": 0}}', "hidden_states_decoder_layers")
    return model


def test_rt_info_reads_back_as_nested_dicts() -> None:
    rt = read_rt_info(_model())
    assert rt["dflash_mode"] == "True"
    assert rt["dflash"] == {"mask_token_id": "7", "target_layer_ids": "1,3"}
    assert rt["nncf"]["weight_compression"]["group_size"] == "64"


def test_port_names_are_sorted() -> None:
    model = _model()
    assert port_names(model.inputs) == ("hidden_states", "input_ids")
    assert port_names(model.outputs) == ("logits",)


def test_dflash_rt_info_of_a_good_draft() -> None:
    info = read_dflash_rt_info(read_rt_info(_model()), per_row=False)
    assert info.mode is True
    assert info.mask_token_id == 7
    assert info.target_layer_ids == (1, 3)
    assert info.candidate_position_offset is None
    assert info.problems == ()


def test_per_row_needs_the_candidate_position_offset() -> None:
    rt = read_rt_info(_model())
    assert read_dflash_rt_info(rt, per_row=True).problems == ("missing dflash/candidate_position_offset",)
    rt["dflash"]["candidate_position_offset"] = "1"
    info = read_dflash_rt_info(rt, per_row=True)
    assert info.candidate_position_offset == 1 and info.problems == ()


def test_damaged_dflash_values_are_problems_not_crashes() -> None:
    rt = {
        "dflash_mode": "False",
        "dflash": {"mask_token_id": "-1", "target_layer_ids": "1,x", "candidate_position_offset": "2"},
    }
    info = read_dflash_rt_info(rt, per_row=True)
    assert (info.mode, info.mask_token_id, info.target_layer_ids, info.candidate_position_offset) == (
        False,
        None,
        None,
        None,
    )
    assert info.problems == (
        "dflash_mode is not True ('False')",
        "dflash/mask_token_id is '-1', not a token id",
        "dflash/target_layer_ids is '1,x', not comma-separated layer numbers",
        "dflash/candidate_position_offset is '2', not 0 or 1",
    )
    grouped = read_dflash_rt_info({"dflash": "text"}, per_row=False)
    assert grouped.problems == (
        "dflash_mode is not True",
        "dflash is 'text', not a group of values",
        "missing dflash/mask_token_id",
        "missing dflash/target_layer_ids",
    )


def test_hidden_state_layers_sorted_from_the_annotation() -> None:
    assert hidden_state_layers(read_rt_info(_model())) == (1, 5, 12)


@pytest.mark.parametrize(
    ("rt", "says"),
    [({}, "has no hidden_states_decoder_layers"), ({"hidden_states_decoder_layers": "[1, 2]"}, "is malformed")],
)
def test_hidden_state_layers_missing_or_malformed(rt: dict, says: str) -> None:
    with pytest.raises(Failure, match=says) as caught:
        hidden_state_layers(rt)
    assert caught.value.stage is Stage.INSPECT


def test_quantization_parameters_keep_the_card_keys() -> None:
    assert quantization_parameters(read_rt_info(_model())) == {"mode": "int4_asym", "group_size": "64"}
    assert quantization_parameters({}) == {}


def test_a_stateless_model_is_not_paged_attention_ready(tmp_path: Path) -> None:
    model = _model()
    assert check_layers_from_sdpa(model) == 0
    path = tmp_path / "openvino_model.xml"
    ov.save_model(model, path)
    check = paged_attention_check(path, expected_layers=0)
    assert check.ready is False
    assert check.reason is not None and "stateful" in check.reason
    assert (check.sdpa_before, check.paged_attention_ops, check.sdpa_left, check.state_ops_left) == (0, 0, 0, 0)
