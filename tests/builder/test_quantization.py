"""Int4 settings: optimum-intel's default configs by model id, the data-free fallback, and what the IR records."""

from __future__ import annotations

import pytest

from bot.builder.export import ExportRequest, export_model
from bot.builder.quantization import (
    _package_folder,
    calibration_unavailable,
    optimum_default_4bit_configs,
    read_default_4bit_configs,
    read_ir_quantization,
    recommended_int4,
    weight_format_args,
    with_calibration,
)
from bot.core.exporter import TASK_LLM
from bot.core.recipe import ExportSettings

RECIPE = ExportSettings(group_size=128, ratio=1.0, sym=False)


def test_a_listed_target_gets_optimum_intels_default_config():
    defaults = optimum_default_4bit_configs()  # read from the installed optimum-intel's source
    assert "Qwen/Qwen3-8B" in defaults
    settings = recommended_int4("Qwen/Qwen3-1.7B", RECIPE, defaults=defaults)
    assert settings.source == "optimum-intel default"
    assert (settings.mode, settings.group_size, settings.ratio) == ("int4_sym", 64, 1.0)
    assert settings.awq and settings.scale_estimation and settings.dataset == "wikitext2"
    assert settings.data_aware
    args = settings.cli_args()
    assert args[:4] == ["--weight-format", "int4", "--group-size", "64"]
    assert {"--sym", "--awq", "--scale-estimation"} <= set(args)
    assert args[args.index("--dataset") + 1] == "wikitext2"


def test_reading_the_table_from_source_gives_what_importing_optimum_intel_gives(tmp_path):
    import json
    import subprocess
    import sys

    from bot.builder.quantization import _READ_DEFAULTS

    source = _package_folder("optimum", None) / "intel" / "openvino" / "configuration.py"
    imported = json.loads(
        subprocess.run([sys.executable, "-c", _READ_DEFAULTS], capture_output=True, text=True, check=True).stdout
    )
    read = read_default_4bit_configs(source)
    assert read == imported and "Qwen/Qwen3-8B" in read
    assert read["meta-llama/Llama-3.1-8B"] == read["meta-llama/Meta-Llama-3.1-8B"]  # the alias loop
    assert any(config.get("quant_method") == "awq" for config in read.values())  # the enum member's value
    # A module that builds the table in a way the reader does not know is imported instead, never half read.
    text = source.read_text()
    changed = tmp_path / "configuration.py"
    changed.write_text(text + "\n_DEFAULT_4BIT_WQ_CONFIGS.update(EXTRA_CONFIGS)\n")
    assert read_default_4bit_configs(changed) is None
    changed.write_text(text.replace('"quant_method": OVQuantizationMethod.AWQ', '"quant_method": compute()', 1))
    assert read_default_4bit_configs(changed) is None
    changed.write_text(
        text.replace(
            "_DEFAULT_4BIT_WQ_CONFIGS[m_id_2] = _DEFAULT_4BIT_WQ_CONFIGS[m_id_1]",
            "_DEFAULT_4BIT_WQ_CONFIGS[m_id_2] = dict(_DEFAULT_4BIT_WQ_CONFIGS[m_id_1])",
        )
    )
    assert read_default_4bit_configs(changed) is None
    assert read_default_4bit_configs(tmp_path / "missing.py") is None


def test_an_unlisted_target_gets_the_recipes_settings():
    settings = recommended_int4("Qwen/Qwen3-Tiny", RECIPE, defaults=optimum_default_4bit_configs())
    assert settings.source == "recipe" and settings.note is None
    assert (settings.mode, settings.group_size, settings.ratio, settings.data_aware) == ("int4_asym", 128, 1.0, False)
    assert recommended_int4(None, RECIPE, defaults={}).source == "recipe"


def test_entries_the_cli_cannot_express_fall_back_to_the_recipe_with_a_note():
    defaults = {"org/two-pass": {"quantization_config1": {"bits": 4}, "quantization_config2": {"bits": 8}}}
    settings = recommended_int4("org/two-pass", RECIPE, defaults=defaults)
    assert settings.source == "recipe" and "quantization_config1" in settings.note


def test_an_entry_with_values_the_flags_do_not_take_falls_back_to_the_recipe_with_a_note():
    settings = recommended_int4("org/odd", RECIPE, defaults={"org/odd": {"bits": 4, "ratio": 1.5}})
    assert settings.source == "recipe" and "ratio" in (settings.note or "")


