"""Hostile suite, the command line: odd environments, damaged IRs, odd recipe values and malformed options.

Each scenario runs the real entry point (`python -m bot.cli`) or the real index through pip, and records what was
tried, what the bot did (read from the outcome) and the state of the local Hub afterwards (its request log read
back: a refusal must come before any request).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest
import yaml

from bot.core.profiles import PROFILES_FILE, load_profiles
from bot.core.recipe import DEFAULT_RECIPE
from bot.run import upstream
from tests.builder.test_check_ir import DAMAGES, damaged
from tests.conftest import HUB_TOKEN as TOKEN
from tests.reliability.rows import record


def hub_state(hub) -> str:
    """The hub's request log since the scenario started, as the row's hub state."""
    requests = hub.requests()
    hub.clear_requests()
    return "unchanged (no request reached it)" if not requests else f"{len(requests)} request(s) reached it"


def bot_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "bot.cli", *args], env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def test_toolchain_check_finds_newer_releases_whatever_pip_quiet_says(tmp_path, monkeypatch):
    """`PIP_QUIET=1` silences `pip index versions`; the check read nothing and said "no newer release"."""
    text = PROFILES_FILE.read_text()
    assert "transformers==5.5.4" in text
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(text.replace("transformers==5.5.4", "transformers==5.5.0"))  # the index has 5.5.4
    monkeypatch.setenv("PIP_QUIET", "1")
    report = upstream.check(load_profiles(profiles), build=False, root=tmp_path / "envs")
    gemma4 = next(p for p in report.proposals if p.profile == "gemma4")
    assert report.newer and gemma4.changes.get("transformers") == ("5.5.0", "5.5.4"), gemma4
    assert (report.status, report.exit_code) == ("newer release, candidate not tried", 1)
    record(
        "hostile",
        "toolchain check with PIP_QUIET=1 in the environment, a profile pinned at transformers "
        "5.5.0 while the index has 5.5.4",
        f"{report.status} (exit {report.exit_code}): gemma4 transformers {' -> '.join(gemma4.changes['transformers'])}",
        "unchanged (asks the package index only)",
    )


INSPECTED = {
    "missing-bin": "openvino_model.bin missing",
    "truncated-bin": "openvino_model.bin cut to 1000 bytes",
    "truncated-xml": "openvino_model.xml cut in half",
    "garbage-xml": "openvino_model.xml replaced by garbage",
    "missing-xml": "openvino_model.xml missing (the .bin there)",
    "mask-token-a-group": "rt_info dflash/mask_token_id a group instead of a value",
    "target-hidden-states-a-group": "a target's rt_info hidden_states_decoder_layers a group instead of JSON",
    "no-ir-at-all": "an empty folder",
}


@pytest.mark.parametrize("name", sorted(INSPECTED))
def test_inspect_on_a_damaged_ir_folder_reports_failed_checks(name, tmp_path_factory, hub):
    from tinymodels.per_row import write_per_row_ir

    ok = tmp_path_factory.getbasetemp() / "rel-cli-per-row"
    if not ok.exists():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            write_per_row_ir(ok)
    how, rule, _ = DAMAGES[name]
    folder = damaged(ok, how, tmp_path_factory.mktemp("damaged") / name)
    done = bot_cli("inspect", str(folder), env={"HF_ENDPOINT": hub.url})
    failed = [r for r in json.loads(done.stdout)["rules"] if r["passed"] is False]
    assert done.returncode == 1 and rule in [r["rule"] for r in failed], done.stdout
    detail = failed[0]["detail"].replace(str(folder), "the folder")
    record(
        "hostile",
        f"`inspect` on a real IR folder: {INSPECTED[name]}",
        f"exit {done.returncode}, failed check {failed[0]['rule']}: {detail[:110]}",
        hub_state(hub),
    )


ODD = {
    "export.timeout_s: 10**30": (("export", "timeout_s"), 10**30),
    "validation.timeout_s: 1e400": (("validation", "timeout_s"), float("inf")),
    "watch.recheck_after: 99999999999d": (("watch", "recheck_after"), "99999999999d"),
    "watch.recheck_after: -3600 (seconds)": (("watch", "recheck_after"), -3600),
    "validation.min_accept_length: NaN": (("validation", "min_accept_length"), float("nan")),
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_an_odd_recipe_value_is_refused_with_a_report(case, tmp_path, hub):
    (section, key), value = ODD[case]
    raw = yaml.safe_load(DEFAULT_RECIPE.read_text())
    raw[section][key] = value
    recipe, report = tmp_path / "recipe.yaml", tmp_path / "report.json"
    recipe.write_text(yaml.safe_dump(raw))
    done = bot_cli("run", "--recipe", str(recipe), "--report", str(report),
                   env={"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN})  # fmt: skip
    (outcome,) = json.loads(report.read_text())["outcomes"]
    assert done.returncode == 4 and f"{section}.{key}" in outcome["reason"] and outcome["status"] == "failed"
    record(
        "hostile",
        f"recipe value {case}",
        f"refused before any Hub call (exit {done.returncode}); report: {outcome['reason'].split(': ', 1)[-1][:110]}",
        hub_state(hub),
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--only", "https://huggingface.co/z-lab/Qwen3-8B-DFlash-b16"],
        ["--no-such-option"],
        ["--recipe", "/no/such/recipe.yaml"],
    ],
    ids=str,
)
def test_a_malformed_option_is_refused_with_a_report(args, tmp_path, hub):
    report = tmp_path / "report.json"
    done = bot_cli("run", *args, "--report", str(report), env={"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN})
    (outcome,) = json.loads(report.read_text())["outcomes"]
    assert done.returncode == 2 and outcome["stage"] == "usage" and outcome["status"] == "failed", outcome
    record(
        "hostile",
        f"`run {' '.join(args)} --report`",
        f"refused (exit {done.returncode}); report written: {outcome['reason'][:110]}",
        hub_state(hub),
    )
