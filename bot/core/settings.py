"""The environment, read once into a typed record that commands pass down (STYLE §4: settings in one place).

Nothing else in `bot/` reads `os.environ` for configuration: the CLI builds `Settings.from_env(os.environ)` and
hands it on, and tests build `Settings.from_env({...})` with exactly what they mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
# Values masked in an Actions log at start-up, before anything can print them.
TOKEN_VARIABLES = ("HF_TOKEN", "HF_READ_TOKEN", "HUGGING_FACE_HUB_TOKEN")


@dataclass(frozen=True)
class Settings:
    """What the environment says about this run.

    Attributes:
        endpoint: the Hub (`HF_ENDPOINT`, default huggingface.co).
        write_token: `HF_TOKEN`, only ever given to the publishing side.
        read_token: `HF_READ_TOKEN`, for discovery and downloads (gated sources).
        on_actions: `GITHUB_ACTIONS == "true"`.
        github_output / step_summary: the runner's command files.
        runner_name: `RUNNER_NAME`, shown in a build job's summary.
        profiles_dir: where toolchain-profile environments live (`DFLASH_BOT_PROFILES_DIR`).
    """

    endpoint: str = DEFAULT_ENDPOINT
    write_token: str | None = None
    read_token: str | None = None
    on_actions: bool = False
    github_output: str | None = None
    step_summary: str | None = None
    runner_name: str = "local"
    profiles_dir: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, endpoint: str | None = None) -> Settings:
        """Args:
        env: the process environment (a plain dict in tests).
        endpoint: a `--endpoint` option, which wins over `HF_ENDPOINT`.
        """
        return cls(
            endpoint=(endpoint or env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            write_token=env.get("HF_TOKEN") or None,
            read_token=env.get("HF_READ_TOKEN") or None,
            on_actions=env.get("GITHUB_ACTIONS") == "true",
            github_output=env.get("GITHUB_OUTPUT") or None,
            step_summary=env.get("GITHUB_STEP_SUMMARY") or None,
            runner_name=env.get("RUNNER_NAME") or "local",
            profiles_dir=Path(env["DFLASH_BOT_PROFILES_DIR"]) if env.get("DFLASH_BOT_PROFILES_DIR") else None,
        )

    @property
    def reader_token(self) -> str | None:
        """The token discovery and downloads use: the read token, else the write token (one-process `run`)."""
        return self.read_token or self.write_token

    def token_values(self) -> list[str]:
        return [t for t in (self.write_token, self.read_token) if t]

    def without_write_token(self) -> Settings:
        """What a build (which loads untrusted checkpoints) may know."""
        from dataclasses import replace

        return replace(self, write_token=None)
