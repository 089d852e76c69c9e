"""Which int4 settings a target is exported with, and what the IR says it got.

optimum-intel ships tuned 4-bit weight-compression configs for well-known model ids
(`optimum.intel.openvino.configuration._DEFAULT_4BIT_WQ_CONFIGS`, 72 entries in 2.2.0, among them Qwen3-1.7B,
-4B and -8B). `optimum-cli` applies one only when the model path or its `config.json` `_name_or_path` names that
id, which a build's sanitised working copy never does, so the bot looks the id up itself and passes the settings as
explicit flags; a target without an entry gets the recipe's settings.

Data-aware options (a calibration `dataset`, scale estimation, GPTQ, LoRA correction, activation-based sensitivity
metrics) need the dataset from the Hub while the export runs, and exports run offline in a token-free child. When
the dataset cannot be had, the settings fall back to data-free ones (AWQ stays on: without a dataset NNCF runs its
data-free variant) and `note` says so, for the report and the card. The IR's `nncf/weight_compression` rt_info is
the record of what was really applied (`read_ir_quantization`).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from bot.builder.ir_read import quantization_parameters, read_rt_info
from bot.core.errors import Failure, Stage
from bot.core.profiles import json_from
from bot.core.recipe import ExportSettings, WeightCompression

Source = Literal["optimum-intel default", "recipe"]
# Keys of a default config the CLI flags express; anything else (ignored scopes, two-pass configs) cannot be
# passed through `optimum-cli` flags, so such an entry is reported and the recipe's settings are used.
_FLAG_KEYS = {
    "bits",
    "sym",
    "group_size",
    "ratio",
    "all_layers",
    "quant_method",
    "dataset",
    "num_samples",
    "scale_estimation",
    "gptq",
    "lora_correction",
    "sensitivity_metric",
    "backup_precision",
    "group_size_fallback",
    "dq_group_size",
    "weight_only",
}
# Runtime settings in a default config that are not weight compression (dq_group_size is a CPU inference hint).
_RUNTIME_KEYS = {"dq_group_size", "weight_only"}
_DATA_FREE_METRICS = {None, "weight_quantization_error"}

_READ_DEFAULTS = """
import json, sys
sys.modules["openvino_telemetry"] = None  # NNCF and ovc take their stubs: no telemetry (bot.sandbox.telemetry)
from optimum.intel.openvino.configuration import _DEFAULT_4BIT_WQ_CONFIGS
def plain(value):
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return getattr(value, "value", value)
json.dump(plain(_DEFAULT_4BIT_WQ_CONFIGS), sys.stdout)
"""


class Int4Settings(WeightCompression):
    """The int4 weight compression a target export asks for (the optimum-cli flags, as a record): the recipe's
    weight compression (`bot.core.recipe.WeightCompression`) and NNCF's options beyond it.

    Attributes:
        source: "optimum-intel default" (its tuned config for `model_id`) or "recipe".
        note: why the settings differ from what the source recommends (a data-free fallback, an entry the CLI
            cannot express), for the report and the card; None when they do not.
    """

    weight_format: Literal["int4"] = "int4"
    source: Source
    model_id: str | None = None
    all_layers: bool = False
    awq: bool = False
    scale_estimation: bool = False
    gptq: bool = False
    lora_correction: bool = False
    dataset: str | None = None
    num_samples: int | None = None
    sensitivity_metric: str | None = None
    note: str | None = None

    @property
    def mode(self) -> str:
        return "int4_sym" if self.sym else "int4_asym"

    @property
    def data_aware(self) -> bool:
        """True when the export needs a calibration dataset."""
        return bool(
            self.dataset
            or self.scale_estimation
            or self.gptq
            or self.lora_correction
            or self.sensitivity_metric not in _DATA_FREE_METRICS
        )

    def as_provenance(self) -> dict:
        """The record's `export.target_int4`, its keys in the order published records have them."""
        return {"mode": self.mode, **{key: getattr(self, key) for key in _PROVENANCE_KEYS}}

    def cli_args(self) -> list[str]:
        """The `optimum-cli export openvino` compression flags (everything but the model, task and output)."""
        flags = {
            "--all-layers": self.all_layers,
            "--awq": self.awq,
            "--scale-estimation": self.scale_estimation,
            "--gptq": self.gptq,
            "--lora-correction": self.lora_correction,
        }
        args = [*super().cli_args(), *(flag for flag, on in flags.items() if on)]
        for flag, value in (
            ("--dataset", self.dataset),
            ("--num-samples", self.num_samples),
            ("--sensitivity-metric", self.sensitivity_metric),
        ):
            if value is not None:
                args += [flag, str(value)]
        return args


# `Int4Settings.as_provenance`'s keys after "mode" (every field but weight_format, always int4), in the order
# records published before the fields were defined once have them: the record's JSON stays byte for byte.
_PROVENANCE_KEYS = (
    "sym",
    "group_size",
    "ratio",
    "source",
    "model_id",
    "all_layers",
    "awq",
    "scale_estimation",
    "gptq",
    "lora_correction",
    "dataset",
    "num_samples",
    "sensitivity_metric",
    "backup_precision",
    "group_size_fallback",
    "note",
)


def from_recipe(export: ExportSettings, *, model_id: str | None = None, note: str | None = None) -> Int4Settings:
    """The recipe's int4 settings as a record (int4 whatever the recipe's own weight format)."""
    compression = export.compression().model_dump(exclude={"weight_format"})
    return Int4Settings(**compression, source="recipe", model_id=model_id, note=note)


@functools.lru_cache(maxsize=4)
def optimum_default_4bit_configs(python: str | None = None) -> Mapping[str, dict]:
    """optimum-intel's default 4-bit configs by model id, from the toolchain that will run the export.

    Read from its source file without importing it (`read_default_4bit_configs`: importing optimum-intel costs
    seconds of CPU for torch, transformers and NNCF, before any export can start); when the source is not in the
    shape that reader knows, imported in a short child process of `python` (the job's toolchain profile), so the
    parent neither imports torch and NNCF nor reads another profile's optimum-intel.

    Raises:
        Failure: the toolchain's optimum-intel no longer has `_DEFAULT_4BIT_WQ_CONFIGS` (renamed upstream).
    """
    source = _package_folder("optimum", python)
    table = read_default_4bit_configs(source / "intel" / "openvino" / "configuration.py") if source else None
    if table is not None:
        return table
    result = subprocess.run(
        [python or sys.executable, "-c", _READ_DEFAULTS], capture_output=True, text=True, timeout=300, check=False
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise Failure(f"cannot read optimum-intel's default 4-bit configs: {last}", stage=Stage.EXPORT)
    return json.loads(result.stdout)


_LOCATE = (
    "import importlib.util, json, sys; s = importlib.util.find_spec(sys.argv[1]); "
    "print(json.dumps(s.submodule_search_locations[0] if s and s.submodule_search_locations else None))"
)


def _package_folder(name: str, python: str | None) -> Path | None:
    """The folder of top-level package `name` in `python`'s environment (found by importlib, not imported)."""
    if python is None or Path(python) == Path(sys.executable):
        spec = importlib.util.find_spec(name)
        return Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    folder, _ = json_from(python, _LOCATE, name)
    return Path(folder) if folder else None


_TABLE = "_DEFAULT_4BIT_WQ_CONFIGS"


def read_default_4bit_configs(configuration: Path) -> dict | None:
    """`_DEFAULT_4BIT_WQ_CONFIGS` evaluated from optimum-intel's `configuration.py` source, or None when the module
    builds the table in a way this reader does not know (the caller then imports it).

    Known shape (optimum-intel 1.2x-2.x): one module-level dict literal whose values are literals or members of an
    enum class defined in the same module (`OVQuantizationMethod.AWQ`), then a `model_id_aliases` list of
    (existing id, alias) pairs copied in by a `for` loop. Any other module-level statement that names the table
    makes the result None rather than a table that might miss an entry.
    """
    try:
        tree = ast.parse(configuration.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    enums = {
        node.name: {
            target.id: item.value.value
            for item in node.body
            if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant)
            for target in item.targets
            if isinstance(target, ast.Name)
        }
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }

    table: dict | None = None
    aliases: list = []
    try:
        for statement in tree.body:
            names = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}
            if isinstance(statement, ast.Assign) and [ast.unparse(t) for t in statement.targets] == [_TABLE]:
                table = _literal(statement.value, enums)
            elif isinstance(statement, ast.Assign) and [ast.unparse(t) for t in statement.targets] == [
                "model_id_aliases"
            ]:
                aliases = _literal(statement.value, enums)
            elif isinstance(statement, ast.For) and _TABLE in names:
                if ast.unparse(statement) != (
                    f"for m_id_1, m_id_2 in model_id_aliases:\n    {_TABLE}[m_id_2] = {_TABLE}[m_id_1]"
                ):
                    return None
                for existing, alias in aliases:
                    table[alias] = table[existing]  # type: ignore[index]
            elif _TABLE in names and not isinstance(statement, ast.FunctionDef | ast.ClassDef):
                return None  # changed at import in a way not read here
    except (ValueError, TypeError, KeyError):
        return None
    return table if isinstance(table, dict) and table else None


