"""Target quality against the original weights: real exports of tiny targets, measured in the token-free child.

One session-scoped fixture exports three tiny targets (the constructed `dflash` target with the recipe's int4, the
`random` target in int8 and in a deliberately damaged int4 with one group per channel).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.builder.export import ExportRequest, export_model
from bot.builder.quality import (
    PromptQuality,
    QualityReport,
    compare_logits,
    first_difference,
    measure_quality,
    quality_gate,
)
from bot.core.exporter import TASK_LLM
from bot.core.recipe import ExportSettings, load_recipe

PROMPTS = load_recipe().validation.prompts
MAX_NEW_TOKENS = 24
REAL_BUILDS = ("measured",)  # slow (tests/conftest.py): real exports of three tiny targets


@pytest.fixture(scope="session")
def measured(tiny, tmp_path_factory):
    """{name: (QualityReport, ir_dir)} for three real exports of tiny targets, each measured once."""
    root = tmp_path_factory.mktemp("quality")
    cases = {
        "dflash-int4": ("dflash", ExportSettings()),
        "random-int8": ("random", ExportSettings(weight_format="int8")),
        "random-int4-per-channel": ("random", ExportSettings(weight_format="int4", group_size=-1)),
    }
    results = {}
    for name, (kind, settings) in cases.items():
        source = tiny(kind).target
        request = ExportRequest("target", source, root / "ir" / name, TASK_LLM, trust_remote_code=False)
        export = export_model(request, settings, log_dir=root / "logs" / name, home=root / "hf")
        report = measure_quality(
            source, export.ir_dir, PROMPTS, MAX_NEW_TOKENS, work=root / "work" / name, timeout_s=600
        )
        results[name] = (report, export.ir_dir)
    return results


def test_a_constructed_target_agrees_with_its_original_weights(measured):
    report, _ = measured["dflash-int4"]
    assert report.measured and report.reason is None
    assert report.tokens == len(PROMPTS) * MAX_NEW_TOKENS
    assert [p.tokens for p in report.prompts] == [MAX_NEW_TOKENS] * len(PROMPTS)
    assert report.top1_agreement >= 0.99
    assert report.mean_kl < 0.01
    assert report.first_diverging_token == MAX_NEW_TOKENS  # identical greedy outputs
    assert report.reference_dtype == "float32" and report.reference_passes == 1
    assert report.ir_properties["INFERENCE_PRECISION_HINT"] == "f32"
    assert report.seconds and report.seconds > 0


def test_one_group_per_channel_int4_scores_measurably_lower_than_int8(measured):
    int8, _ = measured["random-int8"]
    damaged, _ = measured["random-int4-per-channel"]
    assert int8.top1_agreement >= 0.9
    assert damaged.top1_agreement <= int8.top1_agreement - 0.1
    assert damaged.mean_kl > 10 * int8.mean_kl
    assert damaged.first_diverging_token <= int8.first_diverging_token
    for report in (int8, damaged):
        assert 0 <= report.first_diverging_token <= MAX_NEW_TOKENS
        assert all(0 <= p.top1_agreement <= 1 and p.mean_kl >= 0 for p in report.prompts)


def test_report_survives_the_provenance_round_trip(measured):
    report, _ = measured["random-int4-per-channel"]
    data = json.loads(json.dumps(report.model_dump(mode="json")))
    assert set(data) >= {
        "top1_agreement",
        "mean_kl",
        "first_diverging_token",
        "tokens",
        "prompts",
        "method",
        "reference_dtype",
    }
    assert QualityReport.model_validate(data) == report
    assert QualityReport.from_record({**data, "gate": {"passed": True}}) == report  # the record adds its gate


def test_quality_gate_names_the_measured_figure(measured):
    damaged, _ = measured["random-int4-per-channel"]
    assert quality_gate(damaged, None) is None
    assert quality_gate(damaged, 0.0) is None
    reason = quality_gate(damaged, 0.99)
    assert reason is not None and f"{damaged.top1_agreement:.2%}" in reason and "99.00%" in reason


def test_quality_gate_fails_an_unmeasured_target():
    report = QualityReport.not_measured("VLM target")
    assert quality_gate(report, None) is None
    assert "not measured (VLM target)" in quality_gate(report, 0.9)


def test_a_vlm_ir_is_reported_not_measured_without_starting_a_child(tmp_path):
    ir = tmp_path / "ir"
    ir.mkdir()
    (ir / "openvino_language_model.xml").write_text("<net/>")
    report = measure_quality(tmp_path, ir, PROMPTS, 8, work=tmp_path / "work")
    assert not report.measured and "VLM target" in report.reason
    assert not (tmp_path / "work").exists()


def test_a_broken_checkpoint_is_a_named_failure(tiny, measured, tmp_path):
    from bot.core.errors import Failure

    source = tmp_path / "src"
    source.mkdir()
    for entry in tiny("random").target.iterdir():
        if entry.suffix != ".safetensors":
            (source / entry.name).write_bytes(entry.read_bytes())
    _, ir_dir = measured["random-int8"]
    with pytest.raises(Failure, match="quality measurement failed"):
        measure_quality(source, ir_dir, PROMPTS, 4, work=tmp_path / "work", timeout_s=300)


# ---- the pure metrics ----


def test_the_first_difference_is_where_the_greedy_outputs_part():
    assert first_difference([1, 2, 3, 4], [1, 2, 3, 4]) == 4
    assert first_difference([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert first_difference([1, 2, 3, 4], [7, 2, 3, 4]) == 0
    assert first_difference([], []) == 0


def _prompt(index: int, tokens: int, top1: float, kl: float, first: int) -> PromptQuality:
    return PromptQuality(
        prompt_index=index, tokens=tokens, top1_agreement=top1, mean_kl=kl, first_diverging_token=first
    )


def test_an_older_report_with_who_what_benchmarks_sdt_still_reads():
    older = {"measured": True, "prompts": [{**_prompt(0, 4, 1.0, 0.0, 4).model_dump(), "diverging_tokens": 0}]}
    older["prompts"][0]["share_diverging_tokens"] = 0.0
    assert QualityReport.from_record({**older, "share_diverging_tokens": 0.0}).prompts == (_prompt(0, 4, 1.0, 0.0, 4),)


def test_the_childs_answer_is_held_to_the_report_model():
    """What comes back over the wire is validated by the model itself: no field it does not know, no wrong type."""
    answer = QualityReport.from_prompts([_prompt(0, 4, 1.0, 0.0, 4)]).model_dump(mode="json")
    assert QualityReport.model_validate(answer).tokens == 4
    for bad in ({**answer, "share_diverging_tokens": 0.0}, {**answer, "tokens": "many"}):
        with pytest.raises(ValidationError):
            QualityReport.model_validate(bad)


def test_compare_logits_agreement_and_kl():
    import numpy as np

    ref = np.array([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    agreement, kl = compare_logits(ref, ref.copy())
    assert agreement == 1.0 and kl == pytest.approx(0.0, abs=1e-12)
    swapped = ref[:, [1, 0, 2]]
    agreement, kl = compare_logits(ref, swapped)
    assert agreement == 0.0 and kl > 0.1
    with pytest.raises(ValueError):
        compare_logits(ref, ref[:1])


def test_overall_figures_weigh_tokens_and_average_divergence():
    prompts = [_prompt(0, 10, 1.0, 0.0, 10), _prompt(1, 30, 0.5, 0.2, 2)]
    report = QualityReport.from_prompts(prompts, max_new_tokens=30)
    assert report.tokens == 40
    assert report.top1_agreement == pytest.approx((10 + 15) / 40)
    assert report.mean_kl == pytest.approx(0.15)
    assert report.first_diverging_token == 6.0
    assert not QualityReport.from_prompts([]).measured


def test_quality_child_refuses_to_run_with_a_token_in_reach(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_TOKEN": "hf_not_a_real_token"}
    result = subprocess.run(
        [sys.executable, "-m", "bot.sandbox.child", "bot.builder.quality", "--help"],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 70 and "HF_TOKEN" in result.stderr


def render_partial(name: str, **values) -> str:
    import jinja2

    from bot.core.fingerprints import TEMPLATES

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined)
    return env.get_template(name).render(**values)


def test_the_card_section_shows_every_prompt_and_the_overall_figures(measured):
    report, _ = measured["random-int4-per-channel"]
    text = render_partial("_quality.md.j2", quality=json.loads(json.dumps(report.model_dump(mode="json"))))
    assert text.startswith("## Quality against the original weights")
    assert f"over {report.tokens} generated tokens" in text
    assert f"**{100 * report.top1_agreement:.1f} %**" in text
    assert text.count("\n| ") == 2 + len(PROMPTS)  # the header, one row per prompt and the overall row
    unmeasured = render_partial(
        "_quality.md.j2", quality=QualityReport.not_measured("VLM target").model_dump(mode="json")
    )
    assert "Not measured: VLM target." in unmeasured


def test_batched_measurement_equals_each_prompts_own_loop(tiny, measured):
    """The IR decoding the prompts as one left-padded batch gives, token for token, each prompt's unpadded greedy
    output and rows; the original's one teacher-forced pass gives the rows of an unpadded forward per prompt."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bot.builder.quality_models import IrModel, Reference, prompt_ids

    source = tiny("random").target
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(source)
    prompts = [prompt_ids(tokenizer, prompt) for prompt in PROMPTS]
    assert len({len(ids) for ids in prompts}) > 1  # the batch is really padded
    ir = IrModel(measured["random-int8"][1] / "openvino_model.xml")
    continuations, ir_rows = ir.greedy(prompts, MAX_NEW_TOKENS)
    reference_rows = Reference(source, 10**9).teacher_forced(prompts, continuations)
    for index, ids in enumerate(prompts):
        alone, alone_rows = ir.greedy([ids], MAX_NEW_TOKENS)
        assert continuations[index] == alone[0]
        assert np.allclose(ir_rows[index], alone_rows[0], atol=1e-3)
        assert [int(row.argmax()) for row in ir_rows[index]] == continuations[index]
        sequence = ids + continuations[index]
        with torch.no_grad():
            plain = model(input_ids=torch.tensor([sequence])).logits[0, len(ids) - 1 : len(sequence) - 1].numpy()
        assert reference_rows[index].shape == plain.shape
        assert np.allclose(reference_rows[index], plain, atol=1e-4)


def test_the_measurement_is_stopped_when_it_outgrows_the_memory_budget(tiny, measured, tmp_path):
    """The quality child runs under the runner class's memory budget like the exports and the validation."""
    from bot.core.errors import Failure

    budget = 100 * 2**20  # less than importing torch takes
    with pytest.raises(Failure) as raised:
        measure_quality(
            tiny("random").target,
            measured["random-int8"][1],
            PROMPTS,
            MAX_NEW_TOKENS,
            work=tmp_path / "quality",
            timeout_s=600,
            memory_budget_bytes=budget,
        )
    assert "quality measurement" in raised.value.message and f"({budget} bytes)" in raised.value.message
