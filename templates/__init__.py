"""The model card templates (Jinja2), shipped inside the package as `bot.templates`."""
