"""The card's install line (`bot.publish.install`): the Actions source pinned to its commit, or the recipe's package
once the index has it, or nothing; never a name nobody owns."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bot.core.errors import Failure
from bot.publish.install import index_has, install_line, source_requirement

SHA = "0123456789abcdef0123456789abcdef01234567"
ACTIONS = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "someone/dflash-bot", "GITHUB_SHA": SHA}


def test_the_actions_context_gives_a_requirement_pinned_to_the_commit():
    assert source_requirement(ACTIONS) == f"dflash-ov-bot @ git+https://github.com/someone/dflash-bot@{SHA}"
    assert install_line(ACTIONS, None) == source_requirement(ACTIONS)


@pytest.mark.parametrize(
    "change",
    [
        {},  # outside Actions
        {**ACTIONS, "GITHUB_SHA": "main"},  # a branch moves: not a pin
        {**ACTIONS, "GITHUB_SERVER_URL": "http://github.com"},  # not https
        {**ACTIONS, "GITHUB_REPOSITORY": "a/b c"},
    ],
)
def test_without_a_commit_of_an_https_repository_there_is_no_install_line(change):
    assert source_requirement(change) is None
    assert install_line(change, None) is None


class _Index(BaseHTTPRequestHandler):
    """The package index's JSON API for one project with one release (what pypi.org answers)."""

    def do_GET(self):
        if self.path != "/pypi/dflash-ov-bot/json":
            self.send_error(404)
            return
        body = json.dumps({"info": {"name": "dflash-ov-bot"}, "releases": {"0.1.0": []}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def index():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_recipes_package_is_used_only_when_the_index_has_it(index):
    def exists(package: str) -> bool:
        return index_has(package, index=index)

    assert install_line(ACTIONS, "dflash-ov-bot==0.1.0", exists=exists) == "dflash-ov-bot==0.1.0"
    assert install_line({}, "dflash-ov-bot", exists=exists) == "dflash-ov-bot"
    for missing in ("dflash-ov-bot==9.9.9", "nobody-owns-this"):
        with pytest.raises(Failure, match="is not on the package index: a card must not install a name nobody owns"):
            install_line(ACTIONS, missing, exists=exists)
    with pytest.raises(Failure, match="not a project name"):
        install_line(ACTIONS, "dflash-ov-bot; rm -rf /", exists=exists)


def test_an_index_that_cannot_be_asked_fails_instead_of_printing_an_unchecked_line():
    with pytest.raises(Failure, match=r"cannot check publish\.install"):
        index_has("dflash-ov-bot", index="http://127.0.0.1:9", timeout_s=2)
