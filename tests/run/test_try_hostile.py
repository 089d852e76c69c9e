"""`dflash-bot try` through a hostile endpoint (issue 29): the local Hub's fault rules play a mirror that names a
commit with a path, a look-alike repo whose record lists code, a pickle, nested and hidden files, and a commit
history that pages for ever.

No export runs: the repos hold a record and small files with the Hub's real hashes, so every refusal below is `try`'s
own check, made before anything is written (each scenario fails before GenAI would load the pair). HOME is a temporary
folder, and the cache is `try`'s default one under it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import time
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from rich.console import Console

from bot.core.errors import Failure, HubError
from bot.core.recipe import HubSettings
from bot.core.record import PROVENANCE_FILE
from bot.hub.client import Hub
from bot.run.try_pair import MAX_COMMIT_PAGES, SEARCH_DEADLINE_S, TryOptions, pin_pair, try_pair
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.records import record_data
from tests.reliability.rows import record as row

NS = "hostile"
TARGET = f"{NS}/Qwen3-Tiny-int4-ov"
DRAFT = f"{NS}/Qwen3-Tiny-DFlash-b16-int4-ov"
LOOKALIKE = f"{NS}/Qwen3-Tiny-DFlash-lookalike-int4-ov"
PLANTED = ("modeling_dflash.py", "pytorch_model.bin", "sub/config.json", ".env")


def _digest(data: bytes) -> dict:
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "git_blob_id": blob}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _write(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def _draft(folder: Path, target_files: dict[str, bytes], extra: dict[str, bytes]) -> Path:
    """A draft repo folder: its IR pair, config, `extra` files and a passing record listing them all."""
    files = {
        "config.json": b'{"architectures": ["DFlashDraftModel"]}\n',
        "openvino_model.xml": b"<net/>\n",
        "openvino_model.bin": os.urandom(2048),
        **extra,
    }
    data = record_data()
    data["repos"] = {"draft": folder.name, "target": TARGET}
    data["files"] = {
        "draft": {name: _digest(body) for name, body in files.items()},
        "target": {name: _digest(body) for name, body in target_files.items()},
        "draft_source": {},
        "target_source": {},
    }
    files[PROVENANCE_FILE] = json.dumps(data).encode()
    return _write(folder, files)


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory) -> LocalHub:
    """A target repo whose head no longer holds the files a draft was validated with (a later commit changed its
    weights), a draft repo, and a look-alike draft whose record lists `PLANTED` (all in the repo, hashes real)."""
    root = tmp_path_factory.mktemp("hostile")
    validated = {"config.json": b'{"model_type": "qwen3"}\n', "openvino_model.xml": b"<net/>\n",
                 "openvino_model.bin": os.urandom(4096)}  # fmt: skip
    hub.seed_folder(TARGET, _write(root / "target", validated))
    HfApi(endpoint=hub.url, token=TOKEN).upload_file(
        repo_id=TARGET, path_or_fileobj=os.urandom(4096), path_in_repo="openvino_model.bin"
    )
    hub.seed_folder(DRAFT, _draft(root / DRAFT.split("/")[1], validated, {}))
    planted = {name: b"import os; os.system('id')\n" if name.endswith(".py") else b"\x80\x04K*." for name in PLANTED}
    hub.seed_folder(LOOKALIKE, _draft(root / LOOKALIKE.split("/")[1], validated, planted))
    return hub


@pytest.fixture()
def home(tmp_path, monkeypatch) -> Path:
    """A temporary HOME, with a `.bashrc` a mirror would like to overwrite."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# the user's own\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    return home


def _try(hub: LocalHub, repo: str, home: Path) -> Failure:
    """`try` of `repo` with its default cache under `home`; returns the failure that stopped it."""
    options = TryOptions(draft_repo=repo, cache=Path.home() / ".cache" / "dflash-bot" / "try")
    with pytest.raises(Failure) as caught:
        try_pair(Hub(hub.url), options, console=Console(file=io.StringIO()))
    return caught.value


def _written(home: Path) -> list[str]:
    """The files under HOME, but OpenVINO's own (`intel/`: its telemetry state, written when `try` imports it in
    this process; the `dflash-bot` command makes that module unimportable first)."""
    return sorted(
        p.relative_to(home).as_posix()
        for p in home.rglob("*")
        if p.is_file() and p.relative_to(home).parts[0] != "intel"
    )


