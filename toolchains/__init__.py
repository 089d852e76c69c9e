"""The toolchain profiles, shipped inside the package as `bot.toolchains`."""
