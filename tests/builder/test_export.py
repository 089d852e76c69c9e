"""`bot.builder.export`: the optimum-cli command line built for a draft and for a target (task, the recipe's
compression settings or a replacement, remote code), the sandbox around it (its folders, Landlock on or off) and the
child's environment (its own home, offline, no secrets). No export runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.builder.export import ExportRequest, export_command, optimum_cli_args
from bot.core.exporter import TASK_LLM, TASK_VLM, target_task
from bot.core.recipe import ExportSettings

SETTINGS = ExportSettings(weight_format="int4", group_size=64, ratio=0.8, group_size_fallback="ignore")


def _draft(tmp_path: Path) -> ExportRequest:
    return ExportRequest("draft", tmp_path / "src-draft", tmp_path / "ir-draft", TASK_LLM, True, name="draft-0")


def _target(tmp_path: Path) -> ExportRequest:
    return ExportRequest("target", tmp_path / "src-target", tmp_path / "ir-target", target_task(True), False)


def test_target_task_depends_on_vlm() -> None:
    assert target_task(False) == TASK_LLM == "text-generation-with-past"
    assert target_task(True) == TASK_VLM == "image-text-to-text"


def test_name_or_role() -> None:
    assert ExportRequest("draft", Path("a"), Path("b"), TASK_LLM, False, name="draft-3").name_or_role == "draft-3"
    assert ExportRequest("target", Path("a"), Path("b"), TASK_LLM, False).name_or_role == "target"


def test_target_args_carry_the_recipe_settings(tmp_path: Path) -> None:
    request = _target(tmp_path)
    assert optimum_cli_args(request, SETTINGS) == [
        *("export", "openvino", "-m", str(tmp_path / "src-target"), "--task", "image-text-to-text"),
        *("--weight-format", "int4", "--group-size", "64", "--ratio", "0.8", "--group-size-fallback", "ignore"),
        str(tmp_path / "ir-target"),
    ]


def test_sym_and_backup_precision_are_passed(tmp_path: Path) -> None:
    settings = ExportSettings(sym=True, backup_precision="int8_sym")
    args = optimum_cli_args(_target(tmp_path), settings)
    assert "--sym" in args
    assert args[args.index("--backup-precision") + 1] == "int8_sym"
    assert "--sym" not in optimum_cli_args(_target(tmp_path), ExportSettings())


def test_draft_args_trust_remote_code_and_keep_the_tokenizer_out(tmp_path: Path) -> None:
    args = optimum_cli_args(_draft(tmp_path), SETTINGS)
    assert args[args.index("--task") + 1] == TASK_LLM
    assert args[-3:] == ["--trust-remote-code", "--disable-convert-tokenizer", str(tmp_path / "ir-draft")]


def test_quantization_replaces_the_recipe_flags(tmp_path: Path) -> None:
    args = optimum_cli_args(_target(tmp_path), SETTINGS, ["--weight-format", "int8"])
    assert args[-3:] == ["--weight-format", "int8", str(tmp_path / "ir-target")]
    assert "--group-size" not in args and "--ratio" not in args


@pytest.mark.parametrize("make", [_draft, _target])
def test_export_command_confines_the_child_to_its_folders(tmp_path: Path, make) -> None:
    request, home = make(tmp_path), tmp_path / "homes" / "x"
    command, env = export_command(request, SETTINGS, home=home, layers=("landlock",))
    tail = optimum_cli_args(request, SETTINGS)
    assert command == [
        *(sys.executable, "-m", "bot.sandbox.child"),
        *("--read", str(request.source), "--write", str(request.output), "--write", str(home)),
        "optimum-cli",
        *tail,
    ]
    assert env["HF_HOME"] == str(home)
    assert env["HOME"] == str(home / "home") and env["TMPDIR"] == str(home / "tmp")
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"


def test_export_command_without_landlock_tells_the_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The mode of a runner user under Yama 1 (accepted); as root it is refused (tests/sandbox/test_signal_paths.py).
    monkeypatch.setattr("bot.sandbox.confinement.traces_outside", lambda: False)
    command, _ = export_command(_target(tmp_path), SETTINGS, home=tmp_path / "h", layers=())
    assert command[:4] == [sys.executable, "-m", "bot.sandbox.child", "--no-landlock"]
    assert "unshare" not in command


def test_export_command_quantization_and_profile_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The mode of a runner user under Yama 1 (accepted); as root it is refused (tests/sandbox/test_signal_paths.py).
    monkeypatch.setattr("bot.sandbox.confinement.traces_outside", lambda: False)
    python = "/opt/profile/bin/python"
    command, env = export_command(
        _draft(tmp_path),
        SETTINGS,
        home=tmp_path / "h",
        python=python,
        layers=(),
        quantization=["--weight-format", "int8"],
    )
    assert command[:3] == [python, "-m", "bot.sandbox.child"]
    assert command[command.index("--weight-format") + 1] == "int8"
    assert env.get("PYTHONSAFEPATH") == "1" and env.get("PYTHONPATH")


def test_export_env_has_no_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("MY_API_KEY", "k")
    monkeypatch.setenv("DFLASH_TEST_PLAIN", "kept")
    # The mode of a runner user under Yama 1 (accepted); as root it is refused (tests/sandbox/test_signal_paths.py).
    monkeypatch.setattr("bot.sandbox.confinement.traces_outside", lambda: False)
    _, env = export_command(_target(tmp_path), SETTINGS, home=tmp_path / "h", layers=())
    assert "HF_TOKEN" not in env and "MY_API_KEY" not in env
    assert env["DFLASH_TEST_PLAIN"] == "kept"
