"""Shared test settings: hypothesis profiles without deadlines (CI machines vary) and the
session's S3 server."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from s3_server import S3Server, running_server

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=1000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server for the whole session, started on first use."""
    with running_server() as server:
        yield server
