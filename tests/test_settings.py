"""The environment is read once, into Settings; tests say exactly what it holds."""

from __future__ import annotations

from pathlib import Path

from bot.core.settings import DEFAULT_ENDPOINT, Settings


def test_an_empty_environment_is_huggingface_co_without_tokens():
    settings = Settings.from_env({})
    assert settings.endpoint == DEFAULT_ENDPOINT and settings.write_token is None and settings.reader_token is None
    assert not settings.on_actions and settings.runner_name == "local" and settings.profiles_dir is None


def test_every_variable_lands_in_its_field_and_the_option_wins_over_the_variable():
    env = {"HF_ENDPOINT": "http://hub.local/", "HF_TOKEN": "w", "HF_READ_TOKEN": "r", "GITHUB_ACTIONS": "true",
           "GITHUB_OUTPUT": "/o", "GITHUB_STEP_SUMMARY": "/s", "RUNNER_NAME": "runner-1",
           "DFLASH_BOT_PROFILES_DIR": "/p"}
    settings = Settings.from_env(env)
    assert (settings.endpoint, settings.write_token, settings.read_token) == ("http://hub.local", "w", "r")
    assert settings.on_actions and (settings.github_output, settings.step_summary) == ("/o", "/s")
    assert settings.runner_name == "runner-1" and settings.profiles_dir == Path("/p")
    assert settings.reader_token == "r" and settings.token_values() == ["w", "r"]
    assert Settings.from_env(env, endpoint="http://other").endpoint == "http://other"


def test_the_reader_falls_back_to_the_write_token_and_a_build_drops_it():
    settings = Settings.from_env({"HF_TOKEN": "w"})
    assert settings.reader_token == "w"
    build = settings.without_write_token()
    assert build.write_token is None and build.reader_token is None
