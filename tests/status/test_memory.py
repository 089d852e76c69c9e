"""The status repo (page + memory): records, memory rules, rendering, and reads/writes on a real local Hub."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest
from huggingface_hub import HfApi
from typer.testing import CliRunner

from bot.core.errors import Failure, Fault, HubError, InfrastructureFailure, Skip, Stage
from bot.core.fingerprints import Fingerprints, recipe_memory_fingerprint, toolchain_fingerprint
from bot.core.outcome import Outcome
from bot.core.toolchain import Toolchain
from bot.hub.client import Hub
from bot.status.memory import (
    CHART,
    MAX_REASON_CHARS,
    README,
    STATUS_JSON,
    StatusEntry,
    StatusFile,
    collection_needs_sync,
    merged,
    needs_recheck,
    problem_entry,
    published_entry,
    stale_published,
    with_repo_shas,
)
from bot.status.page import md_text, render_files, render_readme, renderer_fingerprint, write_status
from bot.status.read import MAX_STATUS_BYTES, StatusRead, agrees, foreign_repos, load_status, read_status, vetted
from bot.status.sync import StatusMemory, entries_for
from hubserver import LocalHub
from tests.conftest import HUB_TOKEN as TOKEN
from tests.conftest import fast_recipe

# huggingface_hub's own LFS upload passes a file object as `data=`, which httpx deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")

NS = "OV"
STATUS_REPO = f"{NS}/dflash-bot-status"
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
DRAFT, TARGET = f"{NS}/Qwen3-Tiny-DFlash-b16-int4-ov", f"{NS}/Qwen3-Tiny-int4-ov"


def published(**changes) -> StatusEntry:
    entry = StatusEntry(
        source="z-lab/Qwen3-Tiny-DFlash-b16",
        revision="a" * 40,
        status="published",
        kind="dflash",
        target="Qwen/Qwen3-Tiny",
        target_revision="b" * 40,
        draft_repo=DRAFT,
        target_repo=TARGET,
        repo_shas={DRAFT: "1" * 40, TARGET: "2" * 40},
        accept_length=4.0,
        speedup=1.8,
        recommended_k=3,
        profile="default",
        toolchain_fingerprint="tc",
        recipe_fingerprint="rc",
        card_fingerprint="card",
        last_built=NOW,
        last_checked=NOW,
    )
    return entry.model_copy(update=changes)


def skipped(**changes) -> StatusEntry:
    entry = problem_entry(
        "z-lab/Broken-DFlash",
        "c" * 40,
        "skipped",
        "target_layer_ids do not fit the target",
        stage="classify",
        fingerprints=Fingerprints("tc", "rc"),
        now=NOW,
    )
    return entry.model_copy(update=changes)


def status_of(*entries: StatusEntry, **changes) -> StatusFile:
    return StatusFile(recipe="dflash", namespace=NS, entries=tuple(sorted(entries, key=lambda e: e.source)), **changes)


# ---- memory rules ----


@pytest.mark.parametrize(
    ("entry", "kwargs", "expected"),
    [
        (None, {}, True),  # never seen
        (skipped(), {}, False),  # same everything: remembered
        (skipped(), {"recheck": True}, True),  # --recheck
        (skipped(), {"revision": "d" * 40}, True),  # new source revision
        (skipped(), {"fingerprints": Fingerprints("tc2", "rc")}, True),  # toolchain changed
        (skipped(), {"fingerprints": Fingerprints("tc", "rc2")}, True),  # recipe changed
        (skipped(), {"recheck_after": dt.timedelta(days=7)}, False),  # younger than recheck_after
        (skipped(), {"recheck_after": dt.timedelta(days=7), "now": NOW + dt.timedelta(days=7)}, True),  # aged out
        (skipped(status="failed"), {}, False),  # failures are remembered too
        (skipped(status="failed", stage="download"), {}, True),  # ...but not a failed Hub call
        (skipped(stage="read"), {}, False),  # a gated/missing skip is remembered
        (skipped(stage="publish"), {}, True),  # "no write token" is not the source's
        (published(revision="c" * 40), {}, False),  # published and current
        (published(revision="c" * 40), {"fingerprints": Fingerprints("tc", "rc", "card")}, False),
        (
            published(revision="c" * 40),
            {"fingerprints": Fingerprints("tc", "rc", "card2")},
            True,
        ),  # card template changed
        (published(revision="c" * 40), {"recheck_after": dt.timedelta(days=7)}, False),  # young publish: remembered
        (published(revision="c" * 40), {"recheck_after": dt.timedelta(0)}, True),  # aged: its target may have moved
        # Forged or damaged memory: nothing could confirm a publish without repos, and no age makes a future check due.
        (published(revision="c" * 40, draft_repo=None, target_repo=None, repo_shas={}), {}, True),
        (
            published(
                revision="c" * 40,
                draft_repo=None,
                target_repo=None,
                repo_shas={},
                last_checked=NOW + dt.timedelta(days=3650),
            ),
            {"recheck_after": dt.timedelta(days=7)},
            True,
        ),
        (skipped(last_checked=NOW + dt.timedelta(days=3650)), {"recheck_after": dt.timedelta(days=7)}, True),
    ],
)
def test_needs_recheck_truth_table(entry, kwargs, expected) -> None:
    arguments = {
        "revision": "c" * 40,
        "fingerprints": Fingerprints("tc", "rc"),
        "now": NOW,
        "recheck_after": None,
        "recheck": False,
        **kwargs,
    }
    assert needs_recheck(entry, **arguments) is expected


def examined_again(outcome: Outcome) -> bool:
    """Whether the run after the one that recorded `outcome` examines the source again, nothing else changed."""
    memory = StatusMemory(
        status=None,
        namespace_listing={},
        stale=frozenset(),
        fingerprints=Fingerprints("tc", "rc", None),
        now=NOW,
        recheck_after=None,
    )
    (entry,) = entries_for(memory, [outcome], {})
    return needs_recheck(
        entry,
        revision=outcome.revision,
        fingerprints=Fingerprints("tc", "rc"),
        now=NOW,
        recheck_after=None,
        recheck=False,
    )


@pytest.mark.parametrize(
    "error",
    [
        InfrastructureFailure("export-draft stopped: the bot is stopping (SIGTERM)", stage=Stage.EXPORT_DRAFT),
        InfrastructureFailure("export needs 9 GB free, only 1 GB available", stage=Stage.EXPORT_TARGET),
        HubError("Hub answered 503 (after 5 attempts)", status=503, stage=Stage.CLASSIFY),
    ],
    ids=["killed-export", "disk", "hub-outage"],
)
def test_an_infrastructure_failure_is_never_remembered_as_the_sources(error) -> None:
    """Our side's failure says nothing about the source, whatever step it stopped: examined again next run."""
    source, revision = "z-lab/Broken-DFlash", "c" * 40
    assert examined_again(Outcome.of_error(source, revision, error))
    assert not examined_again(Outcome.of_error(source, revision, Failure("export crashed", stage=error.stage)))


