# Two commands for a new user: `make demo` and `make test`. Both install into .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install install-light demo test test-fast durations test-tools bench lint clean sandbox-host

install: $(STAMP)

# The bot without the export toolchain (no torch, optimum-intel, NNCF): what `plan`, `publish`, `check`, `status`
# and `try` need. The Actions plan and publish jobs install this; `make install` on top of it adds the rest.
install-light:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[publish]'

# torch first, pinned: the CPU wheel. A bare `torch` requirement would resolve a multi-GB CUDA build.
# optimum-intel declares torchvision, but the only reachable builds are CUDA builds that break
# `import optimum.intel` beside CPU torch, so it is removed again (text and VLM export never need it).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[build,dev]'
	$(PY) -m pip uninstall --quiet -y torchvision
	touch $(STAMP)

# The build children run in fresh user/PID/network namespaces where the kernel allows unprivileged ones (see
# bot/sandbox/confinement.py). Ubuntu 24.04, GitHub's hosted runners included, restricts them through AppArmor; this lifts
# the restriction with sudo. Without it the sandbox still confines the children with Landlock and says so.
sandbox-host:
	@if [ "$$(cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns 2>/dev/null)" = 1 ]; then \
		sudo -n sysctl -w kernel.apparmor_restrict_unprivileged_userns=0; fi
	@$(PYTHON) -c "import subprocess as s; r = s.run(['unshare', '--user', '--map-root-user', '--pid', '--fork', \
		'--mount-proc', '--net', 'true'], capture_output=True); print('namespaces for build children:', \
		'available' if r.returncode == 0 else 'unavailable (Landlock only)')"

demo: $(STAMP)
	$(VENV)/bin/dflash-bot demo

# strace, for the tests that trace what a real process opens and connects to (the offline demo's connections,
# the sandbox's file accesses); installed with apt-get where it is missing.
test-tools:
	@command -v strace >/dev/null || { if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq strace >/dev/null; } || \
		echo "strace could not be installed: the tests that trace a process will say they were skipped"

test: $(STAMP) test-tools
	$(PY) -m pytest -q

# The fast loop between commits: everything but the `slow` tests (real builds, the reliability scenarios; see
# tests/conftest.py). Never instead of `make test`, which CI runs. `make durations` runs the same loop and writes its
# wall time and slowest tests to tests/durations.txt, so the next slow test is seen.
test-fast: $(STAMP) test-tools
	$(PY) -m pytest -q -m "not slow"

durations: $(STAMP) test-tools
	$(PY) tests/durations.py

# Code lint: ruff (lint and format) on every Python folder, mypy on every package (pyproject's [tool.mypy]), and
# the committed JSON Schema of openvino_export.json against the models it is generated from. Workflow lint, all
# offline: actionlint (with the pinned shellcheck, so CI and laptops agree), zizmor's security audits of the
# workflows and the Dependabot config (no findings allowed), and the SchemaStore workflow and Dependabot schemas.
WORKFLOWS := $(wildcard .github/workflows/*.yml)
PYTHON_FOLDERS := bot tests bench hubserver tinymodels
lint: $(STAMP)
	$(VENV)/bin/ruff check $(PYTHON_FOLDERS)
	$(VENV)/bin/ruff format --check $(PYTHON_FOLDERS)
	$(VENV)/bin/mypy
	$(PY) -m bot.core.record --check
	$(VENV)/bin/actionlint -shellcheck=$(VENV)/bin/shellcheck $(WORKFLOWS)
	$(VENV)/bin/zizmor --offline --no-progress .github
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.github-workflows $(WORKFLOWS)
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.dependabot .github/dependabot.yml

bench: $(STAMP)
	$(PY) bench/build_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache
