"""What an installed Weave holds and loads: no development tooling on the serving path."""

import subprocess
import sys


def test_the_api_server_does_not_import_the_development_database_module():
    # `weave serve` loads weave.cli, which loads weave.server; only `weave dev` needs weave.devdb.
    loaded = subprocess.run([sys.executable, "-c", "import sys, weave.cli, weave.server; "
                             "print('weave.devdb' in sys.modules)"], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
