"""The environment is read once, into Settings; tests say exactly what it holds, and nothing else in bot/ reads it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from bot.cli.ending import run_command_line
from bot.core import profiles
from bot.core.settings import DEFAULT_ENDPOINT, SANDBOX_LAYERS, Settings

BOT = Path(__file__).resolve().parents[2] / "bot"


def test_an_empty_environment_is_huggingface_co_without_tokens_and_every_sandbox_layer():
    settings = Settings.from_env({})
    assert settings.endpoint == DEFAULT_ENDPOINT and settings.write_token is None and settings.reader_token is None
    assert not settings.on_actions and settings.runner_name == "local"
    assert settings.profiles_dir == Path.home() / ".cache" / "dflash-bot" / "profiles" == Settings().profiles_dir
    assert settings.sandbox_layers == SANDBOX_LAYERS == Settings().sandbox_layers == ("namespaces", "landlock")


def test_every_variable_lands_in_its_field_and_the_option_wins_over_the_variable():
    env = {
        "HF_ENDPOINT": "http://hub.local/",
        "HF_TOKEN": "w",
        "HF_READ_TOKEN": "r",
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": "/o",
        "GITHUB_STEP_SUMMARY": "/s",
        "RUNNER_NAME": "runner-1",
        "DFLASH_BOT_PROFILES_DIR": "/p",
        "DFLASH_BOT_SANDBOX": "landlock",
    }
    settings = Settings.from_env(env)
    assert (settings.endpoint, settings.write_token, settings.read_token) == ("http://hub.local", "w", "r")
    assert settings.on_actions and (settings.github_output, settings.step_summary) == ("/o", "/s")
    assert settings.runner_name == "runner-1" and settings.profiles_dir == Path("/p")
    assert settings.sandbox_layers == ("landlock",)
    assert settings.reader_token == "r" and settings.token_values() == ["w", "r"]
    assert Settings.from_env(env, endpoint="http://other").endpoint == "http://other"


def test_the_profiles_folder_follows_the_cache_variables_in_order():
    assert Settings.from_env({"HOME": "/h"}).profiles_dir == Path("/h/.cache/dflash-bot/profiles")
    cache = {"HOME": "/h", "XDG_CACHE_HOME": "/c"}
    assert Settings.from_env(cache).profiles_dir == Path("/c/dflash-bot/profiles")
    assert Settings.from_env({**cache, "DFLASH_BOT_PROFILES_DIR": "/p"}).profiles_dir == Path("/p")


@pytest.mark.parametrize(
    ("value", "layers"),
    [
        ("auto", SANDBOX_LAYERS),
        ("", SANDBOX_LAYERS),
        (" None ", ()),
        ("namespaces", ("namespaces",)),
        ("Landlock, ", ("landlock",)),
        ("landlock,namespaces", ("landlock", "namespaces")),
    ],
)
def test_the_sandbox_variable_names_the_layers(value, layers):
    assert Settings.from_env({"DFLASH_BOT_SANDBOX": value}).sandbox_layers == layers


def test_a_misspelt_sandbox_layer_is_refused_and_the_cli_says_so_before_running(monkeypatch, own_logger, capsys):
    with pytest.raises(ValueError, match="unknown layer 'bwrap'"):
        Settings.from_env({"DFLASH_BOT_SANDBOX": "landlock,bwrap"})
    monkeypatch.setenv("DFLASH_BOT_SANDBOX", "bwrap")
    assert run_command_line(["status", "someone/status"]) == 2
    assert "DFLASH_BOT_SANDBOX='bwrap': unknown layer 'bwrap'" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["auto", "none", "landlock", "namespaces"])
def test_a_builder_reads_back_the_settings_its_parent_hands_on(value, tmp_path):
    parent = Settings.from_env({"DFLASH_BOT_SANDBOX": value, "DFLASH_BOT_PROFILES_DIR": str(tmp_path)})
    builder = Settings.from_env(parent.builder_variables())
    assert (builder.sandbox_layers, builder.profiles_dir) == (parent.sandbox_layers, tmp_path)


def test_the_sandbox_setting_reaches_the_child_on_its_command_line():
    from bot.sandbox import child
    from bot.sandbox.isolation import sandboxed

    without = sandboxed("exec", layers=Settings.from_env({"DFLASH_BOT_SANDBOX": "namespaces"}).sandbox_layers)
    assert without[without.index("bot.sandbox.child") + 1 :] == ["--no-landlock", "exec"]
    assert "--no-landlock" not in sandboxed("exec", layers=Settings.from_env({}).sandbox_layers)
    assert child.parse_args(["--no-landlock", "exec", "true"]).no_landlock
    assert not child.parse_args(["exec", "true"]).no_landlock


def test_the_reader_falls_back_to_the_write_token_and_a_build_drops_it():
    settings = Settings.from_env({"HF_TOKEN": "w"})
    assert settings.reader_token == "w"
    build = settings.without_write_token()
    assert build.write_token is None and build.reader_token is None


def test_planning_reads_a_profile_environment_from_the_profiles_folder_it_is_given(tmp_path):
    """`profiles_dir` is used, not just parsed: the capabilities recorded in a profile's environment there are the
    ones planning compares with; without a folder, this environment's stand in."""
    gemma4 = profiles.load_profiles().get("gemma4")
    marker = profiles.environment_python(gemma4, tmp_path).parent.parent / ".dflash-bot-profile.json"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"profile": "gemma4", "capabilities": ["recorded-here"]}))
    root = Settings.from_env({"DFLASH_BOT_PROFILES_DIR": str(tmp_path)}).profiles_dir
    assert profiles.planned_toolchain("gemma4", root=root).capabilities == {"recorded-here"}
    assert profiles.planned_toolchain("gemma4", root=None).capabilities != {"recorded-here"}


