"""The status page (`bot.status.page`): the README, status.json and chart rendered from a small `StatusFile`, equal
bytes for an equal status, source text made inert Markdown, and the renderer fingerprint following the template's
text (checked on a copy of the templates folder)."""

from __future__ import annotations

import datetime as dt
import json
import shutil

from bot.core.fingerprints import Fingerprints
from bot.status import page
from bot.status.memory import CHART, README, STATUS_JSON, StatusEntry, StatusFile

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
NS = "OV"
DRAFT, TARGET = f"{NS}/Qwen3-Tiny-DFlash-b16-int4-ov", f"{NS}/Qwen3-Tiny-int4-ov"
PNG = b"\x89PNG\r\n\x1a\n"


def status() -> StatusFile:
    published = StatusEntry(
        source="z-lab/Qwen3-Tiny-DFlash-b16",
        revision="a" * 40,
        status="published",
        kind="dflash",
        target="Qwen/Qwen3-Tiny",
        target_revision="b" * 40,
        draft_repo=DRAFT,
        target_repo=TARGET,
        accept_length=4.0,
        speedup=1.8,
        recommended_k=3,
        profile="default",
        toolchain_fingerprint="tc",
        recipe_fingerprint="rc",
        last_built=NOW,
        last_checked=NOW,
    )
    failed = StatusEntry(
        source="evil/x_y",
        revision="c" * 40,
        status="failed",
        reason="<script>alert(1)</script> | [click](http://x)",
        stage="export-draft",
        toolchain_fingerprint="tc",
        recipe_fingerprint="rc",
        last_checked=NOW,
    )
    return StatusFile(
        recipe="dflash",
        namespace=NS,
        collection_title="DFlash drafts",
        collection_url="https://hub/collections/OV/dflash-1",
        entries=(published, failed),
    )


def test_render_files_gives_readme_json_and_chart_equal_for_equal_status():
    files = page.render_files(status(), endpoint="https://hub")
    assert sorted(files) == sorted([README, STATUS_JSON, CHART])
    assert files[CHART].startswith(PNG)
    assert json.loads(files[STATUS_JSON])["entries"][0]["draft_repo"] == DRAFT
    assert StatusFile.model_validate_json(files[STATUS_JSON]) == status()
    assert page.render_files(status(), endpoint="https://hub") == files


def test_readme_lists_each_entry_with_links_counts_and_figures():
    readme = page.render_readme(status(), endpoint="https://hub/")
    assert readme.startswith("---\n") and "pretty_name: dflash-bot status (dflash)" in readme
    assert "**1 published · 0 skipped · 1 failed**, in `OV`." in readme
    assert "All published repos are in the collection [DFlash drafts](https://hub/collections/OV/dflash-1)." in readme
    row = next(line for line in readme.splitlines() if line.startswith("| [z-lab/Qwen3-Tiny-DFlash-b16]"))
    cells = [cell.strip() for cell in row.strip("|").split(" | ")]
    assert cells == [
        "[z-lab/Qwen3-Tiny-DFlash-b16](https://hub/z-lab/Qwen3-Tiny-DFlash-b16)",
        "z-lab DFlash draft",
        "[Qwen/Qwen3-Tiny](https://hub/Qwen/Qwen3-Tiny)",
        "published",
        "",
        "",
        "aaaaaaa",
        f"[{DRAFT}](https://hub/{DRAFT})<br>[{TARGET}](https://hub/{TARGET})",
        "4.00",
        "1.80×",
        "3",
        "default",
        "2026-11-30 12:00 UTC",
        "2026-11-30 12:00 UTC",
    ]
    assert f"- [{DRAFT}](https://hub/{DRAFT}#measure-it-on-your-machine)" in readme


def test_source_text_reaches_the_readme_inert():
    readme = page.render_readme(status(), endpoint="https://hub")
    row = next(line for line in readme.splitlines() if line.startswith("| [evil/x\\_y]"))
    assert "<script>" not in readme
    assert "export-draft: &lt;script&gt;alert\\(1\\)&lt;/script&gt; \\| \\[click\\]\\(http://x\\)" in row
    assert row.count(" | ") == 13  # fourteen cells: no `|` from the reason splits the row
    assert page.md_text("a\u202eb\nc") == "ab c"  # bidi override removed, one line
    assert page.md_link("o/n#x", "https://hub", repo_type="dataset") == "[o/n#x](https://hub/datasets/o/n%23x)"


def test_renderer_fingerprint_follows_the_template_text(tmp_path, monkeypatch):
    before = page.renderer_fingerprint()
    assert before == page.renderer_fingerprint()
    copy = tmp_path / "templates"
    shutil.copytree(page.TEMPLATES, copy)
    monkeypatch.setattr(page, "TEMPLATES", copy)
    assert page.rendered_by()[0] == copy / page.STATUS_TEMPLATE
    assert page.renderer_fingerprint() == before  # the same bytes, the same fingerprint
    template = copy / page.STATUS_TEMPLATE
    template.write_text(template.read_text() + "\nEdited footer.\n")
    assert page.renderer_fingerprint() != before
    assert page.render_readme(status(), endpoint="https://hub").endswith("Edited footer.\n")


