"""bot.builder.check_ir's parsers and `dflash-bot inspect` (bot.builder.inspect_ir) on damaged IR folders.

Every folder is a real IR: the tiny per-row draft (tinymodels.per_row, converted with openvino.convert_model), or a
copy of it with one thing damaged the way a disk, a copy or a hand edit damages an IR (a missing or truncated
`.bin`, a cut or garbage `.xml`, rt_info values of the wrong type, a `config.json` of the wrong types). Stripped of
its DFlash rt_info the same IR reads as a target, which gives the target's rules a real IR too.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest

from bot.builder.check_ir import inspect_draft
from bot.builder.inspect_ir import inspect_folder
from bot.builder.ir_read import hidden_state_layers, read_dflash_rt_info
from bot.builder.per_row_rules import DraftLayout
from bot.cli.ending import run_command_line
from bot.core.errors import Failure
from bot.discover.checkpoints import DraftSpec
from tinymodels.per_row import PerRowSpec

SPEC = PerRowSpec()
XML, BIN = "openvino_model.xml", "openvino_model.bin"
HIDDEN = '<hidden_states_decoder_layers value="{&quot;layers&quot;: [1, 2]}" />'


def _strip_dflash(xml: str) -> str:
    return re.sub(r"<dflash>.*?</dflash>", "", xml, flags=re.S).replace('<dflash_mode value="True" />', "")


def _rt(xml: str, old: str, new: str) -> str:
    assert old in xml, old
    return xml.replace(old, new)


# name -> (how the folder is damaged, the rule that must fail, words its detail must hold)
DAMAGES = {
    "missing-bin": ("drop-bin", "ir_files", "openvino_model.bin is missing"),
    "truncated-bin": ("cut-bin", "ir_files", "Incorrect weights in bin file"),
    "empty-bin": ("empty-bin", "ir_files", "Incorrect weights in bin file"),
    "truncated-xml": ("cut-xml", "ir_files", "OpenVINO cannot read openvino_model.xml"),
    "garbage-xml": ("garbage-xml", "ir_files", "Unable to read the model"),
    "missing-xml": ("drop-xml", "ir_files", "holds no openvino_model.xml or openvino_language_model.xml"),
    "no-ir-at-all": ("empty", "ir_files", "holds no openvino_model.xml"),
    "bin-is-a-folder": ("bin-folder", "ir_files", "openvino_model.bin is missing"),
    "dflash-not-a-group": (
        lambda x: re.sub(r"<dflash>.*?</dflash>", '<dflash value="oops" />', x, flags=re.S),
        "rt_info",
        "dflash is 'oops', not a group of values",
    ),
    "dflash-mode-a-group": (
        lambda x: _rt(x, '<dflash_mode value="True" />', '<dflash_mode><on value="True" /></dflash_mode>'),
        "rt_info",
        "dflash_mode is not True",
    ),
    "mask-token-a-group": (
        lambda x: _rt(x, '<mask_token_id value="3" />', '<mask_token_id><a value="3" /></mask_token_id>'),
        "rt_info",
        "dflash/mask_token_id is {'a': '3'}, not a token id",
    ),
    "layer-ids-not-numbers": (
        lambda x: _rt(x, '<target_layer_ids value="1,2" />', '<target_layer_ids value="one,two" />'),
        "rt_info",
        "dflash/target_layer_ids is 'one,two', not comma-separated layer numbers",
    ),
    "offset-a-group": (
        lambda x: _rt(
            x,
            '<candidate_position_offset value="1" />',
            '<candidate_position_offset><a value="1" /></candidate_position_offset>',
        ),
        "rt_info",
        "dflash/candidate_position_offset is {'a': '1'}, not 0 or 1",
    ),
    "config-of-wrong-types": ("bad-config", "config", "malformed num_hidden_layers, layer_types or sliding_window"),
    "target-hidden-states-not-json": (
        lambda x: _rt(_strip_dflash(x), "<rt_info>", '<rt_info><hidden_states_decoder_layers value="{not json" />'),
        "hidden_states_decoder_layers",
        "hidden_states_decoder_layers rt_info is malformed: '{not json'",
    ),
    "target-hidden-states-a-group": (
        lambda x: _rt(
            _strip_dflash(x),
            "<rt_info>",
            '<rt_info><hidden_states_decoder_layers><layers value="1" /></hidden_states_decoder_layers>',
        ),
        "hidden_states_decoder_layers",
        "malformed: {'layers': '1'}",
    ),
}


pytestmark = pytest.mark.usefixtures("own_logger")  # the commands set up the bot's logger (tests/conftest.py)


@pytest.fixture(scope="module")
def per_row_ir(tmp_path_factory) -> Path:
    from tinymodels.per_row import write_per_row_ir

    folder = tmp_path_factory.mktemp("per-row-ok")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's tracer warnings about constants in the mask
        write_per_row_ir(folder, spec=SPEC)
    return folder


def damaged(ok: Path, how, out: Path) -> Path:
    """A copy of the IR folder `ok` at `out`, damaged as `how` says (a DAMAGES kind or an .xml rewrite)."""
    shutil.copytree(ok, out)
    xml, weights = out / XML, out / BIN
    if callable(how):
        xml.write_text(how(xml.read_text()))
    elif how == "drop-bin":
        weights.unlink()
    elif how == "cut-bin":
        weights.write_bytes(weights.read_bytes()[:1000])
    elif how == "empty-bin":
        weights.write_bytes(b"")
    elif how == "cut-xml":
        xml.write_text(xml.read_text()[: len(xml.read_text()) // 2])
    elif how == "garbage-xml":
        xml.write_bytes(b"\x00\x01 not an IR")
    elif how == "drop-xml":
        xml.unlink()
    elif how == "empty":
        for child in out.iterdir():
            child.unlink()
    elif how == "bin-folder":
        weights.unlink()
        weights.mkdir()
    elif how == "bad-config":
        config = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps(config | {"num_hidden_layers": "three", "layer_types": 7}))
    return out


@pytest.mark.parametrize("name", sorted(DAMAGES))
def test_inspect_reports_a_damaged_ir_as_failed_checks_with_reasons(per_row_ir, tmp_path, capsys, name):
    how, rule, words = DAMAGES[name]
    folder = damaged(per_row_ir, how, tmp_path / name)
    record = inspect_folder(folder)
    failed = {r["rule"]: r["detail"] for r in record["rules"] if r["passed"] is False}
    assert record["passed"] is False and rule in failed and words in failed[rule], failed
    # The command prints that record and exits 1, with no traceback.
    capsys.readouterr()
    assert run_command_line(["inspect", str(folder)]) == 1
    out = capsys.readouterr()
    assert json.loads(out.out)["rules"] == record["rules"] and "Traceback" not in out.err


def test_inspect_passes_the_healthy_ir_and_its_target_reading(per_row_ir, tmp_path, capsys):
    assert inspect_folder(per_row_ir)["passed"] is True
    assert run_command_line(["inspect", str(per_row_ir)]) == 0
    capsys.readouterr()
    target = damaged(per_row_ir, lambda x: _rt(_strip_dflash(x), "<rt_info>", "<rt_info>" + HIDDEN), tmp_path / "t")
    record = inspect_folder(target)
    assert (record["role"], record["passed"]) == ("target", True), record["rules"]
    assert [r["rule"] for r in record["rules"]] == ["paged_attention", "hidden_states_decoder_layers"]


def test_the_builds_draft_check_fails_rt_info_of_the_wrong_type_instead_of_crashing(per_row_ir, tmp_path):
    spec = DraftSpec(
        kind="dflash",
        architecture="DFlashDraftModel",
        model_type="qwen3",
        hidden_size=SPEC.hidden_size,
        mask_token_id=SPEC.mask_token_id,
        target_layer_ids=SPEC.target_layer_ids,
        num_layers=len(SPEC.layer_types),
    )
    assert inspect_draft(per_row_ir, spec).mask_token_id == SPEC.mask_token_id
    how, _, _ = DAMAGES["mask-token-a-group"]
    with pytest.raises(Failure, match=r"mask_token_id or dflash/target_layer_ids is missing or malformed: .*token id"):
        inspect_draft(damaged(per_row_ir, how, tmp_path / "mask"), spec)
    how, _, _ = DAMAGES["config-of-wrong-types"]
    with pytest.raises(Failure, match=r"config\.json beside the draft IR has a malformed"):
        DraftLayout.read(damaged(per_row_ir, how, tmp_path / "config"))


def test_rt_info_parsers_name_each_problem():
    good = {
        "dflash_mode": "True",
        "dflash": {"mask_token_id": "3", "target_layer_ids": "1,2", "candidate_position_offset": "0"},
    }
    parsed = read_dflash_rt_info(good, per_row=True)
    assert (
        parsed.mode,
        parsed.mask_token_id,
        parsed.target_layer_ids,
        parsed.candidate_position_offset,
        parsed.problems,
    ) == (True, 3, (1, 2), 0, ())
    bad = read_dflash_rt_info(
        {"dflash_mode": "False", "dflash": {"mask_token_id": "-1", "target_layer_ids": ""}}, per_row=True
    )
    assert bad.problems == (
        "dflash_mode is not True ('False')",
        "dflash/mask_token_id is '-1', not a token id",
        "dflash/target_layer_ids is '', not comma-separated layer numbers",
        "missing dflash/candidate_position_offset",
    )
    assert read_dflash_rt_info({"dflash_mode": "true", "dflash": good["dflash"]}, per_row=False).problems == ()
    assert hidden_state_layers({"hidden_states_decoder_layers": '{"layers": [2, "1"]}'}) == (1, 2)
    for annotation in ('{"layers": 3}', "[1, 2]", '{"layers": [null]}'):
        with pytest.raises(Failure, match="malformed"):
            hidden_state_layers({"hidden_states_decoder_layers": annotation})
    with pytest.raises(Failure, match="no hidden_states_decoder_layers rt_info"):
        hidden_state_layers({})


def test_the_build_inspects_an_ir_in_a_sandboxed_child_and_gets_the_same_report(per_row_ir, tmp_path):
    """Issue 20: an IR an export child wrote is parsed by OpenVINO in a child of its own (no token, its own
    folder), not in the builder; the report comes back as JSON and equals the in-process one."""
    from bot.builder.inspect_child import inspect_draft_in_child

    spec = DraftSpec(
        kind="dflash",
        architecture="DFlashDraftModel",
        model_type="qwen3",
        hidden_size=SPEC.hidden_size,
        mask_token_id=SPEC.mask_token_id,
        target_layer_ids=SPEC.target_layer_ids,
        num_layers=len(SPEC.layer_types),
    )
    work = tmp_path / "inspect"
    report = inspect_draft_in_child(per_row_ir, spec, work=work, timeout_s=300, memory_budget_bytes=8 << 30)
    assert report == inspect_draft(per_row_ir, spec)
    log = (work / "inspect.log").read_text()
    assert "sandbox: no Hub token in this process" in log
    how, _, _ = DAMAGES["mask-token-a-group"]
    with pytest.raises(Failure, match=r"mask_token_id or dflash/target_layer_ids is missing or malformed") as caught:
        inspect_draft_in_child(
            damaged(per_row_ir, how, tmp_path / "mask"),
            spec,
            work=tmp_path / "inspect-2",
            timeout_s=300,
            memory_budget_bytes=8 << 30,
        )
    assert caught.value.stage == "inspect"
