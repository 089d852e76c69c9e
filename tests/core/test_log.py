"""bot.core.log: plain vs Actions output, annotation escaping, `::` lines disarmed, groups and steps."""

from __future__ import annotations

import logging
import sys

import pytest

from bot.core import log


def record(level: int, message: str, *args: object, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("dflash-bot", level, __file__, 1, message, args, exc_info)


@pytest.fixture
def plain(monkeypatch):
    monkeypatch.setitem(log._state, "on_actions", False)


@pytest.fixture
def actions(monkeypatch):
    monkeypatch.setitem(log._state, "on_actions", True)


@pytest.fixture
def captured(caplog, monkeypatch):
    """The bot's logger sending its records to caplog only (not propagated twice through the root logger)."""
    logger = log.get()
    monkeypatch.setattr(logger, "propagate", False)
    logger.addHandler(caplog.handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.setLevel(level)


def test_annotation_escapes_the_way_the_runner_decodes():
    assert log.annotation("error", "50% done\nnext line") == "::error::50%25 done%0Anext line"
    # A carriage return is a control character: cleaned away before escaping, so it cannot reach the runner.
    assert log.annotation("error", "a\r\nb") == "::error::a%0Ab"


def test_annotation_is_cleaned():
    assert log.annotation("warning", "a\u202eb\x07c") == "::warning::abc"


def test_plain_formatter_cleans_but_keeps_newlines():
    text = log.CleanFormatter("%(message)s").format(record(logging.INFO, "one\u200b\ntwo\x1b"))
    assert text == "one\ntwo"


def test_actions_formatter_annotates_errors_and_warnings():
    formatter = log.ActionsFormatter("%(message)s")
    assert formatter.format(record(logging.ERROR, "broke %s", "x\ny")) == "::error::broke x%0Ay"
    assert formatter.format(record(logging.WARNING, "careful")) == "::warning::careful"
    assert formatter.format(record(logging.CRITICAL, "down")) == "::error::down"


def test_actions_formatter_disarms_command_lines_in_info():
    formatter = log.ActionsFormatter("%(message)s")
    text = formatter.format(record(logging.INFO, "ok\n  ::add-mask::secret\n::stop-commands::x\nfine :: here"))
    assert text == "ok\n  : :add-mask::secret\n: :stop-commands::x\nfine :: here"
    assert not any(line.lstrip().startswith("::") for line in text.split("\n"))


def test_actions_formatter_puts_the_traceback_after_the_annotation_disarmed():
    try:
        raise ValueError("::add-mask::boom")
    except ValueError:
        info = sys.exc_info()
    text = log.ActionsFormatter("%(message)s").format(record(logging.ERROR, "failed", exc_info=info))
    lines = text.split("\n")
    assert lines[0] == "::error::failed"
    assert lines[1].startswith("Traceback")
    assert any("ValueError: ::add-mask::boom" in line for line in lines[1:])
    assert not any(line.lstrip().startswith("::") for line in lines[1:])


def test_plain_formatter_leaves_warnings_plain():
    assert log.CleanFormatter("%(message)s").format(record(logging.WARNING, "careful")) == "careful"


def test_error_line_plain(plain):
    assert log.error_line("a\nb") == "a\nb"


def test_error_line_on_actions(actions):
    assert log.error_line("a\nb") == "::error::a%0Ab"


def test_group_and_step_plain(plain, captured, capsys):
    with log.group("export"):
        log.step("%d files", 3)
    messages = [r.getMessage() for r in captured.records]
    assert messages[0] == "==> export"
    assert messages[1] == "    3 files"
    assert messages[2].startswith("    export done in ") and messages[2].endswith("s")
    assert "::group::" not in capsys.readouterr().out


def test_group_on_actions_folds(actions, captured, capsys):
    with log.group("validate"):
        pass
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("::group") and out.splitlines()[0].endswith("::validate")
    assert "::endgroup::" in out
    messages = [r.getMessage() for r in captured.records]
    assert "==> validate" not in messages
    assert messages[-1].startswith("    validate done in ")


def test_group_closes_on_error(actions, captured, capsys):
    with pytest.raises(RuntimeError), log.group("publish"):
        raise RuntimeError("x")
    assert "::endgroup::" in capsys.readouterr().out
    assert captured.records[-1].getMessage().startswith("    publish done in ")


def test_setup_picks_the_formatter_and_level(monkeypatch):
    logger = log.get()
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "propagate", logger.propagate)
    monkeypatch.setattr(logger, "level", logger.level)
    monkeypatch.setitem(log._state, "on_actions", log._state["on_actions"])
    assert log.setup(verbose=True, on_actions=True) is logger
    assert log.on_github_actions() is True
    assert logger.level == logging.DEBUG
    assert logger.propagate is False
    assert [type(h.formatter) for h in logger.handlers] == [log.ActionsFormatter]
    log.setup(on_actions=False)
    assert log.on_github_actions() is False
    assert logger.level == logging.INFO
    assert len(logger.handlers) == 1
    assert type(logger.handlers[0].formatter) is log.CleanFormatter


def test_the_log_survives_a_library_that_disables_existing_loggers(own_logger, capsys):
    """`logging.config.dictConfig` (disable_existing_loggers, the default) silences every logger made before it, as
    a library imported in-process may do; the bot's own log must still be heard after `setup`."""
    import logging.config

    logger = logging.getLogger("dflash-bot")
    logger.handlers.clear()
    logging.config.dictConfig({"version": 1})
    assert logger.disabled
    log.setup()
    log.get().error("still heard")
    assert "still heard" in capsys.readouterr().err
