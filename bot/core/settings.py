"""The environment, read once into a typed record that commands pass down (docs/design.md §1: settings in one place).

Nothing else in `bot/` reads an environment variable for configuration: the CLI builds `Settings.from_env(os.environ)`
and hands it (or the one field a function needs) on, to the processes it starts too (the builder gets the variables,
a sandbox child its command line); tests build `Settings.from_env({...})` with exactly what they mean.
tests/core/test_settings.py holds the list of the places that may still touch `os.environ` (to remove a token, to set
a switch, to copy the environment for a child), and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
SANDBOX_VARIABLE = "DFLASH_BOT_SANDBOX"
PROFILES_VARIABLE = "DFLASH_BOT_PROFILES_DIR"
# The OS confinement layers of the checkpoint-loading children (bot.sandbox.confinement), all used by default.
SANDBOX_LAYERS = ("namespaces", "landlock")
ACTIONS_CONTEXT = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA", "GITHUB_RUN_ID")


def _default_profiles_dir(cache: Path | None = None) -> Path:
    return (cache or Path.home() / ".cache") / "dflash-bot" / "profiles"


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
        profiles_dir: where toolchain-profile environments are created and reused (`DFLASH_BOT_PROFILES_DIR`,
            default `$XDG_CACHE_HOME/dflash-bot/profiles`, else `~/.cache/dflash-bot/profiles`; CI may cache it).
        actions_context: the Actions run's `GITHUB_SERVER_URL`, `GITHUB_REPOSITORY`, `GITHUB_SHA` and
            `GITHUB_RUN_ID` (those set): the source a card's install line pins, and the run whose artifacts the
            publish job fetches.
        sandbox_layers: the OS confinement layers the checkpoint children may use (`DFLASH_BOT_SANDBOX`: `auto`,
            the default, for all of them; `none`; or a comma list of `namespaces`, `landlock`), to test each layer
            alone and for machines where one misbehaves.
    """

    endpoint: str = DEFAULT_ENDPOINT
    write_token: str | None = field(default=None, repr=False)  # never in a log line or a traceback
    read_token: str | None = field(default=None, repr=False)
    on_actions: bool = False
    github_output: str | None = None
    step_summary: str | None = None
    runner_name: str = "local"
    profiles_dir: Path = field(default_factory=_default_profiles_dir)
    sandbox_layers: tuple[str, ...] = SANDBOX_LAYERS
    actions_context: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, endpoint: str | None = None) -> Settings:
        """Args:
        env: the process environment (a plain dict in tests).
        endpoint: a `--endpoint` option, which wins over `HF_ENDPOINT`.

        Raises:
            ValueError: `DFLASH_BOT_SANDBOX` names an unknown layer (the CLI reports it as a usage error).
        """
        cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else None
        if cache is None and env.get("HOME"):
            cache = Path(env["HOME"]) / ".cache"
        return cls(
            endpoint=(endpoint or env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            write_token=env.get("HF_TOKEN") or None,
            read_token=env.get("HF_READ_TOKEN") or None,
            on_actions=env.get("GITHUB_ACTIONS") == "true",
            github_output=env.get("GITHUB_OUTPUT") or None,
            step_summary=env.get("GITHUB_STEP_SUMMARY") or None,
            runner_name=env.get("RUNNER_NAME") or "local",
            profiles_dir=Path(env[PROFILES_VARIABLE]) if env.get(PROFILES_VARIABLE) else _default_profiles_dir(cache),
            sandbox_layers=sandbox_layers(env.get(SANDBOX_VARIABLE, "auto")),
            actions_context={name: env[name] for name in ACTIONS_CONTEXT if env.get(name)},
        )

    @property
    def reader_token(self) -> str | None:
        """The token discovery and downloads use: the read token, else the write token (one-process `run`)."""
        return self.read_token or self.write_token

    def token_values(self) -> list[str]:
        """The token values to mask in an Actions log."""
        return [t for t in (self.write_token, self.read_token) if t]

    def without_write_token(self) -> Settings:
        """What a build (which loads untrusted checkpoints) may know."""
        return replace(self, write_token=None)

    def builder_variables(self) -> dict[str, str]:
        """The variables that hand these settings' build side on to a builder process (`dflash-bot build --job`,
        which reads them back with `from_env`): the same profile environments, the same confinement."""
        return {SANDBOX_VARIABLE: ",".join(self.sandbox_layers) or "none", PROFILES_VARIABLE: str(self.profiles_dir)}


def sandbox_layers(value: str) -> tuple[str, ...]:
    """The layers a `DFLASH_BOT_SANDBOX` value allows.

    Raises:
        ValueError: an unknown layer name (a misspelt value must not quietly run the children unconfined).
    """
    value = value.strip().lower()
    if value in ("", "auto"):
        return SANDBOX_LAYERS
    if value == "none":
        return ()
    layers = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [layer for layer in layers if layer not in SANDBOX_LAYERS]
    if unknown:
        choices = ", ".join(SANDBOX_LAYERS)
        raise ValueError(f"{SANDBOX_VARIABLE}={value!r}: unknown layer {unknown[0]!r} (use auto, none or {choices})")
    return layers
