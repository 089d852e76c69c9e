"""The toolchain watch (bot.run.upstream, upstream_index, upstream_proposal, upstream_trial): proposals from recorded
index answers, the report, and pinning.

The index answers are recorded from the real index (`tests/data/upstream/`, 2026-11-30: pip's dry-run report for
the unpinned stack, and the releases of `pip index versions transformers`, from which `RecordedIndex.newest` answers
as pip answers `transformers<range>`), or written for a future release as optimum-intel PR #2096's discussion
describes it (Qwen3.5 export needing transformers >= 5.15). The machine's configured index is asked through pip
too, for what needs no environment. No environment is built here: building a candidate costs 1.6 GB and minutes,
so the command itself was run by hand against the real index.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from bot.core.errors import Failure
from bot.core.exporter import optimum_model_configs
from bot.core.profiles import Bounds, Profile, _canonical, load_profiles
from bot.core.toolchain import CAPABILITY_DFLASH, Toolchain, detect
from bot.run import upstream
from bot.run.upstream import CheckReport, apply_pins
from bot.run.upstream_index import PipIndex, Resolution, pip_environment
from bot.run.upstream_proposal import ProfileProposal, intersect_bounds, propose, transformers_range
from bot.run.upstream_trial import CandidateResult, PairResult, Probe, probe, try_candidate

DATA = Path(__file__).parents[1] / "data" / "upstream"
STACK_REPORT = json.loads((DATA / "stack-report-2026-11-30.json").read_text())


def _index_versions(text: str) -> list[str]:
    """The versions in recorded `pip index versions` output, newest first."""
    line = next(line for line in text.splitlines() if line.strip().startswith("Available versions:"))
    return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]


TRANSFORMERS_VERSIONS = _index_versions((DATA / "index-versions-transformers.txt").read_text())

# optimum-intel's model_configs.py as a release after PR #2096 could have it: Qwen3.5 needs transformers >= 5.15.
FUTURE_MODEL_CONFIGS = """
class TextDecoderOnnxConfig: ...

@register_in_tasks_manager("qwen3", *["text-generation", "text-generation-with-past"])
class Qwen3OpenVINOConfig(TextDecoderOnnxConfig):
    MIN_TRANSFORMERS_VERSION = "4.51.0"

@register_in_tasks_manager("qwen3_5", *["image-text-to-text"])
class Qwen3_5OpenVINOConfig(TextDecoderOnnxConfig):
    MIN_TRANSFORMERS_VERSION = "5.15.0"

@register_in_tasks_manager("qwen3_5_moe", *["image-text-to-text"])
class Qwen3_5MoeOpenVINOConfig(Qwen3_5OpenVINOConfig): ...

@register_in_tasks_manager("gemma4", *["image-text-to-text"])
class Gemma4OpenVINOConfig(TextDecoderOnnxConfig):
    MIN_TRANSFORMERS_VERSION = "5.5"