def _literal(node: ast.expr, enums: dict[str, dict]):
    """A literal of the table's source (dicts, lists, numbers, strings, enum members), else ValueError."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {
            _literal(k, enums): _literal(v, enums)  # type: ignore[arg-type]
            for k, v in zip(node.keys, node.values, strict=True)
        }
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(item, enums) for item in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_literal(node.operand, enums)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        members = enums.get(node.value.id, {})
        if node.attr in members:
            return members[node.attr]
    raise ValueError(ast.unparse(node))


def recommended_int4(
    model_id: str | None,
    export: ExportSettings,
    *,
    defaults: Mapping[str, dict] | None = None,
    python: str | None = None,
) -> Int4Settings:
    """The int4 settings for a target: optimum-intel's default config for its model id, else the recipe's.

    Args:
        model_id: the target's Hub repo id (None for a folder build: the recipe's settings).
        export: the recipe's export settings (group-size fallback and the settings for unlisted targets).
        defaults: the default-config table (tests pass one; None reads the toolchain's).
        python: the interpreter of the job's toolchain profile, for reading its table.

    Returns:
        The settings; data-aware options are kept as listed (see `with_calibration`).
    """
    if model_id is None:
        return from_recipe(export)
    table = optimum_default_4bit_configs(python) if defaults is None else defaults
    config = table.get(model_id)
    if config is None:
        return from_recipe(export, model_id=model_id)
    notes = []
    if "quantization_configs" in config:  # per-submodel configs (VLMs): the language model's is the one exported
        others = sorted(set(config["quantization_configs"]) - {"lm_model"})
        config = config["quantization_configs"].get("lm_model", {})
        if others:
            notes.append(f"lm_model settings applied; {', '.join(others)} get optimum-cli's defaults")
    unsupported = sorted(set(config) - _FLAG_KEYS)
    if unsupported or config.get("bits", 4) != 4:
        return from_recipe(
            export,
            model_id=model_id,
            note=(
                f"optimum-intel's default config for {model_id} uses {', '.join(unsupported) or 'non-4-bit weights'}, "
                "which optimum-cli flags cannot express; the recipe's settings were used"
            ),
        )
    ignored = sorted(set(config) & _RUNTIME_KEYS)
    if ignored:
        notes.append(f"runtime settings not applied at export: {', '.join(ignored)}")
    try:
        return _listed_settings(config, model_id, export, notes)
    except ValidationError as error:
        where = ".".join(str(part) for part in error.errors()[0]["loc"])
        return from_recipe(
            export,
            model_id=model_id,
            note=f"optimum-intel's default config for {model_id} has a {where} optimum-cli flags do not take; "
            "the recipe's settings were used",
        )


def _listed_settings(config: dict, model_id: str, export: ExportSettings, notes: list[str]) -> Int4Settings:
    """The settings of one entry of optimum-intel's table (checked by `recommended_int4` to be flag-expressible)."""
    return Int4Settings(
        sym=bool(config.get("sym", False)),
        group_size=int(config.get("group_size", 128)),
        ratio=float(config.get("ratio", 1.0)),
        source="optimum-intel default",
        model_id=model_id,
        all_layers=bool(config.get("all_layers")),
        awq=config.get("quant_method") == "awq",
        scale_estimation=bool(config.get("scale_estimation")),
        gptq=bool(config.get("gptq")),
        lora_correction=bool(config.get("lora_correction")),
        dataset=config.get("dataset"),
        num_samples=config.get("num_samples"),
        sensitivity_metric=config.get("sensitivity_metric"),
        backup_precision=config.get("backup_precision"),
        group_size_fallback=str(config.get("group_size_fallback", export.group_size_fallback)),
        note="; ".join(notes) or None,
    )


def calibration_unavailable(dataset: str | None, *, python: str | None = None, prefetched: bool = False) -> str | None:
    """Why a data-aware export cannot get its calibration dataset, or None when it can.

    optimum-intel loads the dataset with the `datasets` package from the Hub (wikitext2 is
    `Salesforce/wikitext`) while it compresses; the export child runs offline with a private HF cache, so the
    dataset must be in the toolchain and prefetched into that cache by the stage that may use the network.
    """
    if dataset is None:
        return None
    if dataset == "auto":
        return None  # collected from the model's own generations: nothing to fetch
    if _package_folder("datasets", python) is None:
        return f"the toolchain has no `datasets` package to load the calibration dataset {dataset!r}"
    if not prefetched:
        return (
            f"the export runs offline and the calibration dataset {dataset!r} was not fetched from the Hub "
            "into its cache"
        )
    return None


def with_calibration(settings: Int4Settings, unavailable: str | None) -> Int4Settings:
    """Data-free settings when the calibration dataset cannot be had (`unavailable` says why), else `settings`.

    AWQ stays on: without a dataset NNCF applies data-free AWQ (per-column weight magnitudes). Scale estimation,
    GPTQ, LoRA correction and activation-based sensitivity metrics need activations and are dropped.
    """
    if unavailable is None or not settings.data_aware:
        return settings
    dropped = [
        name
        for name, on in (
            ("dataset " + repr(settings.dataset), settings.dataset),
            ("scale estimation", settings.scale_estimation),
            ("GPTQ", settings.gptq),
            ("LoRA correction", settings.lora_correction),
            (
                f"sensitivity metric {settings.sensitivity_metric}",
                settings.sensitivity_metric not in _DATA_FREE_METRICS,
            ),
        )
        if on
    ]
    note = f"data-free fallback: {unavailable}; dropped {', '.join(dropped)}"
    if settings.awq:
        note += " (AWQ runs data-free)"
    return settings.model_copy(
        update={
            "dataset": None,
            "num_samples": None,
            "scale_estimation": False,
            "gptq": False,
            "lora_correction": False,
            "sensitivity_metric": None
            if settings.sensitivity_metric not in _DATA_FREE_METRICS
            else settings.sensitivity_metric,
            "note": "; ".join(n for n in (settings.note, note) if n),
        }
    )


def weight_format_args(weight_format: str, export: ExportSettings) -> list[str]:
    """optimum-cli compression flags for a draft in `weight_format`: the recipe's int4, or per-channel int8."""
    if weight_format == "int8":
        return ["--weight-format", "int8"]
    if weight_format == "int4":
        return from_recipe(export).cli_args()
    raise ValueError(f"unknown weight format {weight_format!r}")


def read_ir_quantization(ir_xml: Path) -> dict:
    """What NNCF recorded in the IR's `nncf/weight_compression` rt_info (the card's Quantization Parameters)."""
    # openvino: a second to import; only the processes that read an IR need it
    import openvino as ov

    rt_info = read_rt_info(ov.Core().read_model(ir_xml))
    compression = rt_info.get("nncf", {}).get("weight_compression", {})
    return {**quantization_parameters(rt_info), **{k: compression[k] for k in ("lora_correction",) if k in compression}}
