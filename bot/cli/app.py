"""The command tree: each command module's functions under their names (the modules know no `app`, so none of
them imports another's)."""

from __future__ import annotations

import typer

from bot.cli import build, demo_command, examine, pipeline_commands, status_command
from bot.cli.context import setup
from bot.cli.local_hub import hub_app
from bot.cli.toolchain_command import toolchain_app

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Watch the Hub for DFlash/DSpark drafts, export them to OpenVINO int4, validate, publish.",
)
app.callback()(setup)
app.add_typer(hub_app, name="hub")
app.add_typer(toolchain_app, name="toolchain")
app.command()(build.build)
app.command("make-tiny")(build.make_tiny_command)
app.command("plan")(pipeline_commands.plan_command)
app.command("run")(pipeline_commands.run_command)
app.command("publish")(pipeline_commands.publish_command)
app.command("check")(pipeline_commands.check_command)
app.command("status")(status_command.status_command)
app.command("inspect")(examine.inspect_command)
app.command("try")(examine.try_command)
app.command()(demo_command.demo)