def test_the_recipes_int4_settings_are_its_weight_compression_as_int4():
    int8 = ExportSettings(weight_format="int8", sym=True, group_size=64, backup_precision="int8_sym")
    settings = recommended_int4(None, int8)
    assert settings.compression() == int8.compression().model_copy(update={"weight_format": "int4"})
    assert settings.cli_args() == ExportSettings(sym=True, group_size=64, backup_precision="int8_sym").cli_args()
    provenance = settings.as_provenance()
    assert list(provenance)[:4] == ["mode", "sym", "group_size", "ratio"] and "weight_format" not in provenance
    assert list(provenance)[-3:] == ["backup_precision", "group_size_fallback", "note"]


def test_a_per_submodel_config_uses_the_language_models_entry():
    defaults = {
        "org/vlm": {
            "quantization_configs": {
                "lm_model": {"bits": 4, "sym": False, "group_size": 64, "backup_precision": "int8_sym"},
                "text_embeddings_model": {"bits": 8, "sym": True},
            }
        }
    }
    settings = recommended_int4("org/vlm", RECIPE, defaults=defaults)
    assert (settings.group_size, settings.backup_precision) == (64, "int8_sym")
    assert "text_embeddings_model get optimum-cli's defaults" in settings.note


def test_without_the_calibration_dataset_the_settings_fall_back_to_data_free():
    settings = recommended_int4("Qwen/Qwen3-8B", RECIPE, defaults=optimum_default_4bit_configs())
    reason = calibration_unavailable(settings.dataset)  # offline export child: never available here
    assert reason is not None and "wikitext2" in reason
    fallback = with_calibration(settings, reason)
    assert not fallback.data_aware and fallback.dataset is None and not fallback.scale_estimation
    assert fallback.source == "optimum-intel default" and fallback.group_size == 128
    assert fallback.note.startswith("data-free fallback:") and "scale estimation" in fallback.note
    assert "--dataset" not in fallback.cli_args() and "--scale-estimation" not in fallback.cli_args()
    assert with_calibration(settings, None) is settings
    assert calibration_unavailable(None) is None and calibration_unavailable("auto") is None


def test_draft_weight_format_args():
    assert weight_format_args("int8", RECIPE) == ["--weight-format", "int8"]
    assert weight_format_args("int4", RECIPE)[:2] == ["--weight-format", "int4"]
    with pytest.raises(ValueError):
        weight_format_args("fp16", RECIPE)


def test_the_ir_records_the_recommended_settings_it_was_exported_with(tiny, tmp_path):
    """A real export with Qwen3-1.7B's default config, fallen back to data-free: the rt_info shows what ran."""
    settings = recommended_int4("Qwen/Qwen3-1.7B", RECIPE, defaults=optimum_default_4bit_configs())
    settings = with_calibration(settings, calibration_unavailable(settings.dataset))
    request = ExportRequest("target", tiny("dflash").target, tmp_path / "ir", TASK_LLM, trust_remote_code=False)
    export_model(request, RECIPE, log_dir=tmp_path / "logs", home=tmp_path / "hf", quantization=settings.cli_args())
    recorded = read_ir_quantization(tmp_path / "ir" / "openvino_model.xml")
    assert recorded["mode"] == "int4_sym"
    assert recorded["group_size"] == "64"
    assert recorded["awq"] == "True" and recorded["scale_estimation"] == "False"


def test_the_card_line_names_the_settings_source_and_the_fallback():
    import jinja2

    from bot.core.fingerprints import TEMPLATES

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined)
    settings = recommended_int4("Qwen/Qwen3-8B", RECIPE, defaults=optimum_default_4bit_configs())
    fallback = with_calibration(settings, "the export runs offline")
    text = env.get_template("_int4_settings.md.j2").render(int4=fallback.as_provenance())
    assert "optimum-intel's default 4-bit configuration for `Qwen/Qwen3-8B` (int4_asym, group size 128" in text
    assert "Note: data-free fallback: the export runs offline" in text
    recipe_text = env.get_template("_int4_settings.md.j2").render(int4=recommended_int4(None, RECIPE).as_provenance())
    assert "Settings: the recipe's (int4_asym, group size 128, ratio 1.0)." in recipe_text
