"""The Hub's checks of a card's metadata block, for the fields the bot and its sources use.

The Hub refuses a commit whose README.md metadata breaks these rules, and `POST /api/validate-yaml` says why; where
a rule's text was seen, it is copied:

- `license`: one of the identifiers of https://huggingface.co/docs/hub/repositories-licenses (hub-docs,
  docs/hub/repositories-licenses.md, "licenses" region); the Hub's text `"license" must be one of [...]` is what
  huggingface_hub's tests/test_repocard.py (`test_validate_repocard`) matches after `card.data.license = "asdf"`.
- `base_model`: a model id that exists; the Hub's text `"base_model" with value "X" is not valid. Use a model id
  from https://hf.co/models.` (reported verbatim from `create_commit` failures).
- `model-index: foo` is refused: huggingface_hub's tests/test_hf_api.py `INVALID_MODELCARD` makes
  `create_commit` raise "Invalid metadata in README.md".
- `pipeline_tag`: one of `PIPELINE_DATA` of huggingface.js packages/tasks/src/pipelines.ts.
- `base_model_relation`: adapter, merge, quantized or finetune (hub-docs, docs/hub/model-cards.md).
- `library_name`, `license_name`, `license_link`: free text, but text; `tags`: a list of strings (or one string).

Messages follow the Hub's (Joi) style: `"field" must be ...`. Fields not listed here are not checked, as the Hub
lets unknown keys through.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

# The Hub's license identifiers (the same list as bot/discover/source_card.py's HUB_LICENSES; a test keeps them equal).
HUB_LICENSES = frozenset(
    [
        "apache-2.0",
        "mit",
        "openrail",
        "bigscience-openrail-m",
        "creativeml-openrail-m",
        "bigscience-bloom-rail-1.0",
        "bigcode-openrail-m",
        "afl-3.0",
        "artistic-2.0",
        "bsl-1.0",
        "bsd",
        "bsd-2-clause",
        "bsd-3-clause",
        "bsd-3-clause-clear",
        "c-uda",
        "cc",
        "cc0-1.0",
        "cc-by-2.0",
        "cc-by-2.5",
        "cc-by-3.0",
        "cc-by-4.0",
        "cc-by-sa-3.0",
        "cc-by-sa-4.0",
        "cc-by-nc-2.0",
        "cc-by-nc-3.0",
        "cc-by-nc-4.0",
        "cc-by-nd-4.0",
        "cc-by-nc-nd-3.0",
        "cc-by-nc-nd-4.0",
        "cc-by-nc-sa-2.0",
        "cc-by-nc-sa-3.0",
        "cc-by-nc-sa-4.0",
        "cdla-sharing-1.0",
        "cdla-permissive-1.0",
        "cdla-permissive-2.0",
        "wtfpl",
        "ecl-2.0",
        "epl-1.0",
        "epl-2.0",
        "etalab-2.0",
        "eupl-1.1",
        "eupl-1.2",
        "agpl-3.0",
        "gfdl",
        "gpl",
        "gpl-2.0",
        "gpl-3.0",
        "lgpl",
        "lgpl-2.1",
        "lgpl-3.0",
        "isc",
        "h-research",
        "intel-research",
        "lppl-1.3c",
        "ms-pl",
        "apple-ascl",
        "apple-amlr",
        "mpl-2.0",
        "odc-by",
        "odbl",
        "openrail++",
        "osl-3.0",
        "postgresql",
        "ofl-1.1",
        "ncsa",
        "unlicense",
        "zlib",
        "pddl",
        "lgpl-lr",
        "deepfloyd-if-license",
        "fair-noncommercial-research-license",
        "llama2",
        "llama3",
        "llama3.1",
        "llama3.2",
        "llama3.3",
        "llama4",
        "gemma",
        "unknown",
        "other",
    ]
)

PIPELINE_TAGS = frozenset(
    [
        "biology",
        "text-classification",
        "token-classification",
        "table-question-answering",
        "question-answering",
        "zero-shot-classification",
        "translation",
        "summarization",
        "feature-extraction",
        "text-generation",
        "text2text-generation",
        "fill-mask",
        "sentence-similarity",
        "text-to-speech",
        "text-to-audio",
        "automatic-speech-recognition",
        "audio-to-audio",
        "audio-classification",
        "audio-text-to-text",
        "voice-activity-detection",
        "depth-estimation",
        "image-classification",
        "object-detection",
        "image-segmentation",
        "text-to-image",
        "image-to-text",
        "image-to-image",
        "image-to-video",
        "unconditional-image-generation",
        "video-classification",
        "reinforcement-learning",
        "robotics",
        "tabular-classification",
        "tabular-regression",
        "tabular-to-text",
        "table-to-text",
        "multiple-choice",
        "text-ranking",
        "text-retrieval",
        "time-series-forecasting",
        "text-to-video",
        "image-text-to-text",
        "visual-question-answering",
        "document-question-answering",
        "zero-shot-image-classification",
        "graph-ml",
        "mask-generation",
        "zero-shot-object-detection",
        "text-to-3d",
        "image-to-3d",
        "image-feature-extraction",
        "video-text-to-text",
        "keypoint-detection",
        "visual-document-retrieval",
        "any-to-any",
        "other",
    ]
)

BASE_MODEL_RELATIONS = ("adapter", "merge", "quantized", "finetune")

_MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _one_of(field: str, allowed: frozenset[str] | tuple[str, ...]) -> str:
    return f'"{field}" must be one of [{", ".join(sorted(allowed) if isinstance(allowed, frozenset) else allowed)}]'


def _strings(field: str, value: Any) -> tuple[list[str], list[str]]:
    """A string or a list of strings as a list, and the errors for anything else."""
    if isinstance(value, str):
        return [value], []
    if not isinstance(value, list):
        return [], [f'"{field}" must be one of [string, array]']
    errors = [f'"{field}[{index}]" must be a string' for index, item in enumerate(value) if not isinstance(item, str)]
    return [item for item in value if isinstance(item, str)], errors


def _model_index(value: Any) -> list[str]:
    if not isinstance(value, list):
        return ['"model-index" must be an array']
    errors = []
    for index, entry in enumerate(value):
        where = f"model-index[{index}]"
        if not isinstance(entry, dict):
            errors.append(f'"{where}" must be of type object')
            continue
        if not isinstance(entry.get("name"), str):
            errors.append(f'"{where}.name" is required and must be a string')
        results = entry.get("results")
        if not isinstance(results, list):
            errors.append(f'"{where}.results" must be an array')
            continue
        for number, result in enumerate(results):
            spot = f"{where}.results[{number}]"
            if not isinstance(result, dict):
                errors.append(f'"{spot}" must be of type object')
                continue
            task, dataset, metrics = result.get("task"), result.get("dataset"), result.get("metrics")
            if not isinstance(task, dict) or not isinstance(task.get("type"), str):
                errors.append(f'"{spot}.task.type" is required and must be a string')
            if not isinstance(dataset, dict) or not all(isinstance(dataset.get(k), str) for k in ("type", "name")):
                errors.append(f'"{spot}.dataset" must have a string "type" and "name"')
            if not isinstance(metrics, list) or not all(
                isinstance(m, dict) and isinstance(m.get("type"), str) and "value" in m for m in metrics
            ):
                errors.append(f'"{spot}.metrics" must be an array of objects with "type" and "value"')
    return errors


def check_metadata(metadata: Mapping[str, Any], repo_type: str, *, model_exists: Callable[[str], bool]) -> list[str]:
    """The Hub's error messages for this metadata block (empty when it would be accepted).

    Args:
        repo_type: "model", "dataset" or "space"; `base_model`, `pipeline_tag`, `base_model_relation` and
            `model-index` are model-card fields.
        model_exists: whether a model id names an existing model repo (`base_model` must).
    """
    errors: list[str] = []
    if "license" in metadata and metadata["license"] is not None:
        licenses, problems = _strings("license", metadata["license"])
        errors += problems
        if any(item not in HUB_LICENSES for item in licenses):
            errors.append(_one_of("license", HUB_LICENSES))
    for field in ("license_name", "license_link", "library_name"):
        if metadata.get(field) is not None and not isinstance(metadata[field], str):
            errors.append(f'"{field}" must be a string')
    if metadata.get("tags") is not None:
        errors += _strings("tags", metadata["tags"])[1]
    if repo_type != "model":
        return errors
    if metadata.get("pipeline_tag") is not None and metadata["pipeline_tag"] not in PIPELINE_TAGS:
        errors.append(_one_of("pipeline_tag", PIPELINE_TAGS))
    relation = metadata.get("base_model_relation")
    if relation is not None and relation not in BASE_MODEL_RELATIONS:
        errors.append(_one_of("base_model_relation", BASE_MODEL_RELATIONS))
    if metadata.get("base_model") is not None:
        bases, problems = _strings("base_model", metadata["base_model"])
        errors += problems
        for base in bases:
            if not _MODEL_ID_RE.fullmatch(base) or not model_exists(base):
                errors.append(
                    f'"base_model" with value "{base}" is not valid. Use a model id from https://hf.co/models.'
                )
    if "model-index" in metadata:
        errors += _model_index(metadata["model-index"])
    return errors
