"""The preflight against the local Hub's real `whoami-v2` answers: a token that cannot publish where the recipe says
stops before any download with one line naming the namespace, the token's user and the fix (issue 30).

The Hub's answers and permission model are the local Hub's (`hubserver.auth`): user, fullname, orgs with roles,
the token's role and a fine-grained token's scopes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from bot.cli.ending import run_command_line
from bot.core.errors import HubError, UsageError
from bot.core.recipe import DEFAULT_RECIPE, load_recipe
from bot.hub.client import Hub
from bot.run.preflight import check_only, check_writer, problems
from hubserver.auth import Scope

ALICE = "hf_alice_writes_my_org"  # a write token of alice, a member (write role) of my-org
READER_OF_ORG = "hf_bob_reads_my_org"  # bob holds the read role in my-org
FINE = "hf_carol_fine_grained"  # carol's fine-grained token: repo.write on my-org, no collection.write
SHIPPED = load_recipe(None)


@pytest.fixture(scope="module")
def hub(hub):
    hub.add_token(ALICE, "alice", write=True, orgs=["my-org"], fullname="Alice Maintainer")
    hub.add_token(READER_OF_ORG, "bob", write=True, orgs=["my-org"], org_roles={"my-org": "read"})
    scopes = (Scope("my-org", ("repo.content.read", "repo.write")),)
    hub.add_token(FINE, "carol", role="fineGrained", orgs=["my-org"], scopes=scopes)
    return hub


def recipe_for(tmp_path: Path, **publish) -> Path:
    raw = yaml.safe_load(DEFAULT_RECIPE.read_text())
    raw["publish"].update(publish)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_whoami_answers_like_the_hub(hub):
    alice = HfApi(endpoint=hub.url, token=ALICE).whoami()
    assert alice["name"] == "alice" and alice["fullname"] == "Alice Maintainer" and alice["type"] == "user"
    assert alice["orgs"] == [{"type": "org", "name": "my-org", "fullname": "my-org", "roleInOrg": "write"}]
    assert alice["auth"]["accessToken"]["role"] == "write"
    bob = HfApi(endpoint=hub.url, token=READER_OF_ORG).whoami()
    assert bob["orgs"][0]["roleInOrg"] == "read"
    carol = HfApi(endpoint=hub.url, token=FINE).whoami()["auth"]["accessToken"]
    assert carol["role"] == "fineGrained"
    assert carol["fineGrained"]["scoped"] == [
        {"entity": {"type": "org", "name": "my-org"}, "permissions": ["repo.content.read", "repo.write"]}
    ]


def test_the_local_hub_enforces_org_roles_and_fine_grained_scopes(hub):
    HfApi(endpoint=hub.url, token=FINE).create_repo("my-org/fine-grained-ok")  # repo.write on my-org
    with pytest.raises(HfHubHTTPError, match=r"no collection\.write permission"):
        HfApi(endpoint=hub.url, token=FINE).create_collection("c", namespace="my-org")
    with pytest.raises(HfHubHTTPError, match="rights to create a model repo"):
        HfApi(endpoint=hub.url, token=READER_OF_ORG).create_repo("my-org/read-role")
    with pytest.raises(HfHubHTTPError, match=r"no repo\.write permission on 'carol'"):
        HfApi(endpoint=hub.url, token=FINE).create_repo("carol/own-namespace-unscoped")


def test_a_token_for_another_namespace_is_refused_naming_it_and_the_fix(hub):
    with pytest.raises(UsageError) as refused:
        check_writer(Hub(hub.url, ALICE), SHIPPED)
    message = refused.value.one_line()
    assert "'OpenVINO-drafts'" in message and "'alice'" in message and "HF_TOKEN" in message
    assert "set publish.namespace to one it may write (alice, my-org)" in message
    assert refused.value.exit_code == UsageError.exit_code


def test_the_same_token_passes_once_the_namespace_is_its_own(hub, tmp_path):
    assert check_writer(Hub(hub.url, ALICE), load_recipe(recipe_for(tmp_path, namespace="my-org"))).user == "alice"


def test_read_roles_fine_grained_scopes_and_the_bot_user_are_each_named(hub, tmp_path):
    mine = load_recipe(recipe_for(tmp_path, namespace="my-org", bot_user="dflash-bot"))
    bob = problems(Hub(hub.url, READER_OF_ORG).whoami(), mine)
    assert "'bob' has the 'read' role in 'my-org'" in bob[0]
    carol = problems(Hub(hub.url, FINE).whoami(), mine)
    assert any("fine-grained token without collection.write on 'my-org'" in line for line in carol)
    alice = problems(Hub(hub.url, ALICE).whoami(), mine)
    assert alice == [
        "publish.bot_user is 'dflash-bot' but HF_TOKEN belongs to 'alice': set publish.bot_user to 'alice', or use "
        "'dflash-bot''s token (reuse trusts only the bot user's commits)"
    ]


def test_check_command_says_who_and_where(hub, tmp_path, monkeypatch, capsys, own_logger):
    monkeypatch.setenv("HF_TOKEN", ALICE)
    monkeypatch.delenv("HF_READ_TOKEN", raising=False)
    assert run_command_line(["check", "--endpoint", hub.url]) == UsageError.exit_code
    assert "OpenVINO-drafts" in capsys.readouterr().err
    assert (
        run_command_line(["check", "--endpoint", hub.url, "--recipe", str(recipe_for(tmp_path, namespace="my-org"))])
        == 0
    )
    assert "HF_TOKEN: alice (write token) may publish to my-org" in capsys.readouterr().out


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_READ_TOKEN", "GITHUB_ACTIONS")}
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], env={**clean, **env}, capture_output=True, text=True, timeout=300
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def test_run_with_a_token_for_my_org_stops_before_any_download_and_proceeds_once_changed(hub, tmp_path):
    """The issue's "done when": the shipped recipe stops at the preflight; with the namespace changed it runs."""
    hub.clear_requests()
    env = {"HF_TOKEN": ALICE, "HF_ENDPOINT": hub.url}
    stopped = _cli("run", "--work", str(tmp_path / "w"), env=env)
    assert stopped.returncode == UsageError.exit_code
    lines = [line for line in stopped.stderr.splitlines() if line.startswith("error")]
    assert len(lines) == 1 and "'OpenVINO-drafts'" in lines[0] and "'alice'" in lines[0], stopped.stderr
    assert [r["path"] for r in hub.requests()] == ["/api/whoami-v2"]  # nothing listed, nothing downloaded
    ran = _cli("run", "--recipe", str(recipe_for(tmp_path, namespace="my-org")), "--work", str(tmp_path / "w"), env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert HfApi(endpoint=hub.url, token=ALICE).repo_exists("my-org/dflash-bot-status", repo_type="dataset")


# ---- one clear line per error a maintainer meets (issue 30, item 8) ----


def test_a_rejected_token_names_its_variable_in_one_uncut_line(hub):
    with pytest.raises(HubError) as rejected:
        Hub(hub.url, "hf_revoked", token_name="HF_TOKEN").whoami()
    message = rejected.value.message
    assert "rejected the token in HF_TOKEN" in message and hub.url in message and "/api/" not in message
    assert "X-Error-Code" not in message


def test_an_unreachable_endpoint_is_named(tmp_path):
    with pytest.raises(HubError, match=r"no answer from the Hub at http://127\.0\.0\.1:9 \(check HF_ENDPOINT"):
        Hub("http://127.0.0.1:9", ALICE, max_attempts=1).whoami()


def test_an_endpoint_without_a_scheme_is_refused_at_once(monkeypatch, capsys, own_logger):
    monkeypatch.setenv("HF_ENDPOINT", "huggingface.co")
    monkeypatch.setenv("HF_TOKEN", ALICE)
    started = time.monotonic()
    assert run_command_line(["check"]) == UsageError.exit_code
    assert time.monotonic() - started < 2
    assert "HF_ENDPOINT='huggingface.co' is not an http(s) URL" in capsys.readouterr().err


def test_a_dispatch_for_a_repo_that_does_not_exist_fails(hub, monkeypatch, capsys, own_logger):
    with pytest.raises(UsageError, match="--only z-lab/No-Such-Draft: no such repo on"):
        check_only(Hub(hub.url, ALICE), "z-lab/No-Such-Draft")
    monkeypatch.setenv("HF_READ_TOKEN", ALICE)
    code = run_command_line(["plan", "--only", "z-lab/No-Such-Draft", "--endpoint", hub.url, "--matrix"])
    assert code == UsageError.exit_code and "check the repo id" in capsys.readouterr().err


def test_try_on_a_target_repo_says_to_pass_its_draft_repo(hub, monkeypatch, capsys, own_logger):
    from bot.core.record import PROVENANCE_FILE, DraftSummary, TargetRecord, to_json
    from tests.records import REPOS, build_record

    built = build_record()
    summary = DraftSummary(
        repo=REPOS.draft,
        source="z-lab/Qwen3-Tiny-DFlash-b16",
        source_revision="a" * 40,
        lossless=True,
        accept_length=2.0,
        recommended_num_assistant_tokens=3,
        speedup=1.4,
    )
    target = TargetRecord.from_build(built, [summary], "0" * 16)
    api = HfApi(endpoint=hub.url, token=ALICE)
    api.create_repo("my-org/Qwen3-Tiny-int4-ov", exist_ok=True)
    api.upload_file(
        path_or_fileobj=to_json(target).encode(), path_in_repo=PROVENANCE_FILE, repo_id="my-org/Qwen3-Tiny-int4-ov"
    )
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_READ_TOKEN", raising=False)
    code = run_command_line(["try", "my-org/Qwen3-Tiny-int4-ov", "--endpoint", hub.url])
    err = capsys.readouterr().err
    assert code == UsageError.exit_code
    assert f"this is a target repo; pass its draft repo (validated with it: {REPOS.draft})" in err
