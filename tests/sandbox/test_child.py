"""`bot.sandbox.child`, run as `python -m bot.sandbox.child`: it accepts only `optimum-cli`, `exec` and
`bot.builder.<module>` tools, refuses to start with a secret-looking variable or a stored Hub token in reach, reports
a missing tool module or one without `main`, and with folders given confines what it runs to them (Landlock)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bot.sandbox.child import REFUSED, parse_args
from bot.sandbox.isolation import untrusted_env
from bot.sandbox.landlock import abi_version


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = untrusted_env(home=home)
    env.pop("HF_TOKEN_PATH", None)
    return {**env, **extra}


def _child(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot.sandbox.child", *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("tool", ["os", "bot.builder.x.y", "bot.builder.Validate"])
def test_refuses_a_tool_outside_the_build_modules(tmp_path: Path, tool: str) -> None:
    result = _child([tool, "--help"], _env(tmp_path / "h"))
    assert result.returncode == 2
    assert f"{tool!r} is neither optimum-cli nor exec nor a bot.builder tool module" in result.stderr
    assert "no Hub token" not in result.stdout  # refused before anything else ran


def test_parse_args_accepts_the_tools_and_collects_folders() -> None:
    options = parse_args(["--no-landlock", "--read", "/a", "--write", "/w", "bot.builder.validate", "--out", "x"])
    assert options.no_landlock is True
    assert options.read == [Path("/a")] and options.write == [Path("/w")]
    assert options.tool == "bot.builder.validate" and options.args == ["--out", "x"]
    assert parse_args(["exec", "true"]).tool == "exec"
    assert parse_args(["optimum-cli"]).tool == "optimum-cli"


@pytest.mark.parametrize("name", ["MY_SECRET", "SOME_API_KEY"])
def test_refuses_to_run_with_a_secret_looking_variable(tmp_path: Path, name: str) -> None:
    result = _child(["exec", "true"], _env(tmp_path / "h", **{name: "value"}))
    assert result.returncode == REFUSED == 70
    assert f"refusing to load checkpoints with credentials in reach: {name}" in result.stderr


def test_refuses_to_run_with_a_stored_hub_token(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "token").write_text("hf_stored_token_value")
    result = _child(["exec", "true"], _env(home))
    assert result.returncode == REFUSED
    assert "huggingface_hub.get_token()" in result.stderr


def test_runs_a_command_without_folders(tmp_path: Path) -> None:
    result = _child(["exec", "sh", "-c", "echo ran"], _env(tmp_path / "h"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "sandbox: no Hub token in this process",
        "sandbox: no folders given: files are not confined by the OS in this process",
        "sandbox: signals confined by seccomp: no signal or trace to a process but its own",  # no PID namespace
        "ran",
    ]


def test_exec_needs_a_command(tmp_path: Path) -> None:
    result = _child(["exec"], _env(tmp_path / "h"))
    assert result.returncode == 2 and "exec needs a command" in result.stderr


def test_missing_tool_module_and_module_without_main(tmp_path: Path) -> None:
    missing = _child(["bot.builder.no_such_tool"], _env(tmp_path / "h"))
    assert missing.returncode == 2 and "sandbox: no tool module bot.builder.no_such_tool" in missing.stderr
    no_main = _child(["bot.builder.per_row_rules"], _env(tmp_path / "h"))
    assert no_main.returncode == 2 and "bot.builder.per_row_rules has no main(argv): not a tool" in no_main.stderr


def test_no_landlock_is_said_and_home_is_prepared(tmp_path: Path) -> None:
    home, work = tmp_path / "h", tmp_path / "work"
    result = _child(["--no-landlock", "--write", str(work), "exec", "true"], _env(home))
    assert result.returncode == 0, result.stderr
    assert "Landlock switched off by DFLASH_BOT_SANDBOX" in result.stdout
    assert work.is_dir()
    assert (home / "tmp").is_dir()
    assert (home / "home" / "intel" / "openvino_telemetry").read_text() == "0"  # telemetry declined


@pytest.mark.skipif(abi_version() < 1, reason="Landlock is not enabled in this kernel")
def test_folders_confine_what_it_runs(tmp_path: Path) -> None:
    inputs, work, outside = tmp_path / "in", tmp_path / "work", tmp_path / "outside"
    inputs.mkdir()
    outside.mkdir()
    (inputs / "a.txt").write_text("input")
    (outside / "secret.txt").write_text("secret")
    script = f"cat {inputs}/a.txt > {work}/copy.txt && cat {outside}/secret.txt"
    args = ["--read", str(inputs), "--write", str(work), "exec", "/bin/sh", "-c", script]
    result = _child(args, _env(work / "hf-home"))
    assert f"sandbox: Landlock ABI {abi_version()}: reads confined to 1 input and 1 work folder(s)" in result.stdout
    assert (work / "copy.txt").read_text() == "input"
    assert result.returncode != 0
    assert "secret" not in result.stdout
    assert "Permission denied" in result.stderr
