"""Sandbox: the child processes that load untrusted checkpoints and IRs, and what confines them.

Owns the child entry point (`child`: refuses to start with a credential in reach, applies Landlock, then runs
optimum-cli, a command, or a `bot.builder` tool module named on its command line, imported only then), the one wire
between the builder and a tool module's child (`wire`: a pydantic request in, a pydantic answer out, each validated
and size-bounded on arrival), the OS confinement and the write-token holder (`confinement`, `landlock`), starting and
watching children (`isolation`: scrubbed environment, time and memory limits, the whole process group killed),
resource measurement (`resources`) and the telemetry switches (`telemetry`).

May import: core, hub.
"""
