"""The JSON Schema of openvino_export.json, shipped inside the package as `bot.schemas`."""
