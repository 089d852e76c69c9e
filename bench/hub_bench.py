"""A seeded local Hub in its own process, for the run benchmarks."""

from __future__ import annotations

import secrets
from contextlib import contextmanager
from pathlib import Path

from hubserver import start_subprocess, stop_subprocess


@contextmanager
def local_hub(data: Path):
    token = "hf_bench_" + secrets.token_hex(6)
    process, url = start_subprocess(data, "bench", token)
    try:
        yield url, token
    finally:
        stop_subprocess(process)


def server_requests(url: str, token: str) -> list[dict]:
    import httpx

    return httpx.get(f"{url}/api/_admin/requests", headers={"Authorization": f"Bearer {token}"}).json()


def clear_requests(url: str, token: str) -> None:
    import httpx

    httpx.delete(f"{url}/api/_admin/requests", headers={"Authorization": f"Bearer {token}"})
