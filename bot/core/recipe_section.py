"""The base of every recipe section (`bot.core.recipe`, `bot.core.watch`, `bot.core.runners`): an unknown key is
refused, so a typo in a maintainer's recipe is an error naming the key rather than a silent default, and a loaded
recipe is frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RecipeSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
