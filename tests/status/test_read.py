"""Reading `status.json` (`bot.status.read`): bounded parsing (size, depth, schema) that never raises, invalid or
duplicate entries dropped with a reason each, and `vetted` dropping entries that name repos the recipe does not
publish (or a file written for another recipe)."""

from __future__ import annotations

import datetime as dt
import json

from bot.status.memory import SCHEMA_VERSION, STATUS_JSON, StatusEntry, StatusFile
from bot.status.read import MAX_STATUS_BYTES, StatusRead, foreign_repos, parse_status, vetted
from tests.conftest import fast_recipe

RECIPE = fast_recipe()
NS = RECIPE.publish.namespace
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
SOURCE, TARGET = "z-lab/Qwen3-Tiny-DFlash-b16", "Qwen/Qwen3-Tiny"
DRAFT, TARGET_OUT = f"{NS}/Qwen3-Tiny-DFlash-b16-int4-ov", f"{NS}/Qwen3-Tiny-int4-ov"


def entry(source: str = SOURCE, **changes) -> StatusEntry:
    made = StatusEntry(
        source=source,
        revision="a" * 40,
        status="published",
        target=TARGET,
        target_revision="b" * 40,
        draft_repo=DRAFT,
        target_repo=TARGET_OUT,
        repo_shas={DRAFT: "1" * 40, TARGET_OUT: "2" * 40},
        accept_length=4.0,
        speedup=1.8,
        toolchain_fingerprint="tc",
        recipe_fingerprint="rc",
        last_checked=NOW,
    )
    return made.model_copy(update=changes)


def file_bytes(entries: list, **header) -> bytes:
    data = {"schema_version": SCHEMA_VERSION, "recipe": RECIPE.name, "namespace": NS, **header, "entries": entries}
    return json.dumps(data).encode()


def as_json(made: StatusEntry) -> dict:
    return made.model_dump(mode="json")


def test_a_whole_file_parses_with_entries_sorted_and_no_problems():
    later = entry("z-lab/Zeta-DFlash", status="skipped", draft_repo=None, target_repo=None, repo_shas={})
    read = parse_status(file_bytes([as_json(later), as_json(entry())]))
    assert read.problems == () and not read.repaired
    assert read.status is not None
    assert [e.source for e in read.status.entries] == [SOURCE, "z-lab/Zeta-DFlash"]
    assert read.status.entries[0] == entry()


def test_an_unusable_file_gives_no_status_and_one_reason():
    cases = {
        b"x" * (MAX_STATUS_BYTES + 1): "over the",
        b"{not json": "is not JSON",
        b"\xff\xfe": "is not JSON",
        b"[" * 100_000 + b"]" * 100_000: "nested too deeply",
        json.dumps({"schema_version": 99, "entries": []}).encode(): "schema version '99'",
        json.dumps([1, 2]).encode(): "schema version 'None'",
        file_bytes({"a": 1}): "`entries` is not a list",
        file_bytes([], recipe={"nested": 1}): "header field is not a plain value",
        file_bytes([], namespace="has space"): "invalid header (namespace",
    }
    for data, why in cases.items():
        read = parse_status(data)
        assert read.status is None, why
        assert len(read.problems) == 1 and why in read.problems[0], (why, read.problems)
        assert read.repaired


def test_invalid_and_duplicate_entries_are_dropped_each_with_its_reason():
    naive = as_json(entry("z-lab/Naive")) | {"last_checked": "2026-11-30T12:00:00"}  # no time zone
    deep = as_json(entry("z-lab/Deep")) | {"repo_shas": {DRAFT: {"nested": "x"}}}
    items = [as_json(entry()), naive, "text", deep, as_json(entry(SOURCE.upper())), as_json(entry("z-lab/Ok"))]
    read = parse_status(file_bytes(items))
    assert read.status is not None
    assert [e.source for e in read.status.entries] == ["z-lab/Ok", SOURCE]  # sorted by source
    assert len(read.problems) == 4
    assert read.problems[0].startswith("entry 1 (z-lab/Naive): last_checked:")
    assert read.problems[1] == "entry 2: not an entry object of plain fields"
    assert read.problems[2] == "entry 3 (z-lab/Deep): not an entry object of plain fields"
    assert read.problems[3] == f"entry 4 ({SOURCE.upper()}): a second entry for the same source"


