"""The draft weight-format chooser, on plain records."""

from __future__ import annotations

from bot.build.weight_formats import FormatResult, choose_draft_format


def result(
    fmt: str,
    speedup: float,
    *,
    size: int,
    lossless: bool = True,
    accepted: bool = True,
    k: int = 3,
    accept: float = 2.0,
) -> FormatResult:
    return FormatResult(
        weight_format=fmt,
        lossless=lossless,
        acceptance_passed=accepted,
        accept_length=accept,
        num_assistant_tokens=k,
        speedup=speedup,
        ir_bytes=size,
    )


def test_the_best_speedup_wins():
    choice = choose_draft_format([result("int4", 1.40, size=100), result("int8", 1.80, size=180, k=7)])
    assert choice.chosen == "int8"
    assert "×1.80 at num_assistant_tokens=7" in choice.reason and "int4 ×1.40" in choice.reason
    assert [r["weight_format"] for r in choice.as_provenance()["formats"]] == ["int4", "int8"]


def test_a_tie_goes_to_the_smaller_file():
    choice = choose_draft_format([result("int8", 1.50, size=180), result("int4", 1.49, size=100)])
    assert choice.chosen == "int4"
    assert "smaller file wins the tie" in choice.reason


def test_only_lossless_formats_are_eligible():
    choice = choose_draft_format([result("int4", 3.0, size=100, lossless=False), result("int8", 1.2, size=180)])
    assert choice.chosen == "int8"
    assert "int4 (failed the lossless gate)" in choice.reason


def test_a_format_that_passed_the_acceptance_gate_comes_first():
    choice = choose_draft_format([result("int4", 1.3, size=100, accepted=False), result("int8", 1.1, size=180)])
    assert choice.chosen == "int8"
    assert "int4 (failed the acceptance gate" in choice.reason


def test_no_lossless_format_means_no_choice():
    choice = choose_draft_format(
        [result("int4", 1.3, size=100, lossless=False), result("int8", 1.1, size=180, lossless=False)]
    )
    assert choice.chosen is None and "no draft format passed the lossless gate (int4, int8)" in choice.reason


def test_when_none_is_accepted_the_fastest_lossless_one_is_named():
    choice = choose_draft_format(
        [result("int4", 0.9, size=100, accepted=False), result("int8", 0.7, size=180, accepted=False)]
    )
    assert choice.chosen == "int4" and "no format passed the acceptance gate" in choice.reason


def test_the_card_section_lists_every_format_and_marks_the_published_one():
    import jinja2

    from bot.publish.card import TEMPLATES

    choice = choose_draft_format([result("int4", 1.40, size=100 << 20), result("int8", 1.80, size=180 << 20, k=7)])
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined)
    text = env.get_template("_draft_formats.md.j2").render(formats=choice.as_provenance())
    assert "| int4 | yes | 2.00 | 3 | 1.40× | 100.0 MiB |  |" in text
    assert "| int8 | yes | 2.00 | 7 | 1.80× | 180.0 MiB | **published** |" in text
    assert f"Why: {choice.reason}." in text


def test_a_format_that_failed_is_named_in_the_card_with_its_reason_not_left_out():
    """Issue 20: an int8 export killed from outside used to vanish from the card; it is listed as failed."""
    import jinja2

    from bot.build.weight_formats import FailedFormat
    from bot.publish.card import TEMPLATES

    killed = FailedFormat("int8", "export-draft: draft export failed (exit -9: killed by SIGKILL from outside the bot)")
    choice = choose_draft_format([result("int4", 1.40, size=100 << 20)], [killed])
    assert choice.chosen == "int4" and "int8 (failed: export-draft: draft export failed" in choice.reason
    assert choice.as_provenance()["failed"] == [{"weight_format": "int8", "reason": killed.reason}]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), undefined=jinja2.StrictUndefined)
    text = env.get_template("_draft_formats.md.j2").render(formats=choice.as_provenance())
    assert "exported in 2 weight format(s)" in text
    assert "| int4 | yes | 2.00 | 3 | 1.40× | 100.0 MiB | **published** |" in text
    assert f"| int8 | failed: {killed.reason} | | | | | |" in text
    # A record written before failed formats were listed renders as before.
    older = {
        k: v
        for k, v in choose_draft_format([result("int4", 1.4, size=1 << 20)]).as_provenance().items()
        if k != "failed"
    }
    assert "exported in 1 weight format(s)" in env.get_template("_draft_formats.md.j2").render(formats=older)
