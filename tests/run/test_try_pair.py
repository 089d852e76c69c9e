"""`dflash-bot try` against the local Hub over real HTTP: a pair the bot published, measured as a user would.

The module publishes the tiny oracle pair once with the real job (export, GenAI validation, publish), then runs the
command in a process of its own with no token, as a downloader does. A pair that is not lossless cannot come from a
draft (the target verifies every token), so the one here has a target whose scores change when a forward pass
scores several rows at once, as speculative verification does: what a device whose batched kernels round
differently does, made certain with an edit through OpenVINO's own graph API.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.core.hashes import hash_file
from bot.core.naming import draft_output_repo, target_output_repo
from bot.core.record import FileDigest, Repos, to_json
from bot.hub.client import Hub
from bot.plan.step import RunOptions
from bot.run import demo
from bot.run.pipeline import run
from bot.run.try_pair import COLUMNS
from tests.conftest import fast_recipe

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

TOKEN = "hf_try_write_token"
RECIPE = fast_recipe()
REAL_BUILDS = ("server",)  # slow (tests/conftest.py): the hub is seeded with a pair the real job built and published
# The 4-layer oracle pair (the draft always right): the quickest pair to build and to measure.
SEEDED = (
    demo.SeededRepo(demo.TARGET_REPO, "oracle", "target"),
    demo.SeededRepo(demo.DRAFT_REPO, "oracle", "draft"),
)
DRAFT_OUT = draft_output_repo(RECIPE.publish, demo.DRAFT_REPO, "int4")
TARGET_OUT = target_output_repo(RECIPE.publish, demo.TARGET_REPO)
LOSSY_DRAFT = f"{RECIPE.publish.namespace}/Qwen3-Tiny-DFlash-lossy-int4-ov"
LOSSY_TARGET = f"{RECIPE.publish.namespace}/Qwen3-Tiny-row-dependent-int4-ov"
MISMATCH_DRAFT = f"{RECIPE.publish.namespace}/Qwen3-Tiny-DFlash-mismatch-int4-ov"
OTHER_TOKEN = 290  # any token but the oracle target's constant one
MAX_NEW_TOKENS = "16"


def publish_oracle_pair(server, work: Path) -> None:
    """Seed the local Hub with the tiny oracle pair and publish it with the real job (shared with
    tests/run/test_try_install.py)."""
    demo.seed(server.url, TOKEN, work / "seed", repos=SEEDED)
    hub = Hub(server.url, TOKEN)
    report = run(RECIPE, hub, hub, RunOptions(work=work))
    outcomes = {o.source: o for o in report.outcomes}
    assert outcomes[demo.DRAFT_REPO].status == "published", outcomes


def try_command(server, *args: str, cache: Path, endpoint: str | None = None) -> subprocess.CompletedProcess:
    """`dflash-bot try` in a process of its own, with no token in its environment."""
    drop = {"HF_TOKEN", "HF_READ_TOKEN", "HUGGING_FACE_HUB_TOKEN"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"HF_ENDPOINT": endpoint or server.url, "HF_HOME": str(cache / "hf-home")})
    command = [sys.executable, "-m", "bot.cli", "try", *args, "--cache-dir", str(cache)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from hubserver import LocalHub

    root = tmp_path_factory.mktemp("hub")
    with LocalHub(root / "data", user="maintainer", token=TOKEN) as hub:
        publish_oracle_pair(hub, root / "work")
        yield hub


@pytest.fixture(scope="module")
def record(server):
    return Hub(server.url).draft_record(DRAFT_OUT)


def test_try_prints_the_table_beside_the_card_and_exits_0(server, record, tmp_path):
    server.clear_requests()
    done = try_command(server, DRAFT_OUT, "--max-new-tokens", MAX_NEW_TOKENS, cache=tmp_path / "cache")
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    out = " ".join(done.stdout.split())
    for header in COLUMNS:
        assert header in out
    head = Hub(server.url).head(DRAFT_OUT)
    assert f"{DRAFT_OUT}@{head[:7]} with {TARGET_OUT}@{Hub(server.url).head(TARGET_OUT)[:7]}" in out
    for run_on_card in record.validation.runs:  # the card's own figures, per k, from the record
        assert f"x{run_on_card.speedup:.2f}" in out
    assert "lossless on CPU: speculative output equals plain greedy in all" in out
    assert "recommended num_assistant_tokens here:" in out
    assert f"the card recommends {record.validation.recommended_num_assistant_tokens}" in out
    assert "OpenVINO GenAI 2026." in out and f"({record.validation.hardware}" in out
    # Only reads: no commit, upload or repo creation (every request a GET or HEAD).
    methods = {r["method"] for r in server.requests()}
    assert methods <= {"GET", "HEAD"}, methods
    assert "download" in done.stderr.lower() or f"{DRAFT_OUT}@{head[:7]}" in done.stderr  # the progress lines


def test_try_json_reuses_the_checked_cache_and_pins_both_commits(server, record, tmp_path):
    cache = tmp_path / "cache"
    first = try_command(server, DRAFT_OUT, "--max-new-tokens", MAX_NEW_TOKENS, "--json", cache=cache)
    assert first.returncode == 0, first.stderr[-3000:]
    server.clear_requests()
    again = try_command(server, DRAFT_OUT, "--max-new-tokens", MAX_NEW_TOKENS, "--json", cache=cache)
    assert again.returncode == 0, again.stderr[-3000:]
    downloads = [r["path"] for r in server.requests() if "/resolve/" in r["path"]]
    assert all(p.endswith("/openvino_export.json") for p in downloads), downloads  # the rest came from the cache
    result = json.loads(again.stdout)
    assert result["lossless"] is True and result["mismatches"] == []
    assert result["draft"] == {"repo": DRAFT_OUT, "commit": Hub(server.url).head(DRAFT_OUT)}
    assert result["target"] == {"repo": TARGET_OUT, "commit": Hub(server.url).head(TARGET_OUT)}
    assert [r["num_assistant_tokens"] for r in result["runs"]] == [3, 7, 15]  # the default recipe's sweep
    assert result["card"]["runs"] == [r.model_dump(mode="json") for r in record.validation.runs]
    assert result["device"] == "CPU" and result["hardware"] and result["openvino_genai"].startswith("2026.")
    # The oracle draft is always right: k + 1 tokens a step, here as on the card.
    assert all(r["accept_length"] == pytest.approx(r["num_assistant_tokens"] + 1, rel=0.05) for r in result["runs"])


def test_auto_runs_in_the_try_process_and_names_the_devices_it_picks_from(server, tmp_path):
    """Off CPU the pair runs in the `try` process (the sandbox child would not see an accelerator): AUTO takes that
    path on any machine."""
    done = try_command(
        server, DRAFT_OUT, "--device", "auto", "--max-new-tokens", MAX_NEW_TOKENS, "--json", cache=tmp_path / "cache"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["device"] == "AUTO" and result["hardware"].startswith("AUTO over CPU: ") and result["lossless"]
    assert "sandbox:" not in done.stderr  # no validation child was started


def test_an_unknown_device_lists_the_ones_openvino_sees(server, tmp_path):
    import openvino as ov

    # A Hub that does not answer: the device is refused before any Hub call.
    done = try_command(server, DRAFT_OUT, "--device", "FOO", cache=tmp_path, endpoint="http://127.0.0.1:9")
    assert done.returncode == 2, done.stderr[-3000:]
    line = " ".join(done.stderr.split())
    assert "--device 'FOO': OpenVINO does not see such a device" in line
    for device in ov.Core().available_devices:
        assert device in line


def test_too_few_prompts_are_refused_naming_the_option(server, tmp_path):
    done = try_command(server, DRAFT_OUT, "--prompt", "Hello", cache=tmp_path, endpoint="http://127.0.0.1:9")
    assert done.returncode == 2 and "--prompt: List should have at least 3 items" in done.stderr, done.stderr


def _rows_dependent_target(source: Path, dest: Path) -> None:
    """Copy a target IR folder, its logits changed to prefer `OTHER_TOKEN` by 1000 per extra row the forward pass
    scores: plain greedy scores one row a step (unchanged), speculative verification k + 1 rows (changed)."""
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    shutil.copytree(source, dest)
    model = ov.Core().read_model(source / "openvino_model.xml")
    result = next(r for r in model.get_results() if "logits" in r.output(0).get_names())
    logits = result.input_value(0)
    vocab = logits.get_partial_shape()[2].get_length()
    first_two = ops.gather(ops.shape_of(logits), ops.constant(np.array([0, 1], dtype=np.int64)), np.int64(0))
    rows = ops.reduce_prod(first_two, np.int64(0), keep_dims=False)
    extra_rows = ops.subtract(ops.convert(rows, ov.Type.f32), np.float32(1))
    preference = np.zeros((vocab,), dtype=np.float32)
    preference[OTHER_TOKEN] = 1000.0
    biased = ops.add(logits, ops.multiply(extra_rows, preference))
    logits.get_tensor().set_names(set())
    biased.output(0).set_names({"logits"})
    result.input(0).replace_source_output(biased.output(0))
    (dest / "openvino_model.xml").unlink()
    (dest / "openvino_model.bin").unlink()
    ov.save_model(model, dest / "openvino_model.xml", compress_to_fp16=False)


def _digest(path: Path) -> FileDigest:
    hashed = hash_file(path)
    return FileDigest(sha256=hashed.file.sha256, size=hashed.file.size, git_blob_id=hashed.blob_id)


def _republish(server, record, draft_dir: Path, draft_repo: str, target_repo: str, target_files: dict) -> None:
    """A copy of the published draft under another name, its record naming `target_repo` and `target_files`."""
    from huggingface_hub import HfApi

    assert record.files is not None
    files = record.files.model_copy(update={"target": target_files})
    (draft_dir / "openvino_export.json").write_text(
        to_json(record.model_copy(update={"repos": Repos(draft=draft_repo, target=target_repo), "files": files})),
        encoding="utf-8",
    )
    HfApi(endpoint=server.url, token=TOKEN).create_repo(draft_repo)
    HfApi(endpoint=server.url, token=TOKEN).upload_folder(repo_id=draft_repo, folder_path=draft_dir)


@pytest.fixture(scope="module")
def lossy_pair(server, record, tmp_path_factory):
    """The published draft beside a row-dependent copy of its target; the target repo then gets a later commit
    that changes a recorded file, so `try` must find the validated commit in its history. Returns that commit."""
    from huggingface_hub import HfApi, snapshot_download

    api = HfApi(endpoint=server.url, token=TOKEN)
    root = tmp_path_factory.mktemp("lossy")
    assert record.files is not None
    target = Path(
        snapshot_download(
            TARGET_OUT,
            local_dir=root / "target",
            allow_patterns=list(record.files.target),
            endpoint=server.url,
            token=TOKEN,
        )
    )
    _rows_dependent_target(target, root / "lossy-target")
    api.create_repo(LOSSY_TARGET)
    validated = api.upload_folder(repo_id=LOSSY_TARGET, folder_path=root / "lossy-target").oid
    api.upload_file(
        repo_id=LOSSY_TARGET,
        path_or_fileobj=b'{"changed": "after validation"}\n',
        path_in_repo="generation_config.json",
    )
    draft = Path(
        snapshot_download(
            DRAFT_OUT,
            local_dir=root / "draft",
            allow_patterns=list(record.files.draft),
            endpoint=server.url,
            token=TOKEN,
        )
    )
    shutil.rmtree(draft / ".cache", ignore_errors=True)
    lossy_files = {name: _digest(root / "lossy-target" / name) for name in record.files.target}
    _republish(server, record, draft, LOSSY_DRAFT, LOSSY_TARGET, lossy_files)
    return validated


def test_a_pair_that_is_not_lossless_here_exits_1_with_the_first_diverging_position(server, lossy_pair, tmp_path):
    done = try_command(server, LOSSY_DRAFT, "--max-new-tokens", MAX_NEW_TOKENS, cache=tmp_path / "cache")
    assert done.returncode == 1, (done.stdout[-3000:], done.stderr[-3000:])
    out = " ".join(done.stdout.split())
    assert f"with {LOSSY_TARGET}@{lossy_pair[:7]}" in out  # the validated commit, not the later head
    # The first verification step already scores k + 1 rows: the token after the prefill's differs.
    assert "NOT lossless on CPU: prompt 0 with num_assistant_tokens=3 first differs from plain greedy at token 1" in out


def test_a_file_the_record_does_not_list_fails_before_anything_runs(server, record, tmp_path):
    """The Hub's hashes agree with the bytes, the record does not: the record's check names the file."""
    from huggingface_hub import snapshot_download

    assert record.files is not None
    draft = Path(
        snapshot_download(
            DRAFT_OUT,
            local_dir=tmp_path / "draft",
            allow_patterns=list(record.files.draft),
            endpoint=server.url,
            token=TOKEN,
        )
    )
    shutil.rmtree(draft / ".cache", ignore_errors=True)
    (draft / "config.json").write_text('{"not": "the built config"}\n', encoding="utf-8")
    _republish(server, record, draft, MISMATCH_DRAFT, TARGET_OUT, dict(record.files.target))
    done = try_command(server, MISMATCH_DRAFT, cache=tmp_path / "cache")
    assert done.returncode != 0
    line = " ".join(done.stderr.split())
    assert "config.json at " in line and "as the Hub lists it, but the record lists sha256" in line, line
    assert not list((tmp_path / "cache").rglob("config.json"))  # not kept for a later run to trust


def test_a_file_tampered_with_in_the_hubs_storage_fails_the_hash_check(server, record, tmp_path):
    """Other bytes served under the published file's name (a damaged store, a hostile mirror): refused."""
    assert record.files is not None
    digest = record.files.draft["openvino_model.bin"]
    blob = server.data_dir / "blobs" / digest.sha256[:2] / digest.sha256
    original = blob.read_bytes()
    try:
        blob.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))  # same size, one byte changed
        done = try_command(server, DRAFT_OUT, cache=tmp_path / "cache")
    finally:
        blob.write_bytes(original)
    assert done.returncode != 0
    line = " ".join(done.stderr.split())
    assert "openvino_model.bin" in line and "the Hub lists sha256" in line and "downloaded twice" in line, line
    assert "lossless" not in done.stdout


def test_the_published_card_and_the_status_page_show_the_command(server):
    from bot.status.memory import README

    hub = Hub(server.url)
    card = hub.read_file(DRAFT_OUT, "README.md").decode()
    section = card.split("## Measure it on your machine", 1)[1].split("\n## ", 1)[0]
    # No install line names a package nobody owns (issue 31): outside Actions the card names no install at all.
    assert f"dflash-bot try {DRAFT_OUT} --device CPU" in section and "pip install dflash-ov-bot" not in section
    page = hub.read_file(RECIPE.status_repo_id, README, repo_type="dataset").decode()
    assert "`dflash-bot try <draft repo>`" in page
    assert f"- [{DRAFT_OUT}]({server.url}/{DRAFT_OUT}#measure-it-on-your-machine)" in page