@pytest.mark.parametrize("stage", list(Stage), ids=str)
def test_what_the_memory_keeps_is_decided_by_the_stage_it_happened_in(stage) -> None:
    """Each stage, a new one included, is decided by the `Fault` it declares (`Stage`), not by a list of names."""
    source, revision = "z-lab/Broken-DFlash", "c" * 40
    assert examined_again(Outcome.of_error(source, revision, Failure("broke", stage=stage))) is (
        stage.fault is not Fault.SOURCE
    )
    assert examined_again(Outcome.of_error(source, revision, Skip("not ours", stage=stage))) is (
        stage.fault in (Fault.OUTPUT, Fault.DECISION)
    )


def test_the_stages_decide_as_the_memory_always_did_and_an_unknown_one_is_examined() -> None:
    source_stages = {stage for stage in Stage if stage.fault is Fault.SOURCE}
    assert {Stage.CLASSIFY, Stage.EXPORT_DRAFT, Stage.VALIDATE, Stage.QUALITY} <= source_stages
    assert not {Stage.DOWNLOAD, Stage.WHOAMI, Stage.SANDBOX, Stage.TOOLCHAIN, Stage.PUBLISH} & source_stages
    # A label a newer bot wrote: its failure cannot be known to be the source's; a skip still is.
    assert needs_recheck(
        skipped(status="failed", stage="a-newer-stage"),
        revision="c" * 40,
        fingerprints=Fingerprints("tc", "rc"),
        now=NOW,
        recheck_after=None,
        recheck=False,
    )
    assert not needs_recheck(
        skipped(stage="a-newer-stage"),
        revision="c" * 40,
        fingerprints=Fingerprints("tc", "rc"),
        now=NOW,
        recheck_after=None,
        recheck=False,
    )


