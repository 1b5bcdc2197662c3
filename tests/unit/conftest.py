"""Unit tests decide without a database: a test here that asks for one (through `database`, `client`,
`flow`, … which all start from `server_url`) fails at once instead of starting a server."""

import pytest


@pytest.fixture(scope="session")
def server_url():
    pytest.fail("a unit test uses no database: this test belongs in tests/integration")
