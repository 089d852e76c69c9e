"""`bot.builder.inspect_ir.inspect_folder`: a folder with no IR, or with an `.xml` that is not an IR, is one failed
`ir_files` check saying why (never a crash); a tiny model built here is classified as target or draft by its rt_info
and every rule it breaks is reported, the record failing."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from bot.builder.inspect_ir import inspect_folder


def _save(folder: Path, rt_info: Mapping[str, object]) -> Path:
    ids = ops.parameter([1, 4], np.float32, name="input_ids")
    hidden = ops.parameter([1, 4], np.float32, name="hidden_states")
    total = ops.add(ids, hidden)
    total.output(0).set_names({"logits"})
    model = ov.Model([total], [ids, hidden], "tiny")
    for key, value in rt_info.items():
        model.set_rt_info(value, key.split("/"))
    folder.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, folder / "openvino_model.xml")
    return folder


def _rules(record: dict) -> dict[str, tuple[bool, bool]]:
    return {rule["rule"]: (rule["passed"], rule["required"]) for rule in record["rules"]}


def test_empty_folder_is_one_failed_check(tmp_path: Path) -> None:
    record = inspect_folder(tmp_path)
    assert record["role"] == "unknown" and record["format"] is None
    assert record["inputs"] == [] and record["outputs"] == [] and record["dflash_rt_info"] == {}
    assert record["passed"] is False
    [rule] = record["rules"]
    assert rule == {
        "rule": "ir_files",
        "passed": False,
        "detail": f"{tmp_path} holds no openvino_model.xml or openvino_language_model.xml",
        "required": True,
    }


def test_other_files_are_no_ir(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.xml").write_text("<net/>")
    record = inspect_folder(tmp_path)
    assert record["passed"] is False
    assert [rule["rule"] for rule in record["rules"]] == ["ir_files"]
    assert "holds no openvino_model.xml" in record["rules"][0]["detail"]


def test_an_xml_that_is_not_an_ir_says_why(tmp_path: Path) -> None:
    (tmp_path / "openvino_model.xml").write_text("<not an ir")
    record = inspect_folder(tmp_path)
    assert record["path"] == str(tmp_path / "openvino_model.xml")
    assert record["role"] == "unknown" and record["passed"] is False
    [rule] = record["rules"]
    assert rule["rule"] == "ir_files" and rule["passed"] is False
    assert rule["detail"].startswith("openvino_model.bin is missing; OpenVINO cannot read openvino_model.xml: ")
    assert "Exception from" not in rule["detail"]  # OpenVINO's source lines are left out


def test_a_model_without_dflash_rt_info_is_a_target_checked_for_paged_attention(tmp_path: Path) -> None:
    folder = _save(tmp_path / "target", {"hidden_states_decoder_layers": '{"layers": {"2": 0}}'})
    record = inspect_folder(folder)
    assert (record["role"], record["format"]) == ("target", "decoder")
    assert record["inputs"] == ["hidden_states", "input_ids"] and record["outputs"] == ["logits"]
    assert _rules(record) == {"paged_attention": (False, True), "hidden_states_decoder_layers": (True, True)}
    assert record["passed"] is False


def test_a_target_without_the_hidden_state_annotation_fails_that_rule(tmp_path: Path) -> None:
    record = inspect_folder(_save(tmp_path / "target", {}))
    hidden = next(rule for rule in record["rules"] if rule["rule"] == "hidden_states_decoder_layers")
    assert hidden["passed"] is False and "no hidden_states_decoder_layers" in hidden["detail"]


def test_a_stateless_draft_reports_every_broken_rule(tmp_path: Path) -> None:
    rt = {"dflash_mode": "True", "dflash/mask_token_id": "7", "dflash/target_layer_ids": "1,3"}
    record = inspect_folder(_save(tmp_path / "draft", rt))
    assert (record["role"], record["format"]) == ("draft", "stateful")
    assert record["dflash_rt_info"] == {
        "dflash_mode": "True",
        "dflash": {"mask_token_id": "7", "target_layer_ids": "1,3"},
    }
    assert record["paged_attention_ready"] is False
    assert _rules(record) == {
        "signature": (False, True),
        "rt_info": (True, True),
        "kv_cache_state": (False, True),
        "paged_attention": (False, False),  # a stateful draft's refusal is expected
    }
    assert record["passed"] is False