@pytest.mark.parametrize("fake", ["absolute", "dotdot"])
def test_a_commit_id_that_is_a_path_writes_nothing_outside_the_cache(hub, home, fake) -> None:
    victim = home / "victim"
    sha = str(victim) if fake == "absolute" else "../../../../victim"
    hub.set_faults([{"path": f"^/(api/models/)?{DRAFT}(/|$)", "fake_sha": sha}])
    try:
        failure = _try(hub, DRAFT, home)
    finally:
        hub.clear_faults()
    assert "not 40 hex digits" in failure.message and failure.subject == DRAFT, failure.message
    assert _written(home) == [".bashrc"] and (home / ".bashrc").read_text() == "# the user's own\n"
    row(
        "hostile",
        f"a mirror answers the draft's commit as {'an absolute path' if fake == 'absolute' else 'a ../ path'} "
        "(`try`, HOME a temporary folder)",
        f"refused before any download: {failure.one_line()[:160]}",
        f"nothing written under HOME but its own .bashrc ({len(_written(home))} file)",
        True,
    )


def test_a_lookalike_repo_gets_no_code_pickle_nested_or_hidden_file_downloaded(hub, home) -> None:
    failure = _try(hub, LOOKALIKE, home)
    for name in PLANTED:
        assert repr(name) in failure.message, failure.message
    names = {Path(name).name for name in _written(home)}
    assert not names & {"modeling_dflash.py", "pytorch_model.bin", "config.json", ".env"}, names
    row(
        "hostile",
        "a look-alike draft repo whose record lists modeling_dflash.py, pytorch_model.bin, sub/config.json and .env "
        "(real hashes)",
        f"refused before any download: {failure.message[:200]}",
        "none of its files in the cache",
        True,
    )


def test_a_commit_history_that_pages_for_ever_is_read_a_bounded_number_of_pages(hub) -> None:
    """Issue 41: the limit bounds the requests. Before, each page (the same two commits, linking to itself) was read
    until 50 ids were collected: 17 pages here, and a request per id after."""
    hub.set_faults([{"path": f"^/api/models/{TARGET}/commits/", "endless_listing": True}])
    hub.clear_requests()
    found: dict = {}
    started = time.monotonic()
    search = threading.Thread(target=lambda: found.update(pair=pin_pair(Hub(hub.url), DRAFT, None)), daemon=True)
    search.start()
    search.join(30)
    took = time.monotonic() - started
    target_requests = [r for r in hub.requests() if f"/{TARGET}/" in r["path"] or r["path"].endswith(f"/{TARGET}")]
    pages = [r for r in target_requests if "/commits/" in r["path"]]
    hub.clear_faults()  # a search still paging ends at the next page
    search.join(10)
    assert "pair" in found, f"still paging after {took:.0f} s ({len(pages)} pages)"
    history = HfApi(endpoint=hub.url).list_repo_commits(TARGET)
    assert found["pair"].target_commit == history[1].commit_id  # the validated commit, the one before the head
    # The first page, and the second, which repeats it: nothing new, the listing loops.
    assert len(pages) == 2 <= MAX_COMMIT_PAGES, [r["path"] for r in pages]
    assert len(target_requests) <= MAX_COMMIT_PAGES + 4, [r["path"] for r in target_requests]
    row(
        "hostile",
        "a target repo's commit history whose every page links to another (`try` searching for the validated commit)",
        f"stopped after {len(pages)} pages, {len(target_requests)} requests to the target repo in all ({took:.1f} s; "
        f"at most {MAX_COMMIT_PAGES} pages, each commit once; before: 17 pages), the validated commit pinned",
        "unchanged",
        True,
    )


def test_a_mirror_that_answers_slowly_keeps_try_busy_no_longer_than_its_deadline(hub) -> None:
    """Issue 41: every answer about the target comes 0.6 s late (inside any timeout) and its history pages for ever;
    the search ends at its deadline (here the Hub settings' plan deadline of 1.5 s), naming it. Before: no deadline,
    and a request per page until 50 ids."""
    hub.set_faults(
        [
            {"path": f"^/api/models/{TARGET}/commits/", "endless_listing": True},
            {"path": f"^/api/models/{TARGET}", "delay": 0.6, "times": -1},
        ]
    )
    hub.clear_requests()
    started = time.monotonic()
    try:
        with pytest.raises(HubError) as caught:
            pin_pair(Hub(hub.url, settings=HubSettings(plan_deadline_s=1.5)), DRAFT, None)
    finally:
        hub.clear_faults()
    took = time.monotonic() - started
    assert "the commits deadline of 1.5 s passed" in caught.value.message, caught.value.message
    assert took < 1.5 + 2.0, took  # the deadline, and the draft's own reads before the search
    row(
        "hostile",
        "a mirror that answers every request about the target 0.6 s late and pages its history for ever (`try`)",
        f"stopped after {took:.1f} s at the search's deadline (1.5 s here; at most {SEARCH_DEADLINE_S:.0f} s): "
        f"{caught.value.message[:120]}",
        "unchanged",
        True,
    )