"""
FUTURE_STACK = {
    "optimum-intel": "2.3.0",
    "optimum": "2.4.0",
    "openvino": "2026.5.0",
    "openvino-tokenizers": "2026.5.0.0",
    "openvino-genai": "2026.5.0.0",
    "nncf": "3.5.0",
    "transformers": "5.24.0",
    "torch": "2.13.0+cpu",
    "huggingface-hub": "1.21.0",
    "tokenizers": "0.23.0",
    "numpy": "2.4.6",
    "safetensors": "0.8.0",
    "einops": "0.8.2",
    "diffusers": "0.39.0",
    "pydantic": "2.14.4",
    "pyyaml": "6.0.4",
    "github-action-utils": "2.0.0",
}


class RecordedIndex:
    """Answers recorded from the index: the first resolution is the unpinned stack; later ones (a profile with
    its stack pinned) keep every `name==version` they are given and fill the rest from `stack`."""

    def __init__(
        self,
        stack_report: dict,
        model_configs: Path,
        transformers: list[str],
        *,
        refuse_pinned: frozenset[str] = frozenset(),
    ):
        self.stack_report, self.configs, self.transformers = stack_report, model_configs, transformers
        self.refuse_pinned = refuse_pinned
        self.calls: list[list[str]] = []

    def resolve(self, requirements):
        self.calls.append(list(requirements))
        if len(self.calls) == 1:
            return Resolution.from_report(self.stack_report)
        base = Resolution.from_report(self.stack_report)
        versions = dict(base.versions)
        for text in requirements:
            name, _, version = text.partition("==")
            if version:
                if name in self.refuse_pinned:
                    raise Failure(f"pip install --dry-run: ResolutionImpossible ({name}=={version})")
                versions[_canonical(name)] = version
        return Resolution(versions, base.requires)

    def newest(self, requirement):
        """What pip would pick from the recorded releases: the newest final one inside the range."""
        wanted = Requirement(requirement)
        assert wanted.name == "transformers"
        fits = [Version(v) for v in self.transformers if wanted.specifier.contains(v, prereleases=False)]
        return str(max(fits)) if fits else None

    def model_configs(self, optimum_intel, work):
        return self.configs


def _report(versions: dict[str, str], optimum_requires: tuple[str, ...]) -> dict:
    install = [
        {"metadata": {"name": n, "version": v, "requires_dist": list(optimum_requires) if n == "optimum-intel" else []}}
        for n, v in versions.items()
    ]
    return {"version": "1", "install": install}


@pytest.fixture()
def installed_configs():
    path = optimum_model_configs()
    assert path is not None, "optimum-intel is installed in this environment"
    return path


def test_recorded_answers_parse():
    stack = Resolution.from_report(STACK_REPORT)
    assert stack.version("optimum-intel") == "2.2.0" and stack.version("openvino-genai") == "2026.4.1.0"
    assert stack.version("torch") == "2.13.0"  # the local +cpu tag is not a version difference
    assert str(stack.requirement_of("optimum-intel", "transformers").specifier) == "<5.6,>=4.51"
    assert str(stack.requirement_of("optimum-intel", "nncf").specifier) == ">=3.3.0"
    assert stack.requirement_of("optimum-intel", "pytest") is None  # only under an extra
    assert TRANSFORMERS_VERSIONS[0] == "5.24.0" and "5.2.0" in TRANSFORMERS_VERSIONS


def test_transformers_range_joins_bounds_and_declared_range():
    declared = Requirement("transformers<5.6,>=4.51")
    assert transformers_range(Bounds("qwen3_5", "5.2.0", "5.2.99", "t"), declared) == (
        "transformers<5.6,<=5.2.99,>=4.51,>=5.2.0"
    )
    assert transformers_range(Bounds("qwen3", None, None, "t"), declared) == "transformers<5.6,>=4.51"
    assert transformers_range(Bounds("x", "5.15", None, "t"), None) == "transformers>=5.15"
    assert transformers_range(Bounds("any", None, None, "t"), None) == "transformers"
    # optimum-intel 2.2.0's gemma4_text: an empty range, nothing to ask the index
    assert transformers_range(Bounds("gemma4_text", "5.5", "5.0", "t"), declared) is None
    index = RecordedIndex(STACK_REPORT, Path("unused"), ["5.16.0rc1", "5.15.1", "5.2.0"])
    assert index.newest("transformers>=5.15") == "5.15.1"  # the recorded answers skip pre-releases, as pip does


def test_pip_runs_without_the_variables_that_change_its_answers_or_output():
    env = pip_environment(
        {
            "PIP_QUIET": "1",
            "PIP_VERBOSE": "3",
            "PIP_NO_DEPS": "1",
            "PIP_PRE": "1",
            "PIP_REQUIREMENT": "evil.txt",
            "PIP_PYTHON": "/usr/bin/python3",
            "pip_quiet": "2",
            "PIP_INDEX_URL": "https://mirror.example/simple",
            "PIP_FIND_LINKS": "/wheels",
            "PIP_CONSTRAINT": "c.txt",
            "PATH": "/usr/bin",
        }
    )
    assert env == {
        "PIP_INDEX_URL": "https://mirror.example/simple",
        "PIP_FIND_LINKS": "/wheels",
        "PIP_CONSTRAINT": "c.txt",
        "PATH": "/usr/bin",
        "PIP_NO_INPUT": "1",
    }


def test_the_real_index_is_read_whatever_pip_quiet_says(monkeypatch, tmp_path):
    """pip itself, on this machine's configured index, with PIP_QUIET=1 (which silences `pip index versions`):
    the releases newer than the pinned transformers are still found, and each profile still gets its candidate."""
    monkeypatch.setenv("PIP_QUIET", "1")
    monkeypatch.setenv("PIP_VERBOSE", "0")
    index = PipIndex()
    profiles = load_profiles()
    pinned = profiles.get("default").transformers
    newest = index.newest("transformers")
    assert newest is not None and Version(newest) > Version(pinned), (newest, pinned)
    assert index.newest("transformers>=999") is None  # no release in range, and the index did answer
    proposals = {p.profile: p for p in propose(profiles, index, work=tmp_path)}
    assert proposals["default"].note is None and proposals["default"].candidate["transformers"] == "5.2.0"
    assert proposals["gemma4"].note is None and proposals["gemma4"].candidate["transformers"] == "5.5.4"


def test_an_index_that_cannot_be_asked_is_a_failure_not_no_release(monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "/nonexistent")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    with pytest.raises(Failure, match="pip install"):
        PipIndex().newest("transformers>=5")


def test_intersect_bounds_takes_the_tightest_ends():
    table = {"qwen3": (None, None), "qwen3_5": ("5.2.0", "5.2.99"), "gemma4": ("5.5", None)}
    both = intersect_bounds(table, ["qwen3", "qwen3_5"])
    assert (both.minimum, both.maximum) == ("5.2.0", "5.2.99")
    assert intersect_bounds(table, ["unknown"]).minimum is None


def test_no_newer_release_on_the_recorded_index_builds_nothing(installed_configs, tmp_path):
    index = RecordedIndex(STACK_REPORT, installed_configs, TRANSFORMERS_VERSIONS)
    report = upstream.check(load_profiles(), index, build=True, root=tmp_path / "envs")
    assert report.status == "no newer release" and report.exit_code == 0
    assert not report.newer and report.results == []
    assert len(index.calls) == 1  # one resolution of the stack; no per-profile resolution, no environment
    assert not (tmp_path / "envs").exists()
    by_name = {p.profile: p for p in report.proposals}
    assert by_name["default"].candidate["transformers"] == "5.2.0"  # qwen3_5 holds the default at 5.2.x
    assert by_name["gemma4"].candidate["transformers"] == "5.5.4"  # the newest under optimum-intel's <5.6
    assert "no newer release" in upstream.table(report)


def test_a_future_release_moves_each_profile_by_its_own_bounds(tmp_path):
    (tmp_path / "model_configs.py").write_text(FUTURE_MODEL_CONFIGS)
    stack = _report(FUTURE_STACK, ("transformers<5.25,>=5.10", "openvino>=2026.5"))
    index = RecordedIndex(stack, tmp_path / "model_configs.py", TRANSFORMERS_VERSIONS)
    proposals = {p.profile: p for p in propose(load_profiles(), index, work=tmp_path)}
    default, gemma4 = proposals["default"], proposals["gemma4"]
    # Qwen3.5 now needs >= 5.15: the default profile's transformers moves across the old 5.2.x series.
    assert default.candidate["transformers"] == "5.24.0"
    assert default.transformers_range.startswith(">=5.15.0")
    assert default.bounds["qwen3_5"] == ("transformers >=5.2.0,<=5.2.99", "transformers >=5.15.0")
    assert default.changes["optimum-intel"] == ("2.2.0", "2.3.0")
    assert default.changes["openvino-genai"] == ("2026.4.1.0", "2026.5.0.0")
    # Pins outside the stack stay when the candidate does not need them moved (the index has tokenizers 0.23.0).
    assert "numpy" not in default.changes and "tokenizers" not in default.changes
    assert gemma4.candidate["transformers"] == "5.24.0"
    # Each profile was resolved with its stack pinned and its other pins kept.
    assert any("transformers==5.24.0" in call and "numpy==2.4.6" in call for call in index.calls[1:])


def test_other_pins_move_only_when_the_candidate_needs_them(tmp_path):
    (tmp_path / "model_configs.py").write_text(FUTURE_MODEL_CONFIGS)
    stack = _report(FUTURE_STACK, ("transformers<5.25,>=5.10",))
    index = RecordedIndex(stack, tmp_path / "model_configs.py", TRANSFORMERS_VERSIONS, refuse_pinned={"tokenizers"})
    default = next(p for p in propose(load_profiles(), index, work=tmp_path) if p.profile == "default")
    # tokenizers==0.22.2 does not fit the candidate: the retry lets the other pins move, to what pip chose.
    assert default.changes["tokenizers"] == ("0.22.2", "0.23.0")
    assert any("tokenizers" in call and "numpy" in call for call in index.calls)
    assert "numpy" not in default.changes


def test_a_profile_no_release_fits_gets_no_candidate(tmp_path):
    configs = FUTURE_MODEL_CONFIGS.replace('MIN_TRANSFORMERS_VERSION = "5.5"', 'MIN_TRANSFORMERS_VERSION = "6.0"')
    (tmp_path / "model_configs.py").write_text(configs)
    stack = _report(FUTURE_STACK, ("transformers<5.25,>=5.10",))
    index = RecordedIndex(stack, tmp_path / "model_configs.py", TRANSFORMERS_VERSIONS)
    gemma4 = next(p for p in propose(load_profiles(), index, work=tmp_path) if p.profile == "gemma4")
    assert gemma4.candidate is None and gemma4.changes == {}
    assert "no transformers release satisfies >=6.0" in gemma4.note


def _future_report(tmp_path, *, passed: bool) -> CheckReport:
    (tmp_path / "model_configs.py").write_text(FUTURE_MODEL_CONFIGS)
    index = RecordedIndex(
        _report(FUTURE_STACK, ("transformers<5.25,>=5.10",)), tmp_path / "model_configs.py", TRANSFORMERS_VERSIONS
    )
    proposals = propose(load_profiles(), index, work=tmp_path)
    current = Probe(Toolchain({"optimum-intel": "2.2.0"}, frozenset({CAPABILITY_DFLASH})))
    probe = Probe(
        Toolchain({"optimum-intel": "2.3.0"}, frozenset({CAPABILITY_DFLASH, "dflash-per-row"})),
        {"qwen3_5": "transformers >=5.15.0"},
    )
    pair = PairResult(
        passed,
        lossless=True,
        accept_lengths={3: 4.0 if passed else 1.0},
        draft_format="per-row",
        reason=None if passed else "oracle accept length {3: 1.0} instead of k + 1",
    )
    problems = () if passed else (f"tiny oracle pair: {pair.reason}",)
    results = [CandidateResult(p.profile, "/envs/x", probe, pair, problems) for p in proposals if p.changes]
    return CheckReport(proposals, current, results)


def test_report_exit_codes_table_and_json(tmp_path):
    good, bad = _future_report(tmp_path, passed=True), _future_report(tmp_path, passed=False)
    assert (good.status, good.exit_code) == ("candidate passes", 0)
    assert (bad.status, bad.exit_code) == ("candidate fails", 1)
    text = upstream.table(good, markdown=True)
    assert "| default | optimum-intel | 2.2.0 | 2.3.0 | newer |" in text
    assert "dflash-per-row" in text and "**candidate passes**" in text
    assert "| default | bounds qwen3_5 | >=5.2.0,<=5.2.99 | >=5.15.0 | moved |" in text
    data = json.loads(json.dumps(bad.as_dict()))
    assert data["status"] == "candidate fails" and data["candidates"][0]["problems"]
    assert data["profiles"][0]["changes"]["transformers"] == ["5.2.0", "5.24.0"]


def test_apply_pins_rewrites_both_files_by_profile(tmp_path, repo_root):
    profiles_file, pyproject = tmp_path / "profiles.yaml", tmp_path / "pyproject.toml"
    shutil.copy(repo_root / "toolchains" / "profiles.yaml", profiles_file)
    shutil.copy(repo_root / "pyproject.toml", pyproject)
    report = _future_report(tmp_path, passed=True)
    changed = apply_pins(report, profiles_file=profiles_file, pyproject=pyproject)
    assert changed == [str(profiles_file), str(pyproject)]
    pinned = load_profiles(profiles_file)
    assert pinned.get("default").pin("optimum-intel") == "2.3.0"
    assert pinned.get("default").transformers == "5.24.0" and pinned.get("gemma4").transformers == "5.24.0"
    assert pinned.get("default").pin("numpy") == "2.4.6"
    text = pyproject.read_text()
    assert '"openvino-genai==2026.5.0.0",' in text and '"transformers==5.24.0",' in text
    assert '"torch==2.13.0",' in text and '"pytest==9.2.0",' in text  # only the profile's pins move
    assert "# 5.2.x is the one series" in text  # comments stay (a reviewer updates them in the PR)
    # A failing candidate writes nothing.
    shutil.copy(repo_root / "pyproject.toml", pyproject)
    assert apply_pins(_future_report(tmp_path, passed=False), profiles_file=profiles_file, pyproject=pyproject) == []


def test_probe_runs_in_an_environments_python():
    """The probe planning uses: run in this environment's python as if it were another profile's."""
    found = probe(sys.executable, "default", ["qwen3_5", "qwen3"])
    assert CAPABILITY_DFLASH in found.toolchain.capabilities
    assert found.toolchain.python == sys.executable and found.toolchain.profile == "default"
    assert found.toolchain.versions["optimum-intel"] == "2.2.0"
    assert found.bounds == {"qwen3_5": "transformers >=5.2.0,<=5.2.99", "qwen3": "transformers (any version)"}


@pytest.mark.slow  # a real build of the oracle pair in the candidate's environment
def test_try_candidate_probes_and_runs_the_oracle_pair_in_the_candidates_environment(tmp_path, repo_root):
    """try_candidate end to end, except the pip install: the candidate's cached environment is prepared as a
    wrapper script of this environment's python (what `ensure_environment` would have left after building it)."""
    from bot.core.profiles import environment_python

    profiles = load_profiles()
    default = profiles.get("default")
    pins = {name: default.pin(name) for name in (r.partition("==")[0] for r in default.requirements)}
    proposal = ProfileProposal("default", default.model_types, pins, dict(pins), ">=5.2.0,<=5.2.99")
    candidate = Profile(
        name="candidate-default",
        description="",
        requirements=tuple(f"{n}=={v}" for n, v in pins.items()),
        torch=default.torch,
        uninstall=default.uninstall,
    )
    python = environment_python(candidate, tmp_path / "envs")
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    (python.parent.parent / ".dflash-bot-profile.json").write_text("{}")

    result = try_candidate(proposal, default, detect(), root=tmp_path / "envs", work=tmp_path)
    assert result.passed, result.problems
    assert result.environment == str(python.parent.parent)
    assert result.probe.toolchain.python == str(python) and CAPABILITY_DFLASH in result.probe.toolchain.capabilities
    assert result.probe.bounds["qwen3_5"] == "transformers >=5.2.0,<=5.2.99"
    assert result.pair.lossless is True and result.pair.draft_format == "stateful"
    assert result.pair.accept_lengths == {3: 4.0}  # the oracle draft: k + 1 tokens per target step


def test_a_newer_release_not_tried_is_no_pass(tmp_path):
    (tmp_path / "model_configs.py").write_text(FUTURE_MODEL_CONFIGS)
    index = RecordedIndex(
        _report(FUTURE_STACK, ("transformers<5.25,>=5.10",)), tmp_path / "model_configs.py", TRANSFORMERS_VERSIONS
    )
    report = upstream.check(load_profiles(), index, build=False)
    assert report.newer and not report.passed
    assert (report.status, report.exit_code) == ("newer release, candidate not tried", 1)
