"""The GitHub Actions fan-out, simulated: plan, build and publish as separate processes with their own environments.

Each job is `python -m bot.cli ...` in a subprocess with `GITHUB_ACTIONS=true` and its own `GITHUB_OUTPUT` and
`GITHUB_STEP_SUMMARY` files; bundles pass from build to publish as folders, like artifacts. A `sitecustomize`
probe on `PYTHONPATH` records, for every Python process a job starts (the CLI and the export and GenAI children),
whether any Hub write token was in its environment and whether it loaded a model library. The result on the
local hub must equal what `dflash-bot run` publishes on a second, identically seeded hub.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from bot.core.errors import JobError
from bot.core.naming import draft_output_repo, target_output_repo
from bot.core.outcome import Outcome, Status
from bot.core.runners import RunnerSettings
from bot.core.settings import Settings
from bot.discover.candidates import Candidate
from bot.hub.client import Hub
from bot.plan.job import BuildJob
from bot.plan.sizing import BuildTime, Pair, choose_runner, pair_of
from bot.plan.step import RunOptions
from bot.run import demo
from bot.run.actions import Actions, summary_markdown
from bot.run.fanout import parse_jobs, plan_matrix
from bot.run.handoff import artifact_name
from bot.run.report import RunReport
from tests.conftest import HUB_ORGS, SEEDED_KIND, SEEDED_REPOS, fast_recipe

TOKEN = "hf_actions_write_token_0123456789"
READER = "hf_actions_read_token_9876543210"
RECIPE = fast_recipe(num_assistant_tokens=[3], repeats=1)
REAL_BUILDS = ("workflow", "single_run")  # slow (tests/conftest.py): both build the demo pair for real
DRAFT_OUT = draft_output_repo(RECIPE.publish, demo.DRAFT_REPO, "int4")
TARGET_OUT = target_output_repo(RECIPE.publish, demo.TARGET_REPO)
MODEL_LIBRARIES = ("torch", "openvino", "transformers", "optimum", "safetensors", "openvino_genai")

PROBE = textwrap.dedent(
    """
    import atexit, json, os, sys
    _dir = os.environ.get("DFLASH_PROBE_DIR")
    _secret = os.environ.get("DFLASH_PROBE_SECRET", "")
    if _dir:
        _record = {"pid": os.getpid(), "argv": sys.argv[:3],
                   "token_names": sorted(k for k in os.environ if k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")),
                   "secret_in_env": bool(_secret) and any(_secret in v for k, v in os.environ.items()
                                                          if k != "DFLASH_PROBE_SECRET")}
        def _write():
            _record["libraries"] = sorted(m for m in MODEL_LIBRARIES if m in sys.modules)
            with open(os.path.join(_dir, f"{os.getpid()}.json"), "w") as f:
                json.dump(_record, f)
        atexit.register(_write)
""".replace("MODEL_LIBRARIES", repr(MODEL_LIBRARIES))
)


# ---- pure logic: runner classes, job records, the Actions helper outside Actions ----


def test_runner_class_is_the_smallest_that_fits_the_estimated_peak():
    runners = RunnerSettings.model_validate(
        {
            "classes": [
                {
                    "name": "large",
                    "max_memory_bytes": 64 * 10**9,
                    "max_disk_bytes": 200 * 10**9,
                    "runs_on": ["self-hosted", "large"],
                },
                {
                    "name": "standard",
                    "max_memory_bytes": 15 * 10**9,
                    "max_disk_bytes": 30 * 10**9,
                    "runs_on": "ubuntu-latest",
                },
            ]
        }
    )
    assert [c.name for c in runners.classes] == ["standard", "large"]
    assert choose_runner(Pair(1 * 10**9, 8 * 10**9), runners)[0].name == "standard"
    assert choose_runner(Pair(2 * 10**9, 16 * 10**9), runners)[0].runs_on == ["self-hosted", "large"]
    assert choose_runner(Pair(5 * 10**9, 250 * 10**9), runners)[0] is None
    assert RECIPE.runners.classes[0].runs_on == "ubuntu-latest"  # the default recipe's one class
    with pytest.raises(ValueError, match="unique"):
        RunnerSettings.model_validate(
            {
                "classes": [
                    {"name": "a", "max_memory_bytes": 1, "max_disk_bytes": 1, "runs_on": "x"},
                    {"name": "a", "max_memory_bytes": 2, "max_disk_bytes": 1, "runs_on": "y"},
                ]
            }
        )
    with pytest.raises(ValueError, match="256"):
        RunnerSettings.model_validate({"max_entries": 300})


def test_build_job_records_round_trip_and_reject_what_plan_never_writes():
    candidate = Candidate(
        repo_id="z-lab/A-DFlash",
        revision="a" * 40,
        kind="dflash",
        draft_format="stateful",
        target_repo="Qwen/A",
        target_revision="b" * 40,
        target_model_type="qwen3",
        target_is_vlm=False,
        draft_bytes=100,
        target_bytes=23,
        profile="default",
        draft_files=("config.json",),
        target_files=("config.json",),
        download_bytes=200,
    )
    job = BuildJob(candidate=candidate, reasons=("new",), draft_repo="ns/A-DFlash-int4-ov", target_repo="ns/A-int4-ov")
    assert parse_jobs(job.model_dump_json()) == [job]
    assert parse_jobs(json.dumps([job.model_dump(mode="json")])) == [job]
    assert parse_jobs(
        json.dumps(
            {
                "jobs": [job.model_dump(mode="json")],
                "name": "A",
                "artifact": "a",
                "runner": "s",
                "runs_on": "x",
                "peak_bytes": 1,
            }
        )
    ) == [job]
    other_target = job.model_copy(update={"candidate": dataclasses.replace(candidate, target_revision="c" * 40)})
    with pytest.raises(JobError, match="one target revision"):
        parse_jobs(json.dumps([job.model_dump(mode="json"), other_target.model_dump(mode="json")]))
    data = job.model_dump(mode="json")

    def with_candidate(**fields) -> dict:
        return {**data, "candidate": {**data["candidate"], **fields}}

    for broken in (
        {**data, "extra": 1},
        {**data, "draft_repo": None, "target_repo": None},  # a local build's job: plan never writes one
        with_candidate(extra=1),
        with_candidate(draft_bytes="many"),
        with_candidate(draft_bytes=-1),
        with_candidate(repo_id="../../etc"),
        with_candidate(target_revision=None),
        ["not", "a", "job"],
        "not json",
    ):
        with pytest.raises(JobError):
            parse_jobs(broken if isinstance(broken, str) else json.dumps(broken))
    assert artifact_name("z-lab/Qwen3 Tiny:x") == "bundle-z-lab--Qwen3_Tiny_x"


def test_actions_helper_is_silent_outside_actions(tmp_path, capsys):
    report = RunReport(outcomes=[Outcome("a/b", "c" * 40, Status.FAILED, "boom")])
    for env in ({}, {"GITHUB_ACTIONS": "false", "GITHUB_OUTPUT": str(tmp_path / "out")}):
        actions = Actions(Settings.from_env(env))
        assert actions.mask_tokens() == []
        actions.report(report, title="t", endpoint="https://huggingface.co")
        actions.set_output("matrix", {"include": []})
    assert capsys.readouterr().out == "" and not (tmp_path / "out").exists()


def test_actions_helper_masks_annotates_and_summarises(tmp_path, capsys):
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(tmp_path / "out"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        "HF_TOKEN": "hf_secret",
        "HF_READ_TOKEN": "",
    }
    actions = Actions(Settings.from_env(env))
    assert actions.mask_tokens() == ["hf_secret"]
    report = RunReport(
        outcomes=[
            Outcome("a/b", "c" * 40, Status.FAILED, "export: 100% broken"),
            Outcome("a/d", "e" * 40, Status.PUBLISHED, "", ["ns/d-int4-ov", "ns/t-int4-ov"]),
        ],
        deferred=["a/z"],
    )
    actions.report(report, title="dflash-bot run", endpoint="https://huggingface.co", settings={"recipe": "dflash"})
    captured = capsys.readouterr()
    out = captured.out
    assert "::add-mask ::hf_secret" in captured.err  # stderr; the runner ignores the empty property list
    assert "::error title=dflash-bot%3A a/b failed::a/b@ccccccc: export: 100%25 broken" in out
    outputs = _read_outputs(tmp_path / "out")
    assert json.loads(outputs["published"]) == ["ns/d-int4-ov", "ns/t-int4-ov"]
    assert json.loads(outputs["failed"]) == ["a/b"]
    summary = (tmp_path / "summary").read_text()
    assert "[ns/d-int4-ov](https://huggingface.co/ns/d-int4-ov)" in summary
    assert "Deferred to the next run (1): a/z" in summary
    assert "GITHUB_OUTPUT" not in os.environ or os.environ["GITHUB_OUTPUT"] != env["GITHUB_OUTPUT"]
    assert summary_markdown(RunReport(dry_run=True), title="x", endpoint="e").startswith("## x (dry run)")


# ---- the three jobs as processes, against a local hub ----


def _read_outputs(path: Path) -> dict[str, str]:
    """Parse a GITHUB_OUTPUT file the way the runner does (name<<delimiter ... delimiter)."""
    outputs, lines = {}, path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        name, delimiter = lines[i].split("<<", 1)
        end = lines.index(delimiter, i + 1)
        outputs[name] = "\n".join(lines[i + 1 : end])
        i = end + 1
    return outputs


def _probes(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


@pytest.fixture(scope="module")
def hubs(tmp_path_factory):
    """Two identically seeded hubs: one for the simulated workflow, one for `dflash-bot run`."""
    from hubserver import LocalHub

    root = tmp_path_factory.mktemp("actions-hubs")
    with (
        LocalHub(root / "a", user="maintainer", token=TOKEN, orgs=HUB_ORGS) as a,
        LocalHub(root / "b", user="maintainer", token=TOKEN, orgs=HUB_ORGS) as b,
    ):
        for server, name in ((a, "a"), (b, "b")):
            demo.seed(server.url, TOKEN, root / f"seed-{name}", SEEDED_REPOS)
            server.add_token(READER, "reader")
        yield a, b, root


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("actions-run")
    (root / "probe-lib").mkdir()
    (root / "probe-lib" / "sitecustomize.py").write_text(PROBE, encoding="utf-8")
    recipe = root / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(RECIPE.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
    return root


def _job(
    workspace: Path, job: str, endpoint: str, args: list[str], secrets: dict[str, str], timeout: int = 300
) -> tuple[subprocess.CompletedProcess, dict[str, str], str, list[dict]]:
    """Run one workflow job as a process with its own environment, outputs, summary and probe folder."""
    folder = workspace / job
    (folder / "probe").mkdir(parents=True, exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if "TOKEN" not in k and not k.startswith(("GITHUB_", "RUNNER_"))}
    env = {
        **clean,
        **secrets,
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(folder / "output"),
        "GITHUB_STEP_SUMMARY": str(folder / "summary.md"),
        "HF_ENDPOINT": endpoint,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HOME": str(folder / "hf-home"),
        "PYTHONPATH": str(workspace / "probe-lib"),
        # The probe writes its record from inside every child; Landlock (tested in test_security) would refuse
        # that write, so these jobs run the children in their namespaces alone.
        "DFLASH_BOT_SANDBOX": "namespaces",
        "DFLASH_PROBE_DIR": str(folder / "probe"),
        "DFLASH_PROBE_SECRET": TOKEN,
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", *args, "--recipe", str(workspace / "recipe.yaml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=workspace,
    )
    summary = (folder / "summary.md").read_text() if (folder / "summary.md").exists() else ""
    return done, _read_outputs(folder / "output"), summary, _probes(folder / "probe")


@pytest.fixture(scope="module")
def workflow(hubs, workspace):
    """plan -> build (one process per matrix entry) -> publish, like watch.yml."""
    hub_a, _, _ = hubs
    plan, plan_out, plan_summary, plan_probe = _job(
        workspace,
        "plan",
        hub_a.url,
        ["plan", "--matrix", "--out", str(workspace / "plan.json")],
        {"HF_READ_TOKEN": READER},
    )
    assert plan.returncode == 0, plan.stderr[-3000:]
    matrix = json.loads(plan_out["matrix"])
    builds = []
    for entry in matrix["include"]:
        built = _job(
            workspace,
            f"build-{entry['artifact']}",
            hub_a.url,
            ["build", "--job", json.dumps(entry["jobs"]), "--out", str(workspace / "artifacts" / entry["artifact"])],
            {"HF_READ_TOKEN": READER},
        )
        builds.append(built)
    # watch.yml's publish job fetches one group's artifact at a time (`gh run download`): a `gh` of this test
    # copies it from the build jobs' uploads and logs each call.
    tools = workspace / "publish-tools"
    tools.mkdir(exist_ok=True)
    (tools / "gh").write_text(
        f"#!{sys.executable}\n"
        "import shutil, sys\n"
        "args = sys.argv[1:]\n"
        "opts = dict(zip(args[3::2], args[4::2]))\n"
        f"open({str(tools / 'calls')!r}, 'a').write(' '.join(args[:3]) + ' ' + opts['--name'] + '\\n')\n"
        f"shutil.copytree({str(workspace / 'artifacts')!r} + '/' + opts['--name'], opts['--dir'])\n"
    )
    (tools / "gh").chmod(0o755)
    actions = {"GITHUB_RUN_ID": "7", "GITHUB_REPOSITORY": "me/bot", "PATH": f"{tools}:{os.environ['PATH']}"}
    publish = _job(
        workspace,
        "publish",
        hub_a.url,
        [
            "publish",
            "--artifacts-from-run",
            "--bundles",
            str(workspace / "publish-disk"),
            "--plan",
            str(workspace / "plan.json"),
            "--report",
            str(workspace / "report.json"),
        ],
        {"HF_TOKEN": TOKEN, **actions},
    )
    return {"plan": (plan, plan_out, plan_summary, plan_probe), "matrix": matrix, "builds": builds, "publish": publish}


@pytest.fixture(scope="module")
def single_run(hubs, workspace):
    """`dflash-bot run` on the second hub, with both tokens, as the scheduled single-process job does it."""
    _, hub_b, _ = hubs
    done, _, _, _ = _job(
        workspace,
        "run",
        hub_b.url,
        ["run", "--report", str(workspace / "run-report.json")],
        {"HF_TOKEN": TOKEN, "HF_READ_TOKEN": READER},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((workspace / "run-report.json").read_text())


def test_plan_job_emits_the_matrix_and_reports_what_it_will_not_build(workflow, hubs):
    plan, outputs, summary, probes = workflow["plan"]
    matrix = workflow["matrix"]
    assert json.loads(plan.stdout) == matrix  # stdout carries only the JSON
    (entry,) = matrix["include"]
    hub_a, _, _ = hubs
    source_sha = Hub(hub_a.url, READER).repo_files(demo.DRAFT_REPO).sha
    assert entry["runner"] == "standard" and entry["runs_on"] == "ubuntu-latest"
    assert entry["name"] == demo.TARGET_REPO.split("/")[1] and entry["artifact"] == artifact_name(demo.TARGET_REPO)
    (job,) = entry["jobs"]
    candidate = job["candidate"]
    assert (candidate["repo_id"], candidate["revision"], candidate["target_repo"]) == (
        demo.DRAFT_REPO,
        source_sha,
        demo.TARGET_REPO,
    )
    assert (job["draft_repo"], job["target_repo"], job["reasons"]) == (DRAFT_OUT, TARGET_OUT, ["new"])
    assert (
        entry["peak_bytes"]
        == choose_runner(Pair(candidate["draft_bytes"], candidate["target_bytes"]), RECIPE.runners)[1].peak_memory_bytes
        > 0
    )
    assert outputs["count"] == "1" and outputs["publish"] == "true"
    assert f"| {demo.BROKEN_REPO} |" in summary and "skipped" in summary
    assert all(not p["token_names"] and not p["secret_in_env"] for p in probes)


def test_build_jobs_never_hold_the_write_token(workflow, workspace):
    (build,) = workflow["builds"]
    done, outputs, _, probes = build
    assert done.returncode == 0, done.stderr[-3000:]
    assert outputs["status"] == "built"
    bundle = workspace / "artifacts" / artifact_name(demo.TARGET_REPO) / artifact_name(demo.DRAFT_REPO)
    record = json.loads((bundle / "build-outcome.json").read_text())
    assert record["outcome"]["status"] == "built"
    assert json.loads((bundle / "openvino_export.json").read_text())["status"] == "validated"
    loaders = [p for p in probes if {"openvino", "torch"} & set(p["libraries"])]
    # The children that loaded the checkpoints and IRs: those Landlock confines to their own folders cannot write
    # the probe's file, so at least one reports (the token's absence from every child is
    # tests/sandbox/test_security.py's).
    assert loaders, probes
    assert all(not p["token_names"] and not p["secret_in_env"] for p in probes), probes


def test_publish_job_publishes_the_bundles_and_never_loads_a_checkpoint(workflow):
    done, outputs, summary, probes = workflow["publish"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(outputs["published"]) == sorted([DRAFT_OUT, TARGET_OUT])
    assert json.loads(outputs["failed"]) == []
    assert f"[{DRAFT_OUT}](" in summary and f"| {demo.DSPARK_REPO} |" in summary
    assert probes and all(not set(p["libraries"]) for p in probes), probes


def test_publish_job_downloads_each_groups_artifact_once_and_deletes_it(workflow, workspace):
    assert workflow["publish"][0].returncode == 0
    calls = (workspace / "publish-tools" / "calls").read_text().splitlines()
    assert calls == [f"run download 7 {entry['artifact']}" for entry in workflow["matrix"]["include"]]
    assert list((workspace / "publish-disk").iterdir()) == []


def test_workflow_result_equals_a_single_process_run(workflow, single_run, hubs, workspace):
    assert workflow["publish"][0].returncode == 0
    fanout_report = json.loads((workspace / "report.json").read_text())

    def statuses(report: dict) -> dict:
        return {o["source"]: (o["status"], o["repos"]) for o in report["outcomes"]}

    assert statuses(fanout_report) == statuses(single_run)
    # target (weights, its card listing no draft yet), draft, target card listing the draft now published
    assert len(fanout_report["commits"]) == len(single_run["commits"]) == 3

    def published(url: str) -> dict:
        hub = Hub(url, READER)
        shas = {repo: hub.repo_files(repo).sha for repo in (demo.DRAFT_REPO, demo.TARGET_REPO)}
        result = {}
        for repo in sorted(
            m.repo_id for m in hub.list_models(author=RECIPE.publish.namespace, search=None, filter_tags=(), limit=100)
        ):
            files = sorted(hub.repo_files(repo).sizes)
            provenance = json.loads(hub.read_file(repo, "openvino_export.json") or b"")
            sources = {
                role: (provenance[role]["repo"], provenance[role]["revision"] == shas[provenance[role]["repo"]])
                for role in ("source", "target")
                if role in provenance
            }
            tags = sorted(t.name for t in hub.api.list_repo_refs(repo).tags)
            result[repo] = (files, sources, len(tags))
        return result

    hub_a, hub_b, _ = hubs
    result_a = published(hub_a.url)
    assert set(result_a) == {DRAFT_OUT, TARGET_OUT}
    assert result_a[DRAFT_OUT][1] == {"source": (demo.DRAFT_REPO, True), "target": (demo.TARGET_REPO, True)}
    assert result_a == published(hub_b.url)


def test_card_only_refresh_is_planned_without_a_build_and_done_by_publish(workflow, hubs, tmp_path, monkeypatch):
    import shutil

    from bot.core import fingerprints
    from bot.publish import card
    from bot.run.fanout import publish_run

    assert workflow["publish"][0].returncode == 0
    templates = tmp_path / "templates"
    shutil.copytree(card.TEMPLATES, templates)
    draft_template = templates / card.DRAFT_TEMPLATE
    draft_template.write_text(draft_template.read_text().replace("## Usage", "## Usage (refreshed)"))
    monkeypatch.setattr(fingerprints, "TEMPLATES", templates)  # what the cards are rendered and fingerprinted from
    hub_a = hubs[0]
    planned = plan_matrix(Hub(hub_a.url, READER), RECIPE, RunOptions())
    assert [r.source.repo for r in planned.card_refresh] == [demo.DRAFT_REPO] and planned.matrix() == {"include": []}
    report = publish_run(Hub(hub_a.url, TOKEN), RECIPE, None, planned)
    outcome = {o.source: o for o in report.outcomes}[demo.DRAFT_REPO]
    assert (outcome.status, outcome.reason) == ("published", "card refreshed")
    assert "## Usage (refreshed)" in Hub(hub_a.url).read_file(DRAFT_OUT, "README.md").decode()
    again = plan_matrix(Hub(hub_a.url, READER), RECIPE, RunOptions())
    assert (
        again.card_refresh == []
        and {o.source: o.status for o in again.report.outcomes}[demo.DRAFT_REPO] == "up-to-date"
    )


def test_plan_defers_entries_over_the_limit_and_skips_builds_no_runner_takes(hubs):
    reader = Hub(hubs[0].url, READER)
    tiny_runners = RECIPE.model_copy(
        update={
            "runners": RunnerSettings.model_validate(
                {"classes": [{"name": "tiny", "max_memory_bytes": 1, "max_disk_bytes": 1, "runs_on": "ubuntu-latest"}]}
            )
        }
    )
    planned = plan_matrix(reader, tiny_runners, RunOptions(force=True))
    assert planned.entries == []
    outcome = {o.source: o for o in planned.report.outcomes}[demo.DRAFT_REPO]
    assert outcome.status == "skipped" and "do not fit the largest runner class 'tiny'" in outcome.reason

    from huggingface_hub import HfApi

    hub_a, _, root = hubs
    copy = demo.DRAFT_REPO + "-copy"
    api = HfApi(endpoint=hub_a.url, token=TOKEN)
    api.create_repo(copy)
    api.upload_folder(repo_id=copy, folder_path=root / "seed-a" / SEEDED_KIND / "draft")
    # Two drafts of one target: one entry, one target download and export for both.
    planned = plan_matrix(reader, RECIPE, RunOptions(force=True))
    (entry,) = planned.entries
    assert sorted(job.source for job in entry.jobs) == sorted([demo.DRAFT_REPO, copy])
    # A runner class that takes one draft with the target but not both (in no schedule): the group is split, one
    # entry per draft, and over the entry limit the second is deferred. Tiny sizes: memory tells them apart.
    from bot.core.runners import LinearFit, SizingModel
    from bot.plan.sizing import estimate_schedule

    job = entry.jobs[0]
    # At tiny sizes the fitted lines' intercepts hide a draft's bytes: a proportional validation line shows them
    # (3 x: above the quality step's f32 copy of a tiny original, 2 x the target's bytes, which the model adds).
    sizing = SizingModel.model_validate(
        {name: LinearFit(a=3.0 if name == "validate_memory" else 0.0, b=0) for name in SizingModel.line_names()}
    )

    def least_memory(draft_bytes: int) -> int:
        return min(
            estimate_schedule(
                draft_bytes,
                job.candidate.target_bytes,
                sizing,
                parallel_exports=parallel,
                remove_sources=remove,
            ).peak_memory_bytes
            for parallel in (True, False)
            for remove in (True, False)
        )

    single, both = (
        least_memory(job.candidate.draft_bytes),
        least_memory(sum(j.candidate.draft_bytes for j in entry.jobs)),
    )
    assert single < both  # every draft's export and validation take memory
    narrow = RECIPE.model_copy(
        update={
            "runners": RECIPE.runners.model_copy(
                update={
                    "max_entries": 1,
                    "sizing": sizing,
                    "headroom": 0.0,  # the class is cut to the estimates themselves
                    "classes": [
                        RECIPE.runners.classes[0].model_copy(
                            update={"name": "narrow", "max_memory_bytes": both - 1, "max_disk_bytes": 10**12}
                        )
                    ],
                }
            )
        }
    )
    planned = plan_matrix(reader, narrow, RunOptions(force=True))
    assert len(planned.entries) == 1 and len(planned.entries[0].jobs) == 1 and len(planned.matrix()["include"]) == 1
    (deferred,) = planned.report.deferred
    outcome = {o.source: o for o in planned.report.outcomes}[deferred]
    assert outcome.status == "deferred" and "next run" in outcome.reason
    dry = plan_matrix(reader, narrow, RunOptions(force=True, dry_run=True))
    assert dry.matrix() == {"include": []} and len(dry.entries) == 1  # a dry run hands nothing on
    assert "planned" in {o.status for o in dry.report.outcomes}


def test_a_group_no_runner_class_takes_whole_is_split_one_entry_per_draft():
    """Real sizes: a Qwen3-4B-class target with two 1 GB drafts; a class that takes the target with one draft but
    not with both gets one entry per draft (each still one target export), and a smaller class none."""
    from bot.run.fanout import _fit

    def job(index: int) -> BuildJob:
        candidate = Candidate(
            repo_id=f"z-lab/A-DFlash-{index}",
            revision="a" * 40,
            kind="dflash",
            draft_format="stateful",
            target_repo="Qwen/A",
            target_revision="b" * 40,
            target_model_type="qwen3",
            target_is_vlm=False,
            draft_bytes=10**9,
            target_bytes=8 * 10**9,
            profile="default",
            download_bytes=9 * 10**9,
        )
        return BuildJob(candidate=candidate, reasons=("new",), draft_repo=f"ns/A-{index}", target_repo="ns/A")

    group = [job(0), job(1)]
    time = BuildTime.of(RECIPE)
    single = choose_runner(pair_of([group[0].candidate]), RECIPE.runners, time)[1]
    both = choose_runner(pair_of([j.candidate for j in group]), RECIPE.runners, time)[1]
    assert both.peak_disk_bytes > single.peak_disk_bytes  # every draft's IR and export scratch take disk
    fits_one = RECIPE.runners.model_copy(
        update={
            "classes": [
                RECIPE.runners.classes[0].model_copy(
                    update={"max_memory_bytes": single.peak_memory_bytes, "max_disk_bytes": single.peak_disk_bytes}
                )
            ],
            "headroom": 0.0,
        }
    )
    assert choose_runner(pair_of([j.candidate for j in group]), fits_one, time)[0] is None
    split = _fit(group, RECIPE.model_copy(update={"runners": fits_one}))
    assert [jobs for jobs, _ in split] == [[group[0]], [group[1]]]
    assert all(choice[0] is not None and choice[1] == single for _, choice in split)  # each estimated on its own
    roomy = RECIPE.runners.model_copy(
        update={
            "classes": [
                RECIPE.runners.classes[0].model_copy(update={"max_memory_bytes": 10**12, "max_disk_bytes": 10**13})
            ]
        }
    )
    assert [jobs for jobs, _ in _fit(group, RECIPE.model_copy(update={"runners": roomy}))] == [group]


def test_watch_workflow_keeps_the_trust_boundary(repo_root):
    """What the linters cannot know: which job holds which token, and that every job is bounded in time."""
    workflow = yaml.safe_load((repo_root / ".github" / "workflows" / "watch.yml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert "schedule" in triggers and set(triggers["workflow_dispatch"]["inputs"]) == {
        "source",
        "recipe",
        "force",
        "dry_run",
    }
    assert workflow["permissions"] == {} and workflow["concurrency"]["cancel-in-progress"] is False
    jobs = workflow["jobs"]
    assert list(jobs) == ["keep-enabled", "plan", "build", "publish", "clean-up", "summary"]  # tests/test_workflows.py
    for name, job in jobs.items():
        assert isinstance(job["timeout-minutes"], int), name
        text = yaml.safe_dump(job)
        if name != "publish":
            assert "secrets.HF_TOKEN" not in text and "environment" not in job, name
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), (name, step)
            if "uses" in step:
                assert re.fullmatch(r"actions/[\w-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
    assert jobs["publish"]["environment"] == "hub-publish"
    assert jobs["build"]["runs-on"] == "${{ matrix.runs_on }}"
    assert jobs["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert "--job" in jobs["build"]["steps"][-2]["run"] and "make install" in jobs["build"]["steps"][2]["run"]
