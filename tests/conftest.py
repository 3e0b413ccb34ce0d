"""Shared test settings: hypothesis profiles without deadlines (CI machines vary) and the
session's S3 server (one per xdist worker).

Hypothesis profiles (``HYPOTHESIS_PROFILE``): ``quick`` (the default, for the README's
fast run) tries 25 examples in each property test that does not set its own count;
``ci`` (what .ci/run uses when it runs the property tests again with the slow ones)
tries hypothesis's usual 100; ``thorough`` tries 1,000."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from support.s3_server import S3Server, running_server

_UNTIMED = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}
settings.register_profile("quick", max_examples=25, **_UNTIMED)
settings.register_profile("ci", **_UNTIMED)
settings.register_profile("thorough", max_examples=1000, **_UNTIMED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server for the session (each xdist worker has its own), started on
    first use."""
    with running_server() as server:
        yield server


@pytest.fixture
def hermetic_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real AWS configuration leaks into a test (S3 test modules use it for every test)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
