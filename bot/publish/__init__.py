"""Publish: a validated bundle onto the Hub, with its cards.

Owns the commits (`publisher`: one per repo, target first, each folder held to its record; `refresh`: the cards
alone again after a template change), the model cards (`card`), the charts of the cards and the status page
(`charts`), and the recipe's collection (`collection`).

May import: core, hub, sandbox, discover, plan, builder.
"""