# ---- nothing else reads the environment ----

# Every place in bot/ besides settings.py that touches os.environ, and why. A named read (`os.environ[...]`, `.get`,
# `in`, `os.getenv`) is configuration and belongs in Settings; what may stay elsewhere is taking a variable out
# (tokens), setting one (switches), or handing the whole environment on (to Settings, or into a child's
# environment).
ALLOWED = {
    ("cli/context.py", "setup", "whole"): "the one read: Settings.from_env(os.environ)",
    ("run/commands.py", "drop_write_token", "change"): "a build drops HF_TOKEN from its own environment",
    ("sandbox/confinement.py", "hold_write_token", "change"): "takes the write token out of the environment",
    ("sandbox/telemetry.py", "switch_off", "change"): "sets the telemetry switches for this process and its children",
    ("run/actions.py", "Actions._files", "change"): "points github-action-utils at the command files (Settings')",
    ("run/actions.py", "Actions._files", "read"): "saves what it is about to set, to restore it afterwards",
    ("sandbox/child.py", "main", "whole"): "the sandbox child creates the HOME, TMPDIR and HF_HOME it was given",
    ("sandbox/child.py", "visible_credentials", "whole"): "the child looks for credential-like names to refuse",
    ("sandbox/confinement.py", "scrubbed_env", "whole"): "the one scrubber: a child's environment, secrets removed",
    ("core/profiles.py", "json_from", "whole"): "the environment of a probe run in a profile's python",
    ("run/upstream_index.py", "PipIndex._pip", "whole"): "pip's environment, output-changing PIP_* variables removed",
}
_CHANGES = {"pop", "update", "setdefault", "clear", "popitem"}
_READS = {"get", "__getitem__", "__contains__", "keys", "values"}


def environment_uses(path: Path) -> list[tuple[str, str, int]]:
    """(enclosing function, kind, line) of each use of `os.environ`/`os.getenv` in one module; kind is `read` (a
    named variable), `change` (set or removed) or `whole` (the mapping handed on)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    imported = {
        alias.asname or alias.name: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "os"
        for alias in node.names
    }

    def where(node: ast.AST) -> str:
        names = []
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
        return ".".join(reversed(names)) or "<module>"

    found = []
    for node in ast.walk(tree):
        is_os = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
        name = node.attr if is_os and isinstance(node, ast.Attribute) else None
        name = imported.get(node.id) if isinstance(node, ast.Name) else name
        if name in ("getenv", "getenvb"):
            found.append((where(node), "read", getattr(node, "lineno", 0)))
        elif name in ("environ", "environb"):
            parent = parents.get(node)
            if isinstance(parent, ast.Subscript):
                kind = "read" if isinstance(parent.ctx, ast.Load) else "change"
            elif isinstance(parent, ast.Attribute):
                kind = "change" if parent.attr in _CHANGES else "read" if parent.attr in _READS else "whole"
            elif isinstance(parent, ast.Compare):
                kind = "read"
            else:
                kind = "whole"
            found.append((where(node), kind, getattr(node, "lineno", 0)))
    return found


def test_the_scan_tells_reads_from_changes_and_hand_ons(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nfrom os import environ as env, getenv\n"
        "def f():\n    os.environ.get('A'); os.environ['B']; 'C' in os.environ; getenv('D'); env['E']\n"
        "def g():\n    os.environ['A'] = '1'; os.environ.pop('B', None); del os.environ['C']\n"
        "class K:\n    def h(self):\n        return dict(os.environ), env.items()\n"
    )
    kinds = sorted((where, kind) for where, kind, _ in environment_uses(module))
    assert kinds == [*[("K.h", "whole")] * 2, *[("f", "read")] * 5, *[("g", "change")] * 3]


def test_nothing_in_bot_but_settings_reads_the_environment():
    unexpected = [
        f"bot/{relative}:{line} {where} ({kind})"
        for path in sorted(BOT.rglob("*.py"))
        if (relative := path.relative_to(BOT).as_posix()) != "core/settings.py"
        for where, kind, line in environment_uses(path)
        if (relative, where, kind) not in ALLOWED
    ]
    assert not unexpected, "read it in bot/core/settings.py (Settings) and pass it down: " + ", ".join(unexpected)
