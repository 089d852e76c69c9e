"""The Hub client the stages hold: one class with every operation, composed from the concern modules of `bot.hub`."""

from __future__ import annotations

from bot.hub.collection_writes import CollectionWrites
from bot.hub.download import Downloads
from bot.hub.writes import Writes


class Hub(Writes, Downloads, CollectionWrites):
    """A Hub endpoint plus one token (read or write, depending on the stage that holds it).

    Reads come from `bot.hub.reads`, downloads from `bot.hub.download`, writes from `bot.hub.writes` and the
    collection's from `bot.hub.collection_writes`; every operation runs through `Transport.call`
    (`bot.hub.transport`: timeouts, bounded retries, the Hub's errors as the bot's). Constructing one changes nothing
    outside it; `bot.hub.transport.configure_client` sets up the process.
    """
