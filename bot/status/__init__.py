"""Status: the status repo, the bot's memory between runs and its public page.

Owns the memory's records and rules (`memory`: what to examine again, what is stale), reading it as an untrusted
hint (`read`), rendering and writing the page and `dflash-bot status` (`page`), and the status step of a run
(`sync`: the memory loaded at planning, the page written and the collection synced at publishing).

May import: core, hub, sandbox, discover, plan, builder, publish.
"""