def test_stale_published_finds_edited_and_deleted_repos() -> None:
    entries = [published(), skipped()]
    assert stale_published(entries, {DRAFT: "1" * 40, TARGET: "2" * 40}) == []
    assert stale_published(entries, {DRAFT: "9" * 40, TARGET: "2" * 40}) == [DRAFT]
    assert stale_published(entries, {TARGET: "2" * 40}) == [DRAFT]
    assert stale_published(entries, {}) == [DRAFT, TARGET]
    refreshed = with_repo_shas(status_of(*entries), {DRAFT: "9" * 40, TARGET: "8" * 40})
    assert stale_published(refreshed.entries, {DRAFT: "9" * 40, TARGET: "8" * 40}) == []


def test_fingerprints_change_with_what_they_cover() -> None:
    toolchain = Toolchain(versions={"openvino": "1"}, capabilities=frozenset({"dflash-stateful"}))
    assert toolchain_fingerprint(toolchain, ["p1"]) == toolchain_fingerprint(toolchain, ["p1"])
    assert toolchain_fingerprint(toolchain, ["p1"]) != toolchain_fingerprint(toolchain, ["p2"])
    newer = Toolchain(versions={"openvino": "2"}, capabilities=toolchain.capabilities)
    assert toolchain_fingerprint(toolchain) != toolchain_fingerprint(newer)
    recipe = fast_recipe()
    mapped = recipe.model_copy(update={"targets": recipe.targets.model_copy(update={"map": {"a/b": "c/d"}})})
    assert recipe_memory_fingerprint(recipe) != recipe_memory_fingerprint(mapped)
    aged = recipe.model_copy(update={"watch": recipe.watch.model_copy(update={"recheck_after": None})})
    assert recipe_memory_fingerprint(recipe) == recipe_memory_fingerprint(aged)


def test_entries_from_a_build_record_and_problems() -> None:
    from tests.records import build_record

    built = build_record(speedups=(1.2, 1.9))
    entry = published_entry(
        built,
        draft_repo="OV/X-DFlash-int4-ov",
        target_repo="OV/X-int4-ov",
        fingerprints=Fingerprints("tc", "rc", "card"),
        now=NOW,
    )
    assert (entry.source, entry.status, entry.speedup, entry.recommended_k, entry.profile) == (
        "z-lab/Qwen3-Tiny-DFlash-b16",
        "published",
        1.9,
        7,
        "default",
    )
    assert entry.last_built == dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)
    assert entry.pair() is not None and entry.pair().target == "Qwen/Qwen3-Tiny"
    failed = problem_entry(
        entry.source,
        "n" * 40,
        "failed",
        "export crashed",
        stage="export",
        fingerprints=Fingerprints("tc", "rc"),
        now=NOW,
        previous=entry,
    )
    # The last good build stays published: same repos and figures, now marked failed with the reason.
    assert failed.status == "failed" and failed.repos == entry.repos and failed.pair() == entry.pair()
    assert failed.last_built == entry.last_built and failed.revision == "n" * 40
    assert skipped().pair() is None and skipped().repos == []


