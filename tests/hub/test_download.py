"""bot/hub/ (downloads, transport) against the local Hub over real HTTP: verified downloads, deadlines, and which
answers are definitive.

Every scenario here misbehaves on the server side (`hubserver/faults.py`), so the real huggingface_hub client and
the bot's own hooks see real bytes, real silences and real status lines. Timeouts come from `HubSettings` (the
recipe's `hub:` section), set small so a stalled Hub costs a test about a second.
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import threading
import time
from collections.abc import Callable

import pytest

from bot.core.errors import Failure, HubError, Skip
from bot.core.hashes import FileHash, manifest_path, read_manifest
from bot.core.recipe import HubSettings
from bot.hub.client import Hub
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN

REPO = "org/tiny-checkpoint"
FILES = {
    "config.json": b'{"architectures": ["DFlashDraftModel"], "pad": "' + b"x" * 2000 + b'"}',
    "tokenizer.json": b'{"model": {"vocab": {}}}',
    "model.safetensors": os.urandom(300_000),  # LFS (by the Hub's .gitattributes pattern)
}
FAST = HubSettings(connect_timeout_s=2, read_timeout_s=0.5, min_bytes_per_s=2000, download_attempts=2)


@pytest.fixture(scope="module")
def hub(hub: LocalHub, tmp_path_factory: pytest.TempPathFactory) -> LocalHub:
    """The shared local Hub (conftest), holding `REPO` with `FILES`."""
    seed = tmp_path_factory.mktemp("seed")
    for name, data in FILES.items():
        (seed / name).write_bytes(data)
    hub.seed_folder(REPO, seed)
    return hub


@pytest.fixture()
def faults(hub: LocalHub):
    """Set fault rules for one test; the request log starts empty and the rules are cleared afterwards."""

    def apply(*rules: dict) -> None:
        hub.clear_requests()
        hub.set_faults(list(rules))

    yield apply
    hub.clear_faults()


def commit(hub: LocalHub) -> str:
    return Hub(hub.url, TOKEN).head(REPO)


def fired(hub: LocalHub) -> list[dict]:
    return [r for r in hub.requests() if r.get("fault")]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def within(seconds: float, action: Callable[[], object]) -> object:
    """Run `action`, failing the test (instead of hanging it) when it has not returned after `seconds`."""
    result: dict[str, object] = {}

    def target() -> None:
        try:
            result["value"] = action()
        except BaseException as exc:  # handed to the test thread
            result["error"] = exc

    worker = threading.Thread(target=contextvars.copy_context().run, args=(target,), daemon=True)  # with deadlines
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still waiting for the Hub after {seconds} s"
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result.get("value")


# ---- downloads are checked against the Hub's hashes ----


def test_a_download_lists_the_verified_hash_of_every_file_and_leaves_only_them(hub, tmp_path, faults):
    faults()
    dest = tmp_path / "checkpoint"
    download = Hub(hub.url, TOKEN).download(REPO, commit(hub), dest, FILES)
    expected = {name: FileHash(sha256(data), len(data)) for name, data in FILES.items()}
    assert download.files == expected and download.path == dest
    assert read_manifest(dest) == expected  # where the build finds them without bot.hub
    assert sorted(p.name for p in dest.iterdir()) == sorted(FILES)  # no cache or partial files to publish
    assert {p.name for p in tmp_path.iterdir()} == {"checkpoint", manifest_path(dest).name}
    assert all((dest / name).read_bytes() == data for name, data in FILES.items())


def test_a_corrupted_lfs_download_fails_naming_the_file_and_both_hashes(hub, tmp_path, faults):
    faults({"path": "/resolve/.+model.safetensors", "corrupt": True, "times": -1})
    good = FILES["model.safetensors"]
    bad = good[:-1] + bytes([good[-1] ^ 0xFF])
    with pytest.raises(Failure) as caught:
        Hub(hub.url, TOKEN).download(REPO, commit(hub), tmp_path / "checkpoint", FILES)
    error = caught.value
    assert not isinstance(error, Skip) and error.subject == REPO and error.stage == "download"
    assert "model.safetensors" in error.message and sha256(good) in error.message and sha256(bad) in error.message
    assert len(fired(hub)) == 2  # retried once, fresh
    assert not (tmp_path / "checkpoint" / "model.safetensors").exists()
    assert not manifest_path(tmp_path / "checkpoint").exists()


def test_a_corrupted_regular_file_is_caught_by_its_git_blob_id(hub, tmp_path, faults):
    faults({"path": "/resolve/.+/config.json", "corrupt": True, "times": -1})
    blob_ids = r"config\.json .*git blob id [0-9a-f]{40} downloaded, the Hub lists [0-9a-f]{40}"
    with pytest.raises(Failure, match=blob_ids):
        Hub(hub.url, TOKEN).download(REPO, commit(hub), tmp_path / "checkpoint", ["config.json"])


def test_a_corruption_that_happens_once_is_healed_by_downloading_that_file_again(hub, tmp_path, faults):
    faults({"path": "/resolve/.+model.safetensors", "corrupt": True})
    download = Hub(hub.url, TOKEN).download(REPO, commit(hub), tmp_path / "checkpoint", FILES)
    assert (tmp_path / "checkpoint" / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert download.files["model.safetensors"].sha256 == sha256(FILES["model.safetensors"])
    gets = [r["path"] for r in hub.requests() if r["path"].endswith("/model.safetensors")]
    assert len(gets) == 2 and len(fired(hub)) == 1  # only that file again


# ---- deadlines: silence, trickles and stalls ----


def test_a_hub_that_accepts_and_says_nothing_is_a_transient_failure_within_the_timeouts(hub, faults):
    faults({"path": f"^/api/models/{REPO}", "stall": 4, "times": -1})
    started = time.monotonic()
    with pytest.raises(HubError) as caught:
        within(10, lambda: Hub(hub.url, TOKEN, max_attempts=2, backoff_s=0.05, settings=FAST).repo_files(REPO))
    assert time.monotonic() - started < 3, "waited for the Hub to hang up instead of timing out"
    assert not isinstance(caught.value, Skip) and caught.value.status is None
    assert len(fired(hub)) == 2


def test_a_stalled_download_resumes_where_it_stopped(hub, tmp_path, faults):
    faults({"path": "/resolve/.+model.safetensors", "stall": 3, "after_bytes": 100_000})
    download = within(20, lambda: Hub(hub.url, TOKEN, backoff_s=0.05, settings=FAST).download(
        REPO, commit(hub), tmp_path / "checkpoint", ["model.safetensors"]))  # fmt: skip
    assert download.files["model.safetensors"].sha256 == sha256(FILES["model.safetensors"])
    # By start time: the stalled request is logged when its handler gives up, after the second one.
    first, second = sorted((r for r in hub.requests() if r["path"].endswith("/model.safetensors")),
                           key=lambda r: r["time"])  # fmt: skip
    assert first["fault"] and first["bytes_out"] == 100_000
    assert second["bytes_out"] == len(FILES["model.safetensors"]) - 100_000  # a Range from the byte it had


def test_a_download_that_keeps_stalling_fails_naming_the_repo_file_and_bytes_received(hub, tmp_path, faults):
    faults({"path": "/resolve/.+model.safetensors", "stall": 3, "after_bytes": 100_000, "times": 1},
           {"path": "/resolve/.+model.safetensors", "stall": 3, "times": -1})  # fmt: skip
    with pytest.raises(HubError) as caught:
        within(20, lambda: Hub(hub.url, TOKEN, backoff_s=0.05, settings=FAST).download(
            REPO, commit(hub), tmp_path / "checkpoint", FILES))  # fmt: skip
    error = caught.value
    size = len(FILES["model.safetensors"])
    assert error.subject == REPO and "model.safetensors" in error.message
    assert f"100000 of {size} bytes received" in error.message, error.message
    assert not isinstance(error, Skip)


def test_a_trickling_answer_counts_as_stalled(hub, tmp_path, faults):
    """One byte every 0.1 s never trips a read timeout; the minimum rate catches it."""
    faults({"path": "/resolve/.+/config.json", "trickle": 0.1, "times": -1})
    started = time.monotonic()
    with pytest.raises(HubError) as caught:
        within(20, lambda: Hub(hub.url, TOKEN, backoff_s=0.05, settings=FAST).download(
            REPO, commit(hub), tmp_path / "checkpoint", ["config.json"]))  # fmt: skip
    assert time.monotonic() - started < 8
    assert "config.json" in caught.value.message and "bytes/s" in caught.value.message, caught.value.message
    assert f"of {len(FILES['config.json'])} bytes received" in caught.value.message


def test_the_download_deadline_stops_a_slow_download(hub, tmp_path, faults):
    faults({"path": "/resolve/.+model.safetensors", "trickle": 0.05, "times": -1})
    settings = HubSettings(read_timeout_s=5, min_bytes_per_s=0, download_deadline_s=1)
    started = time.monotonic()
    with pytest.raises(HubError, match=r"download deadline of 1 s passed"):
        within(20, lambda: Hub(hub.url, TOKEN, settings=settings).download(
            REPO, commit(hub), tmp_path / "checkpoint", ["model.safetensors"]))  # fmt: skip
    assert time.monotonic() - started < 4


def test_a_stage_deadline_stops_the_requests_after_it(hub, faults):
    faults({"path": f"^/api/models/{REPO}", "delay": 1.5, "times": 1})
    reader = Hub(hub.url, TOKEN, backoff_s=0.05)
    with reader.deadline("plan", 0.5):
        with pytest.raises(HubError, match=r"the plan deadline of 0\.5 s passed \(timed out"):
            within(5, lambda: reader.repo_files(REPO))  # the read timeout is what was left of the deadline
        with pytest.raises(HubError, match=r"the plan deadline of 0\.5 s passed"):
            reader.repo_files(REPO)
    assert reader.repo_files(REPO).sha  # outside the stage: no deadline


# ---- only the Hub's own error codes are definitive ----


def test_a_404_without_the_hubs_error_code_is_a_transient_failure_not_a_missing_file(hub, faults):
    faults({"path": "/resolve/.+/config.json", "status": 404, "bare": True, "times": -1})
    with pytest.raises(HubError) as caught:
        Hub(hub.url, TOKEN).read_file(REPO, "config.json")
    assert not isinstance(caught.value, Skip) and caught.value.status == 404
    assert "X-Error-Code" in caught.value.message


def test_a_404_without_the_hubs_error_code_on_repo_info_is_not_repo_not_found(hub, faults):
    faults({"path": f"^/api/models/{REPO}", "status": 404, "bare": True, "times": -1})
    with pytest.raises(HubError) as caught:
        Hub(hub.url, TOKEN).repo_files(REPO)
    assert not isinstance(caught.value, Skip) and caught.value.status == 404


@pytest.mark.parametrize(
    "action, reason",
    [
        (lambda h, _: h.repo_files("org/no-such-repo"), "repo not found"),
        (lambda h, _: h.repo_files(REPO, "0" * 40), "revision not found"),
        (lambda h, tmp: h.download("org/no-such-repo", "main", tmp / "x", ["config.json"]), "repo not found"),
    ],
    ids=["repo", "revision", "download"],
)
def test_the_hubs_own_answers_stay_definitive(hub, tmp_path, faults, action, reason):
    faults()
    with pytest.raises(Skip, match=reason):
        action(Hub(hub.url, TOKEN), tmp_path)
    assert Hub(hub.url, TOKEN).read_file(REPO, "missing.json") is None  # EntryNotFound: no such file


def test_a_file_the_hub_does_not_list_is_never_fetched_unverified(hub, tmp_path, faults):
    faults()
    with pytest.raises(Failure, match=r"missing\.json at [0-9a-f]{7}: the Hub does not list it there") as caught:
        Hub(hub.url, TOKEN).download(REPO, "main", tmp_path / "x", ["config.json", "missing.json"])
    assert not isinstance(caught.value, Skip)
    assert not [r for r in hub.requests() if r["path"].endswith("/missing.json")]


def test_every_request_gets_the_settings_timeouts_whatever_the_call_site_asks(hub, faults):
    """model_info passes `timeout=None` (no limit) to httpx; the stall below would hold it for 4 s a try."""
    faults({"path": f"^/api/models/{REPO}/revision/", "stall": 4, "times": 1})
    started = time.monotonic()
    files = within(10, lambda: Hub(hub.url, TOKEN, backoff_s=0.05, settings=FAST).repo_files(REPO, "main"))
    assert files.sha and time.monotonic() - started < 3