def test_vetted_keeps_own_entries_and_drops_foreign_repos():
    own = entry()
    official = entry(
        "z-lab/Official", draft_repo=f"{NS}/Official-int4-ov", target_repo=f"OpenVINO/{TARGET.split('/')[1]}-int4-ov"
    )
    official = official.model_copy(update={"repo_shas": {}})
    foreign = entry("z-lab/Other", draft_repo="evil/Other-int4-ov", target_repo=TARGET_OUT, repo_shas={})
    half = entry("z-lab/Half", target_repo=None, repo_shas={})
    status = StatusFile(recipe=RECIPE.name, namespace=NS, entries=(own, official, foreign, half))
    read = vetted(StatusRead(status), RECIPE)
    assert read.status is not None
    # The official entry's target is the official int4 repo of its target (`publish.official_targets`): its own.
    assert [e.source for e in read.status.entries] == [SOURCE, "z-lab/Official"]
    assert len(read.problems) == 2
    assert read.problems[0].startswith("entry z-lab/Other: names evil/Other-int4-ov, which this recipe does not")
    assert read.problems[1] == "entry z-lab/Half: names a draft repo without a target repo, or the reverse"


def test_foreign_repos_accepts_an_official_target_and_refuses_stray_shas():
    publish = RECIPE.publish
    official_repo = publish.official_target_repos(TARGET)[0]
    assert foreign_repos(entry(target_repo=official_repo, repo_shas={}), publish) is None
    wrong = foreign_repos(entry(target_repo="OpenVINO/Other-int4-ov", repo_shas={}), publish)
    assert wrong == (
        "names OpenVINO/Other-int4-ov, which this recipe does not publish for it "
        f"(expected {TARGET_OUT} or {official_repo})"
    )
    stray = entry(repo_shas={DRAFT: "1" * 40, "evil/x": "3" * 40})
    assert foreign_repos(stray, publish) == "records shas of repos it does not name: evil/x"


def test_vetted_refuses_a_file_for_another_recipe_or_namespace_and_a_foreign_collection():
    other = StatusFile(recipe=RECIPE.name, namespace="someone-else", entries=(entry(),))
    read = vetted(StatusRead(other, ("earlier",)), RECIPE)
    assert read.status is None
    assert read.problems[0] == "earlier" and "give each recipe its own publish.status_repo" in read.problems[1]
    ours = StatusFile(recipe=RECIPE.name, namespace=NS, collection_url="https://huggingface.co/collections/evil/x-123")
    read = vetted(StatusRead(ours), RECIPE)
    assert read.status is not None and read.status.collection_url is None
    assert read.problems == (
        f"collection_url 'https://huggingface.co/collections/evil/x-123' is not a collection of {NS}",
    )
    assert STATUS_JSON == "status.json"


def test_a_version_1_file_is_still_read_and_a_version_2_entry_keeps_its_place_on_the_map():
    """Schema 2 (issue 32) adds each entry's layout, group and waits-for; the memory a version-1 bot wrote is still
    read (no source is examined again for the upgrade), and is written back as the current version (3: last run)."""
    v1 = {key: value for key, value in as_json(entry()).items() if key not in ("layout", "group", "waits_for")}
    read = parse_status(
        json.dumps({"schema_version": 1, "recipe": RECIPE.name, "namespace": NS, "entries": [v1]}).encode()
    )
    assert read.problems == () and read.status is not None and read.status.entries == (entry(),)
    assert (
        json.loads(read.status.model_copy(update={"schema_version": SCHEMA_VERSION}).to_json_bytes())["schema_version"]
        == 3
    )
    placed = entry(
        "RedHatAI/Qwen3-8B-speculator.dflash2",
        status="skipped",
        draft_repo=None,
        target_repo=None,
        repo_shas={},
        layout="speculators-dflash2",
        group="speculators",
        waits_for="an export that reads the speculators layout",
    )
    read = parse_status(file_bytes([as_json(placed)]))
    assert read.problems == () and read.status is not None and read.status.entries == (placed,)