def test_merged_keeps_watched_sources_and_updates() -> None:
    previous = status_of(published(), skipped(), collection_url="http://h/c", collection_title="T")
    gone = merged(previous, [], recipe="dflash", namespace=NS, watched=["z-lab/Qwen3-Tiny-DFlash-b16"])
    assert [e.source for e in gone.entries] == ["z-lab/Qwen3-Tiny-DFlash-b16"]
    assert gone.collection_url == "http://h/c"
    kept = merged(previous, [skipped(reason="new reason")], recipe="dflash", namespace=NS, watched=None)
    assert kept.entry("z-lab/Broken-DFlash").reason == "new reason" and len(kept.entries) == 2
    assert merged(previous, [], recipe="dflash", namespace=NS, watched=None) == previous
    assert not collection_needs_sync(previous, previous)
    assert collection_needs_sync(None, previous)
    assert collection_needs_sync(
        previous, status_of(published(speedup=2.0), collection_url="http://h/c", collection_title="T")
    )


# ---- rendering ----


def test_page_escapes_source_derived_text() -> None:
    hostile = skipped(source="evil/x", reason="bad | <img src=x onerror=alert(1)> [click](javascript:alert(1))\nrow")
    page = render_readme(status_of(published(), hostile), endpoint="https://huggingface.co")
    row = next(line for line in page.splitlines() if line.startswith("| [evil/x]"))
    assert "<img" not in page and "&lt;img" in row
    assert "\\[click\\]\\(javascript:alert\\(1\\)\\)" in row
    assert len(re.findall(r"(?<!\\)\|", row)) == 15  # 14 cells: the reason's `|` cannot open another
    assert md_text("a|b") == "a\\|b"
    assert page.startswith("---\npretty_name: dflash-bot status (dflash)\n")
    assert f"[{md_text(DRAFT)}](https://huggingface.co/{DRAFT})" in page
    assert "![" in page and "(speedups.png)" in page


def test_rendered_files_are_deterministic() -> None:
    status = status_of(published(), skipped(), renderer=renderer_fingerprint())
    first, second = render_files(status, endpoint="http://h"), render_files(status, endpoint="http://h")
    assert first == second and set(first) == {README, STATUS_JSON, CHART}
    assert first[CHART].startswith(b"\x89PNG")
    assert StatusFile.model_validate(json.loads(first[STATUS_JSON])) == status
    other = render_files(status_of(published(speedup=2.5), skipped()), endpoint="http://h")
    assert other[CHART] != first[CHART] and other[README] != first[README]


# ---- the Hub ----


@pytest.fixture(scope="module")
def server(hub: LocalHub) -> LocalHub:
    """The shared local Hub (conftest), empty."""
    return hub


def _requests(server: LocalHub) -> list[dict]:
    return [r for r in server.requests() if not r["path"].startswith("/api/agent")]


def test_write_and_read_status_only_when_changed(server: LocalHub) -> None:
    writer = Hub(server.url, TOKEN)
    server.clear_requests()
    assert read_status(writer, STATUS_REPO) is None
    assert len(_requests(server)) == 1  # one request, even for a repo that does not exist

    status = status_of(published(), skipped(), renderer=renderer_fingerprint())
    first = write_status(writer, STATUS_REPO, status, current=None)
    assert first is not None
    files = set(HfApi(endpoint=server.url, token=TOKEN).list_repo_files(STATUS_REPO, repo_type="dataset"))
    assert {README, STATUS_JSON, CHART} <= files

    server.clear_requests()
    current = read_status(writer, STATUS_REPO)
    assert current == status and len(_requests(server)) == 1

    server.clear_requests()
    assert write_status(writer, STATUS_REPO, status, current=current) is None
    assert _requests(server) == []  # equal to what planning read: nothing sent at all
    assert write_status(writer, STATUS_REPO, status) is None  # not read: the Hub's bytes are equal, no commit
    assert not [r for r in _requests(server) if "/commit/" in r["path"]]

    changed = status_of(published(speedup=2.2), skipped())
    second = write_status(writer, STATUS_REPO, changed, current=current)
    assert second is not None and second != first
    assert read_status(writer, STATUS_REPO) == changed
    commits = HfApi(endpoint=server.url, token=TOKEN).list_repo_commits(STATUS_REPO, repo_type="dataset")
    assert [c.commit_id for c in commits[:2]] == [second, first]  # one commit per change, nothing in between


