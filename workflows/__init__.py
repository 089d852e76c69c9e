"""The declarative recipes, shipped inside the package as `bot.workflows`."""
