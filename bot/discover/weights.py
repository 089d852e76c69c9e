"""Weights: safetensors only, and whole, checked from the file names and the safetensors headers alone.

A pickle can run code when loaded, so the bot never downloads or opens one; a safetensors file is held to its own
header (every tensor's offsets and shape agree, the file holds every byte they claim) before an exporter sees it.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from pathlib import Path

from bot.core.errors import Skip, Stage
from bot.discover.safe_json import checked_int, load_json, shown

MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
MAX_SAFETENSORS_BYTES = 2**53  # bytes; far beyond any file, and still exact as a float
# Bytes per element of the safetensors dtypes; a tensor of another dtype has its byte count unchecked.
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


def require_safetensors(names: Iterable[str], *, where: str, subject: str | None, stage: Stage) -> None:
    """The one weights rule, for a repo's listing and a downloaded folder alike: safetensors only. A pickle can
    run code when loaded, so the bot never downloads or opens one, and a pickle-only checkpoint is a skip that
    says so.

    Args:
        names: the file names of the repo or folder.
        where: "repo" or "checkpoint", for the message.

    Raises:
        Skip: no `*.safetensors` among `names` (naming the pickles when those are the only weights).
    """
    names = list(names)
    if any(name.endswith(".safetensors") for name in names):
        return
    pickles = sorted(name for name in names if name.endswith(PICKLE_SUFFIXES))
    if pickles:
        raise Skip(
            f"weights only in pickle format ({', '.join(pickles[:3])}); the bot loads safetensors only "
            "and never unpickles",
            subject=subject,
            stage=stage,
        )
    raise Skip(f"no *.safetensors weights in the {where}", subject=subject, stage=stage)


def check_weights(folder: Path, *, subject: str | None = None) -> int:
    """Check the weights are safetensors and whole; return their total size in bytes.

    Reads only the safetensors headers. Pickle files are never opened: loading them can run arbitrary code.

    Raises:
        Skip: pickle-only weights, no weights, a shard listed in the index but absent, or a truncated file.
    """
    require_safetensors(
        [path.name for path in folder.iterdir()], where="checkpoint", subject=subject, stage=Stage.CLASSIFY
    )
    tensors = sorted(folder.glob("*.safetensors"))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError):
            raise Skip(
                "model.safetensors.index.json is not a valid shard index", subject=subject, stage=Stage.CLASSIFY
            ) from None
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            raise Skip(
                f"shards listed in the index are missing: {', '.join(missing)}", subject=subject, stage=Stage.CLASSIFY
            )
    return sum(safetensors_size(path, subject=subject) for path in tensors)


def safetensors_size(path: Path, *, subject: str | None = None) -> int:
    """Validate one safetensors file against its own header and return its size.

    Raises:
        Skip: header unreadable, or the file holds fewer bytes than the header's offsets claim.
    """
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise Skip(f"{path.name} is too short to be safetensors", subject=subject, stage=Stage.CLASSIFY)
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > min(MAX_SAFETENSORS_HEADER, size - 8):
            raise Skip(
                f"{path.name} has a header length of {header_len} bytes but the file holds {size}",
                subject=subject,
                stage=Stage.CLASSIFY,
            )
        try:
            header = load_json(handle.read(header_len).decode("utf-8"), f"{path.name} header")
        except Skip as skip:
            raise skip.at(subject=subject, stage=Stage.CLASSIFY) from None
        except (ValueError, RecursionError):
            raise Skip(
                f"{path.name} has an unreadable safetensors header", subject=subject, stage=Stage.CLASSIFY
            ) from None
    if not isinstance(header, dict):
        raise Skip(f"{path.name} has an unreadable safetensors header", subject=subject, stage=Stage.CLASSIFY)
    data_end = 0
    for name, entry in header.items():
        if name != "__metadata__":
            data_end = max(data_end, _tensor_end(entry, f"{path.name}: tensor '{name}'", subject))
    expected = 8 + header_len + data_end
    if size < expected:
        raise Skip(
            f"{path.name} is truncated: its header describes {expected} bytes, the file holds {size}",
            subject=subject,
            stage=Stage.CLASSIFY,
        )
    return size


def _tensor_end(entry: object, where: str, subject: str | None) -> int:
    """Where one safetensors tensor's bytes end, after checking its offsets and shape agree with each other.

    Raises:
        Skip: not an object; `data_offsets` not two non-negative integers in order; `shape` not a list of
            non-negative integers; or, for a known dtype, a byte count that does not match the shape.
    """
    if not isinstance(entry, dict):
        raise Skip(f"{where} is not an object", subject=subject, stage=Stage.CLASSIFY)
    offsets, shape = entry.get("data_offsets"), entry.get("shape")
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise Skip(
            f"{where} has no valid data_offsets (two integers), got {shown(offsets)}",
            subject=subject,
            stage=Stage.CLASSIFY,
        )
    begin = checked_int(offsets[0], f"{where} data_offsets[0]", subject, minimum=0, maximum=MAX_SAFETENSORS_BYTES)
    end = checked_int(offsets[1], f"{where} data_offsets[1]", subject, minimum=begin, maximum=MAX_SAFETENSORS_BYTES)
    if not isinstance(shape, list):
        raise Skip(
            f"{where} has no valid shape (a list of integers), got {shown(shape)}",
            subject=subject,
            stage=Stage.CLASSIFY,
        )
    dims = [
        checked_int(dim, f"{where} shape[{i}]", subject, minimum=0, maximum=MAX_SAFETENSORS_BYTES)
        for i, dim in enumerate(shape)
    ]
    itemsize = SAFETENSORS_DTYPE_BYTES.get(str(entry.get("dtype")))
    if itemsize is not None and math.prod(dims) * itemsize != end - begin:
        raise Skip(
            f"{where} has shape {dims} of {entry.get('dtype')} ({math.prod(dims) * itemsize} bytes) but "
            f"data_offsets [{begin}, {end}] ({end - begin} bytes)",
            subject=subject,
            stage=Stage.CLASSIFY,
        )
    return end
