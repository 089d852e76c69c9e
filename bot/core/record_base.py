"""The two pydantic bases every model of the build record derives from, and the draft format both halves name.

`bot.core.record` (the records, their reader and writer, the schema) and `bot.core.record_checks` (what the build's
checks found) build on these; the JSON Schema is generated from both (`python -m bot.core.record --write`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

DraftFormat = Literal["stateful", "per-row"]


class RecordModel(BaseModel):
    """A part of a record: frozen, and refusing keys it does not name (a field is renamed only with a schema bump)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


# Private-looking on purpose: the class name is the `$defs` key of the committed JSON Schema, and its docstring the
# schema's description of it.
class _Open(BaseModel):
    """A sub-record whose keys come from a tool (NNCF's rt_info), kept as the tool wrote them."""

    model_config = ConfigDict(frozen=True, extra="allow")