def test_read_status_rejects_damaged_or_newer_files(server: LocalHub) -> None:
    api = HfApi(endpoint=server.url, token=TOKEN)
    reader = Hub(server.url, TOKEN)
    for repo, content in (
        ("OV/damaged-status", b"{not json"),
        ("OV/newer-status", b'{"schema_version": 99}'),
        ("OV/wrong-status", b'{"schema_version": 1, "entries": 3}'),
    ):
        api.create_repo(repo, repo_type="dataset")
        api.upload_file(path_or_fileobj=content, path_in_repo=STATUS_JSON, repo_id=repo, repo_type="dataset")
        assert read_status(reader, repo) is None


def test_status_command_prints_table_and_json(server: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.cli.app import app

    writer = Hub(server.url, TOKEN)
    repo = "OV/cli-status"
    status = status_of(published(), skipped(reason="[bold]not markup[/bold]"))
    write_status(writer, repo, status)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    runner = CliRunner()
    table = runner.invoke(app, ["status", "--repo", repo, "--endpoint", server.url])
    assert table.exit_code == 0, table.output
    assert "z-lab/Qwen3-Tiny-DFlash-b16" in table.output and "[bold]not markup[/bold]" in table.output
    as_json = runner.invoke(app, ["status", "--repo", repo, "--endpoint", server.url, "--json"])
    assert as_json.exit_code == 0 and StatusFile.model_validate(json.loads(as_json.stdout)) == status
    missing = runner.invoke(app, ["status", "--repo", "OV/no-such-status", "--endpoint", server.url])
    assert missing.exit_code == 1


def test_status_step_with_only_skips_makes_no_collection(server: LocalHub) -> None:
    from bot.status.sync import StatusMemory, publish_status

    writer = Hub(server.url, TOKEN)
    recipe = fast_recipe()
    recipe = recipe.model_copy(
        update={
            "publish": recipe.publish.model_copy(update={"namespace": "OnlySkips", "status_repo": "{namespace}/status"})
        }
    )
    memory = StatusMemory(
        status=None,
        namespace_listing={},
        stale=frozenset(),
        fingerprints=Fingerprints("tc", "rc", None),
        now=NOW,
        recheck_after=None,
    )
    result = publish_status(writer, recipe, memory, [skipped()], watched=None, committed=False)
    assert result.commit is not None and result.collection is None and result.collection_url is None
    assert list(HfApi(endpoint=server.url, token=TOKEN).list_collections(owner="OnlySkips")) == []
    assert read_status(writer, "OnlySkips/status") == result.status
    assert "OnlySkips/status" in result.summary_markdown() and "Collection" not in result.summary_markdown()


# ---- damaged, forged and foreign memory (issue 21) ----


def _entry_json(**changes) -> dict:
    return {**published(revision="c" * 40).model_dump(mode="json"), **changes}


def _upload(server: LocalHub, repo: str, content: bytes) -> None:
    api = HfApi(endpoint=server.url, token=TOKEN)
    api.create_repo(repo, repo_type="dataset", exist_ok=True)
    api.upload_file(path_or_fileobj=content, path_in_repo=STATUS_JSON, repo_id=repo, repo_type="dataset")


def _file(*entries: dict, **header) -> bytes:
    return json.dumps(
        {"schema_version": 1, "recipe": "dflash", "namespace": NS, "entries": list(entries), **header}
    ).encode()


def test_invalid_entries_are_dropped_and_the_rest_is_kept(server: LocalHub) -> None:
    good = _entry_json()
    naive = _entry_json(source="z-lab/Naive-DFlash", last_checked="2026-11-30T12:00:00")  # no time zone
    nan = _entry_json(source="z-lab/NaN-DFlash", speedup=float("nan"))
    infinite = _entry_json(source="z-lab/Inf-DFlash", accept_length=float("inf"))
    nested = _entry_json(source="z-lab/Nested-DFlash", profile=[[["deep"]]])
    unknown = _entry_json(source="z-lab/Unknown-DFlash", injected="x")
    _upload(server, "OV/mixed-status", _file(good, naive, nan, infinite, nested, unknown, good))
    read = load_status(Hub(server.url, TOKEN), "OV/mixed-status")
    assert read.status is not None and [e.source for e in read.status.entries] == [good["source"]]
    assert read.repaired and len(read.problems) == 6  # five invalid entries and a duplicate, each named
    assert any("Naive-DFlash" in p and "timezone" in p for p in read.problems), read.problems
    assert any("NaN-DFlash" in p and "finite" in p for p in read.problems), read.problems


@pytest.mark.parametrize(
    ("case", "content"),
    [
        ("nested 100 000 deep", b'{"schema_version": 1, "entries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("nested in a header field", _file(recipe=[[[["x"]]]])),
        ("over the size limit", b'{"pad": "' + b"x" * (MAX_STATUS_BYTES + 1) + b'"}'),
        ("not UTF-8", b"\xff\xfe{"),
        ("entries not a list", _file(entries={"a": 1})),
    ],
)
def test_unusable_files_are_none_never_an_exception(server: LocalHub, case: str, content: bytes) -> None:
    repo = "OV/broken-" + re.sub(r"[^a-z0-9]+", "-", case)
    _upload(server, repo, content)
    read = load_status(Hub(server.url, TOKEN), repo)  # neither RecursionError nor Failure
    assert read.status is None and read.repaired and read.problems, read
    assert read_status(Hub(server.url, TOKEN), repo) is None


def test_status_command_on_a_damaged_file_prints_what_is_valid(
    server: LocalHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.cli.app import app

    _upload(
        server,
        "OV/naive-status",
        _file(_entry_json(), _entry_json(source="z-lab/Naive-DFlash", last_checked="2026-11-30T12:00:00")),
    )
    _upload(server, "OV/deep-status", b"[" * 100_000 + b"]" * 100_000)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    runner = CliRunner()
    table = runner.invoke(app, ["status", "--repo", "OV/naive-status", "--endpoint", server.url])
    assert table.exit_code == 0 and table.exception is None, table.output
    # The table lists what is valid; the log (stderr) names what was dropped and why.
    assert "z-lab/Qwen3-Tiny-DFlash-b16" in table.stdout and "Naive-DFlash" not in table.stdout
    assert "entry 1 (z-lab/Naive-DFlash): last_checked: Input should have timezone info: dropped" in table.stderr
    deep = runner.invoke(app, ["status", "--repo", "OV/deep-status", "--endpoint", server.url])
    assert deep.exit_code == 1 and not isinstance(deep.exception, RecursionError), deep.output


def _recipe(namespace: str = NS, name: str = "dflash"):
    recipe = fast_recipe()
    return recipe.model_copy(
        update={"name": name, "publish": recipe.publish.model_copy(update={"namespace": namespace})}
    )


def test_entries_may_only_name_the_recipes_own_repos() -> None:
    recipe = _recipe()
    own = published(revision="c" * 40)
    assert foreign_repos(own, recipe.publish) is None  # DRAFT/TARGET are what naming gives its source and target
    victim = own.model_copy(
        update={
            "source": "z-lab/Other-DFlash",
            "draft_repo": "victim/Other-int4-ov",
            "target_repo": "victim/Qwen3-Tiny-int4-ov",
            "repo_shas": {"victim/Other-int4-ov": "1" * 40},
        }
    )
    assert "victim/Other-int4-ov" in foreign_repos(victim, recipe.publish)
    swapped = own.model_copy(update={"source": "z-lab/Another-DFlash"})  # our repo, under another source's name
    assert "does not publish for it" in foreign_repos(swapped, recipe.publish)
    extra = own.model_copy(update={"repo_shas": {**own.repo_shas, f"{NS}/x": "3" * 40}})
    assert "does not name" in foreign_repos(extra, recipe.publish)
    failed = problem_entry(
        victim.source, "d" * 40, "failed", "export", fingerprints=Fingerprints("tc", "rc"), now=NOW, previous=victim
    )  # a failure carrying the foreign pair over
    status = status_of(
        own,
        victim,
        failed.model_copy(update={"source": "z-lab/Third-DFlash"}),
        collection_url="https://evil.example/phish",
        collection_title="T",
    )
    read = vetted(StatusRead(status), recipe)
    assert [e.source for e in read.status.entries] == [own.source] and read.repaired
    assert read.status.collection_url is None and read.status.published_pairs() == [own.pair()]
    other = vetted(StatusRead(status_of(own)), _recipe(name="dspark"))
    assert other.status is None and "dspark" in other.problems[0]  # another recipe's file is not our memory


def test_a_remembered_publish_must_agree_with_the_record() -> None:
    from tests.records import build_record

    built = build_record(speedups=(1.2, 1.9))
    honest = published_entry(
        built,
        draft_repo=DRAFT,
        target_repo=TARGET,
        fingerprints=Fingerprints("tc", "rc", "card"),
        now=NOW,
        repo_shas={DRAFT: "1" * 40, TARGET: "2" * 40},
    )
    assert agrees(honest, built)
    assert not agrees(honest, None)
    assert not agrees(honest.model_copy(update={"speedup": 9.9}), built)  # made-up figures
    assert not agrees(honest.model_copy(update={"revision": "f" * 40}), built)  # another revision
    assert not agrees(honest.model_copy(update={"source": "z-lab/Other-DFlash"}), built)  # another source


def test_non_finite_figures_become_null_and_the_file_is_strict_json() -> None:
    from tests.records import build_record, record_data

    data = record_data()
    data["validation"]["accept_length"] = float("nan")
    for run in data["validation"]["runs"]:
        run["speedup"] = float("inf")
    built = build_record().model_validate(data)
    entry = published_entry(
        built, draft_repo=DRAFT, target_repo=TARGET, fingerprints=Fingerprints("tc", "rc", None), now=NOW
    )
    assert entry.accept_length is None and entry.speedup is None and entry.pair() is None
    text = status_of(entry).to_json_bytes()

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    assert json.loads(text, parse_constant=refuse)["entries"][0]["accept_length"] is None
    with pytest.raises(ValueError, match="finite"):
        StatusEntry.model_validate({**entry.model_dump(), "speedup": float("nan")})


def test_problem_reasons_are_visible_text() -> None:
    hostile = "weights only in pickle (a\u202egnp.bin\u200b\x1b[31m)"
    entry = problem_entry(
        "z-lab/X-DFlash", "c" * 40, "skipped", hostile, fingerprints=Fingerprints("tc", "rc"), now=NOW
    )
    assert entry.reason == "weights only in pickle (agnp.bin[31m)"
    assert (
        len(
            problem_entry(
                "z-lab/X-DFlash", None, "failed", "x" * 5000, fingerprints=Fingerprints("tc", "rc"), now=NOW
            ).reason
        )
        == MAX_REASON_CHARS
    )


def test_a_repaired_file_is_written_back(server: LocalHub) -> None:
    from bot.status.sync import load_memory, publish_status

    recipe = _recipe("Repair")
    repo = recipe.status_repo_id
    _upload(
        server,
        repo,
        _file(
            _entry_json(
                source="z-lab/Naive-DFlash",
                last_checked="2026-11-30T12:00:00",
                draft_repo=None,
                target_repo=None,
                repo_shas={},
            ),
            namespace="Repair",
            **{"collection_title": None},
        ),
    )
    memory = load_memory(Hub(server.url, TOKEN), recipe, fingerprints=Fingerprints.of(recipe, toolchain="tc"), now=NOW)
    assert memory.repaired and memory.status is not None and memory.status.entries == ()
    result = publish_status(Hub(server.url, TOKEN), recipe, memory, [], watched=None, committed=False)
    assert result.commit is not None  # the same merged content, yet written: the Hub's copy was damaged
    read = load_status(Hub(server.url, TOKEN), repo, recipe)
    assert not read.repaired and read.status is not None and read.status.entries == ()


def test_status_repo_and_collection_are_per_recipe_by_default(tmp_path) -> None:
    from bot.core.errors import RecipeError
    from bot.core.recipe import load_recipe

    first, second = _recipe("Shared"), _recipe("Shared", name="dspark")
    assert first.status_repo_id == "Shared/dflash-bot-status"  # the default recipe keeps its old status repo
    assert second.status_repo_id == "Shared/dspark-bot-status"
    assert first.collection_title != second.collection_title and "dspark" in second.collection_title
    # Names the Hub would fold together, or that do not fit a repo name, get a hash: still one per recipe.
    names = ["dflash", "DFlash", "My Recipe", "my-recipe", "x" * 80, "x" * 81, "dflash-h0123456789ab", ""]
    repos = {_recipe("Shared", name=name).status_repo_id.lower() for name in names}
    titles = {_recipe("Shared", name=name).collection_title for name in names}
    assert len(repos) == len(titles) == len(names)
    assert all(len(title) <= 60 for title in titles)
    # An explicit setting still wins (two recipes share a status repo only when told to).
    told = first.model_copy(
        update={
            "publish": first.publish.model_copy(
                update={
                    "status_repo": "{namespace}/{recipe}-memory",
                    "collection": first.publish.collection.model_copy(update={"title": "Mine"}),
                }
            )
        }
    )
    assert told.status_repo_id == "Shared/dflash-memory" and told.collection_title == "Mine"
    path = tmp_path / "bad.yaml"
    text = (Path(__file__).resolve().parents[2] / "workflows" / "dflash.yaml").read_text()
    path.write_text(text.replace("  collection:\n", '  status_repo: "{namespace.__class__}/x"\n  collection:\n'))
    with pytest.raises(RecipeError, match="status repo template"):
        load_recipe(path)


@pytest.mark.parametrize(
    "reason",
    [
        "export-target: target export failed (exit -9: killed by SIGKILL from outside the bot (not its memory guard, "
        "time limit or shutdown, nor the kernel's OOM killer; its processes peaked at 1.2 GB anonymous))",
        "export-target: target export failed (exit -9: killed by SIGKILL from the kernel's OOM killer, the machine "
        "ran out of memory)",
        "export-target: target export failed (exit 1): OSError: [Errno 28] No space left on device",
        "export-draft: draft export failed (exit 1): ModuleNotFoundError: No module named 'optimum'",
    ],
    ids=["killed", "oom", "disk-full", "missing-tool"],
)
def test_a_runners_fault_remembered_at_a_source_stage_is_examined_again(reason) -> None:
    """Issue 29: a healthy source whose target export died of the runner was skipped for `recheck_after`. The
    reason shows it was the runner's, also in a memory an older bot wrote with the stage: examined next run."""
    entry = skipped(status="failed", stage=reason.split(":")[0], reason=reason)
    week = dt.timedelta(days=7)
    assert needs_recheck(entry, revision="c" * 40, fingerprints=Fingerprints("tc", "rc"), now=NOW, recheck_after=week,
                         recheck=False)  # fmt: skip
    crash = entry.model_copy(update={"reason": "export-target: target export failed (exit 1): ValueError: bad rope"})
    assert not needs_recheck(crash, revision="c" * 40, fingerprints=Fingerprints("tc", "rc"), now=NOW,
                             recheck_after=week, recheck=False)  # the source's: remembered  # fmt: skip


def test_a_target_export_killed_from_outside_is_reported_as_the_runners_and_retried() -> None:
    """The outcome the pipeline records for it (`as_runners`, as `build_and_hand_off` applies it) has no stage."""
    from bot.core.errors import as_runners

    killed = Failure(
        "target export failed (exit -9: killed by SIGKILL from outside the bot (not its memory guard, time limit or "
        "shutdown, nor the kernel's OOM killer; its processes peaked at 1.2 GB anonymous)): ",
        subject="Qwen/Qwen3-Tiny",
        stage=Stage.EXPORT_TARGET,
    )
    outcome = Outcome.of_error("z-lab/Broken-DFlash", "c" * 40, as_runners(killed))
    assert outcome.stage is None and "the runner's fault (killed from outside)" in outcome.reason, outcome
    assert examined_again(outcome)