def test_the_page_is_the_map_drafts_by_format_with_targets_and_what_each_skip_waits_for():
    """Issue 32: counts per format group at the top, a section per group, and for every skip its layout, its target
    and the capability it waits for; a version-1 entry (no layout field) is placed by its reason."""
    from bot.core import draft_formats
    from bot.status.memory import problem_entry

    reason = draft_formats.skip_reason(
        "speculators-dspark", "Qwen/Qwen3-8B", "speculators_model_type 'dspark' (architectures DSparkDraftModel)"
    )
    waiting = problem_entry(
        "RedHatAI/Qwen3-8B-speculator.dspark",
        "d" * 40,
        "skipped",
        f"classify: {reason}",
        fingerprints=Fingerprints("tc", "rc"),
        now=NOW,
        stage="classify",
    )
    assert (waiting.layout, waiting.group, waiting.target) == ("speculators-dspark", "speculators", "Qwen/Qwen3-8B")
    assert waiting.waits_for == draft_formats.SPECULATORS_NEED
    old = waiting.model_copy(update={"source": "RedHatAI/Old-speculator.dspark", "layout": None, "group": None})
    mapped = status().model_copy(update={"entries": (*status().entries, waiting, old)})
    readme = page.render_readme(mapped, endpoint="https://hub")
    assert "| [DFlash](#dflash) | 1 | 1 | 0 | 0 |" in readme
    assert "| [speculators](#speculators) | 2 | 0 | 2 | 0 |" in readme
    assert "| [other](#other) | 1 | 0 | 0 | 1 |" in readme
    speculators = readme.split("## speculators", 1)[1].split("## other", 1)[0]
    for source in ("RedHatAI/Qwen3-8B-speculator.dspark", "RedHatAI/Old-speculator.dspark"):
        row = next(line for line in speculators.splitlines() if line.startswith(f"| [{source}]"))
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert cells[1:5] == [
            "speculators-format DSpark draft",
            "[Qwen/Qwen3-8B](https://hub/Qwen/Qwen3-8B)",
            "skipped",
            page.md_text(draft_formats.SPECULATORS_NEED),
        ]
    data = json.loads(page.render_files(mapped, endpoint="https://hub")[STATUS_JSON])
    (entry,) = [e for e in data["entries"] if e["source"] == "RedHatAI/Qwen3-8B-speculator.dspark"]
    assert (entry["layout"], entry["group"], entry["target"]) == ("speculators-dspark", "speculators", "Qwen/Qwen3-8B")
    assert entry["waits_for"] == draft_formats.SPECULATORS_NEED and data["schema_version"] == 3


def test_drafts_seen_not_approved_get_a_bounded_section_and_never_push_a_published_pair_off_the_page():
    """Issue 39: hundreds of strangers the radar saw are listed apart (at most MAX_SEEN_ROWS, the rest counted), each
    with the dispatch that would build it; the published pair keeps its line and the counts leave them out."""
    seen = tuple(
        StatusEntry(
            source=f"spam{index:03d}/Qwen3-Spam-DFlash-b16",
            revision="d" * 40,
            status="skipped",
            reason=f"seen, not approved: author 'spam{index:03d}' is not among the recipe's trusted draft authors "
            "(watch.trust.draft_authors); to build it, add it there, or dispatch this repo once (...)",
            stage="approve",
            kind="dflash",
            toolchain_fingerprint="tc",
            recipe_fingerprint="rc",
            last_checked=NOW,
        )
        for index in range(page.MAX_SEEN_ROWS + 50)
    )
    flooded = status().model_copy(update={"entries": (*status().entries, *seen)})
    readme = page.render_readme(flooded, endpoint="https://hub")
    assert "**1 published · 0 skipped · 1 failed**" in readme and f"**{len(seen)} seen, not approved**" in readme
    assert "[z-lab/Qwen3-Tiny-DFlash-b16](https://hub/z-lab/Qwen3-Tiny-DFlash-b16)" in readme
    assert readme.count("`dflash-bot run --only spam") == page.MAX_SEEN_ROWS
    assert "… and 50 more in [status.json](status.json)." in readme
    section = readme.split("## Seen, not approved")[1]
    assert (
        "| [spam000/Qwen3-Spam-DFlash-b16](https://hub/spam000/Qwen3-Spam-DFlash-b16) | spam000 | dflash |" in section
    )
    assert "author &#x27;spam000&#x27; is not among the recipe&#x27;s trusted draft authors \\(watch" in section
    # The strangers are not rows of the map's format tables.
    assert "spam000" not in readme.split("## Seen, not approved")[0]
