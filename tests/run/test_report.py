"""The run report (`bot.run.report`): its JSON form and file, the Markdown and terminal tables built from outcomes
(source text escaped), the exit code, and `build_cost_note`."""

from __future__ import annotations

import json

from bot.core.outcome import Outcome, Status
from bot.core.record import Repos, StageResources
from bot.publish.publisher import PublishResult
from bot.run.report import RunReport, build_cost_note

SHA = "0123456789" * 4


def sample() -> RunReport:
    report = RunReport(hub_requests=7, deferred=["z/Later"])
    report.add(Outcome("z/A", SHA, Status.PUBLISHED, "new build", ["ns/A-int4-ov", "ns/T-int4-ov"]))
    report.add(Outcome("z/B", None, Status.SKIPPED, "gated", stage="discover"))
    report.add(Outcome("z/C", SHA, Status.FAILED, "export crashed"))
    return report


def test_json_report_counts_each_status_and_round_trips(tmp_path):
    report = sample()
    report.commits.append({"repo": "ns/A-int4-ov", "commit": "f" * 40})
    path = tmp_path / "report.json"
    report.write(path)
    assert not (tmp_path / "report.json.partial").exists()
    data = json.loads(path.read_text())
    assert data["counts"] == {"published": 1, "up-to-date": 0, "skipped": 1, "failed": 1, "planned": 0}
    assert data["hub_requests"] == 7 and data["deferred"] == ["z/Later"]
    assert data["outcomes"][1] == {
        "source": "z/B",
        "revision": None,
        "status": "skipped",
        "reason": "gated",
        "repos": [],
        "stage": "discover",
    }
    back = RunReport.from_dict(data)
    assert back.outcomes == report.outcomes
    assert back.commits == report.commits and back.hub_requests == 7 and back.deferred == ["z/Later"]


def test_exit_code_is_one_only_when_something_failed():
    report = sample()
    assert [o.source for o in report.failed] == ["z/C"] and report.exit_code == 1
    calm = RunReport(outcomes=[o for o in report.outcomes if o.status != Status.FAILED])
    assert calm.exit_code == 0  # a skip is no failure


def test_markdown_table_links_repos_and_escapes_source_text():
    report = RunReport(hub_requests=3, status_page="https://hub/datasets/ns/status", collection="https://hub/c")
    report.add(Outcome("z/A|x", SHA, Status.PUBLISHED, "<b>[bold]</b>\nnext", ["ns/A"]))
    text = report.markdown("https://hub")
    lines = text.splitlines()
    assert lines[0] == "| source | revision | outcome | reason | repos |"
    assert lines[2] == (
        "| z/A\\|x | 0123456 | published | &lt;b&gt;\\[bold\\]&lt;/b&gt; next | [ns/A](https://hub/ns/A) |"
    )
    assert "Hub requests: 3; commits: 0" in lines
    assert lines[-1] == "Status page: https://hub/datasets/ns/status · Collection: https://hub/c"


def test_add_published_keeps_commits_and_both_repos():
    report = RunReport()
    repos = Repos(draft="ns/D", target="ns/T")
    result = PublishResult(Status.PUBLISHED, repos, [("ns/T", "1" * 40), ("ns/D", "2" * 40)])
    report.add_published("z/A", SHA, result, "published")
    assert report.commits == [{"repo": "ns/T", "commit": "1" * 40}, {"repo": "ns/D", "commit": "2" * 40}]
    assert report.outcomes == [Outcome("z/A", SHA, Status.PUBLISHED, "published", ["ns/D", "ns/T"])]


def test_print_table_shows_markup_as_text(capsys):
    report = RunReport(dry_run=True, hub_requests=2)
    report.add(Outcome("z/[red]A", SHA, Status.PLANNED, "build on standard"))
    report.print_table()
    out = capsys.readouterr().out
    assert "dflash-bot run (dry run)" in out
    assert "z/[red]A" in out and "planned" in out
    assert "Hub requests: 2; commits: 0" in out


def test_build_cost_note_shows_memory_parts_when_recorded():
    full = StageResources(
        seconds=125.4,
        peak_rss_bytes=12_300_000_000,
        peak_anon_bytes=9_000_000_000,
        peak_file_bytes=3_300_000_000,
        peak_disk_bytes=40_000_000_000,
    )
    assert build_cost_note(full) == (
        "built in 125 s, peak 12.3 GB memory (9.0 GB anonymous, 3.3 GB file-backed) and 40.0 GB disk"
    )
    old = StageResources(seconds=60.0, peak_rss_bytes=2_000_000_000)
    assert build_cost_note(old) == "built in 60 s, peak 2.0 GB memory and 0.0 GB disk"
