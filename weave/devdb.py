"""A private MariaDB/MySQL server for development and tests.

Starts the server binary found on PATH (or in /usr/sbin) in a folder of our own, on 127.0.0.1
with a free port and its own socket, so it never shares state with a system server. The folder
is initialised on first use; a second start reuses it. `PrivateServer.stop()` shuts it down
cleanly (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pymysql

from weave.processes import die_with_parent

SERVER_BINARIES = ("mariadbd", "mysqld")
EXTRA_SEARCH_PATH = ("/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")
INSTALL_HINT = (
    "No MariaDB/MySQL server binary (mariadbd or mysqld) was found on PATH or in /usr/sbin. "
    "Install one, e.g. on Debian/Ubuntu: `sudo apt-get install mariadb-server`, "
    "or point WEAVE_DATABASE_URL / WEAVE_TEST_DATABASE_URL at an existing server."
)
START_TIMEOUT_SECONDS = 60
STOP_TIMEOUT_SECONDS = 30


class ServerNotFound(RuntimeError):
    """No server binary is installed: the message says what to install."""


def find_server_binary() -> str:
    search_path = os.pathsep.join([os.environ.get("PATH", ""), *EXTRA_SEARCH_PATH])
    for name in SERVER_BINARIES:
        found = shutil.which(name, path=search_path)
        if found:
            return found
    raise ServerNotFound(INSTALL_HINT)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _is_mariadb(binary: str) -> bool:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return "mariadb" in (out.stdout + out.stderr).lower()


def _run_as_root_args() -> list[str]:
    # Both servers refuse to run as root unless told to; containers and CI often are root.
    return ["--user=root"] if os.geteuid() == 0 else []


@dataclass
class PrivateServer:
    """One server process owning `datadir`. Use `start()`/`stop()` or as a context manager."""

    datadir: Path
    fast_and_unsafe: bool = False  # tests trade durability for speed; `weave dev` does not
    port: int = 0
    process: subprocess.Popen | None = None

    @property
    def socket_path(self) -> Path:
        return self.datadir / "server.sock"

    @property
    def log_path(self) -> Path:
        return self.datadir / "server.log"

    def url(self, database: str) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def start(self) -> "PrivateServer":
        binary = find_server_binary()
        mariadb = _is_mariadb(binary)
        self.datadir = Path(self.datadir).resolve()
        data = self.datadir / "data"
        if not (data / "mysql").is_dir():
            self._initialise(binary, data, mariadb)
        self._stop_leftover()
        self.port = self.port or free_port()
        args = [
            binary,
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.datadir / 'server.pid'}",
            f"--log-error={self.log_path}",
            f"--tmpdir={self._tmpdir()}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_unicode_ci",
            "--default-time-zone=+00:00",
            "--max-connections=500",
            "--innodb-buffer-pool-size=256M",
            "--skip-log-bin" if mariadb else "--disable-log-bin",
            *_run_as_root_args(),
        ]
        if mariadb:
            args.append("--skip-name-resolve")
        if self.fast_and_unsafe:
            args += ["--innodb-flush-log-at-trx-commit=0", "--innodb-doublewrite=0", "--sync-binlog=0"]
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._wait_until_ready()
        self._allow_tcp_root()
        return self

    def _initialise(self, binary: str, data: Path, mariadb: bool) -> None:
        data.mkdir(parents=True, exist_ok=True)
        if mariadb:
            installer = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
            if not installer:
                raise ServerNotFound(INSTALL_HINT)
            cmd = [
                installer,
                "--no-defaults",
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                # Other servers being installed at the same time share /tmp; a folder of our own
                # keeps their temporary tables apart (seen: "Unknown table 'mysql.tmp_proxies_priv'").
                f"--tmpdir={self._tmpdir()}",
                *_run_as_root_args(),
            ]
        else:
            cmd = [
                binary,
                "--no-defaults",
                "--initialize-insecure",
                f"--datadir={data}",
                f"--tmpdir={self._tmpdir()}",
                *_run_as_root_args(),
            ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            shutil.rmtree(data, ignore_errors=True)
            raise RuntimeError(f"initialising {data} failed:\n{result.stdout}\n{result.stderr}")

    def _tmpdir(self) -> Path:
        folder = self.datadir / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _stop_leftover(self) -> None:
        """A server left running by a killed parent still holds the folder: stop it first."""
        pid_file = self.datadir / "server.pid"
        if not pid_file.exists():
            return
        try:
            pid = int(pid_file.read_text().strip())
            os.kill(pid, signal.SIGTERM)
        except (ValueError, ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the server exited with {self.process.returncode}; see {self.log_path}:\n" + self._log_tail()
                )
            try:
                pymysql.connect(unix_socket=str(self.socket_path), user="root", connect_timeout=1).close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server did not answer within {START_TIMEOUT_SECONDS}s:\n" + self._log_tail())

    def _allow_tcp_root(self) -> None:
        # A fresh install only knows root@localhost (the socket); clients here speak TCP to 127.0.0.1.
        conn = pymysql.connect(unix_socket=str(self.socket_path), user="root", autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'")
                cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
        finally:
            conn.close()

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> "PrivateServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
