"""The status page (`bot.status.page`): the README, status.json and chart rendered from a small `StatusFile`, equal
bytes for an equal status, source text made inert Markdown, and the renderer fingerprint following the template's
text (checked on a copy of the templates folder)."""

from __future__ import annotations

import datetime as dt
import json
import shutil

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
        "published",
        "",
        "aaaaaaa",
        "[Qwen/Qwen3-Tiny](https://hub/Qwen/Qwen3-Tiny)",
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
    assert row.count(" | ") == 11  # twelve cells: no `|` from the reason splits the row
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
