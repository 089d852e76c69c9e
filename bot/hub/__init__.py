"""Hub: the one package that talks to the Hub, through `huggingface_hub`.

Owns the Hub client (`client.Hub`, the one entry point), composed by concern: the process's HTTP client, timeouts,
bounded retries and the translation of the Hub's errors into `Skip` and `Failure` (`transport`), reads (`reads`),
hash-checked resumable downloads (`download`), writes (`writes`) and the collection (`collection_writes`). Raw
client objects and exceptions stop here: what the Hub answers becomes the typed records of `bot.core.hub_records`
and `bot.core.record`.

May import: core.
"""
