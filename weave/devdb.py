"""A private MariaDB/MySQL server, or a private MariaDB Galera cluster, for development and tests.

Starts the server binary found on PATH (or in /usr/sbin) in a folder of our own, on 127.0.0.1
with a port of its own and its own socket, so it never shares state with a system server. The
folder is initialised on first use; a second start reuses it, and its port too when that is still
free (`remembered_ports`: a URL printed or written down stays good across restarts). `PrivateServer.stop()` shuts it down
cleanly (SIGTERM, then SIGKILL after a grace period). `GaleraCluster` starts several such servers
as the nodes of one Galera cluster on loopback (Debian's `galera-4` provider).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
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


def port_is_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:`port` (a port whose last connection is in TIME_WAIT is free:
    the servers set SO_REUSEADDR, and so does this check)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def remembered_ports(path: Path, count: int) -> list[int]:
    """`count` ports for the servers kept beside `path`: those written in `path` by an earlier
    start when every one is still free, else fresh ones, written there for the next start."""
    try:
        ports = [int(word) for word in path.read_text().split()]
    except (OSError, ValueError):
        ports = []
    if len(ports) == count and all(port_is_free(port) for port in ports):
        return ports
    ports = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(" ".join(map(str, ports)) + "\n")
    return ports


def _is_mariadb(binary: str) -> bool:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return "mariadb" in (out.stdout + out.stderr).lower()


def _user_args(user: str | None) -> list[str]:
    if user is not None:
        return [f"--user={user}"]
    # Both servers refuse to run as root unless told to; containers and CI often are root.
    return ["--user=root"] if os.geteuid() == 0 else []


@dataclass
class PrivateServer:
    """One server process owning `datadir`. Use `start()`/`stop()` or as a context manager."""

    datadir: Path
    fast_and_unsafe: bool = False  # tests trade durability for speed; `weave dev` does not
    port: int = 0
    process: subprocess.Popen | None = None
    user: str | None = None  # the account the server runs as (it must own `datadir`); None: this one
    extra_args: tuple[str, ...] = ()  # e.g. a Galera node's wsrep settings
    buffer_pool: str = "256M"

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
        self.port = self.port or remembered_ports(self.datadir / "port", 1)[0]
        # A server that changes its account itself (`--user`) loses its parent-death signal with
        # the change (Linux clears it on a change of credentials) and outlives a killed parent: as
        # root, a server of another account is started as that account instead.
        account = self.user if self.user is not None and os.geteuid() == 0 else None
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
            f"--innodb-buffer-pool-size={self.buffer_pool}",
            "--skip-log-bin" if mariadb else "--disable-log-bin",
            *([] if account else _user_args(self.user)),
            *self.extra_args,
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
            user=account,
            preexec_fn=die_with_parent,  # after the change of account (`user`), so it stays
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
                *_user_args(self.user),
            ]
        else:
            cmd = [
                binary,
                "--no-defaults",
                "--initialize-insecure",
                f"--datadir={data}",
                f"--tmpdir={self._tmpdir()}",
                *_user_args(self.user),
            ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            shutil.rmtree(data, ignore_errors=True)
            raise RuntimeError(f"initialising {data} failed:\n{result.stdout}\n{result.stderr}")

    def _tmpdir(self) -> Path:
        folder = self.datadir / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            _give(self.datadir, self.user)
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

    def query(self, sql: str) -> tuple:
        """One statement over the socket, as root: for status checks (`SHOW STATUS …`)."""
        conn = pymysql.connect(unix_socket=str(self.socket_path), user="root", connect_timeout=2)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        finally:
            conn.close()


def _give(folder: Path, user: str) -> None:
    """`folder` and everything in it to `user` (a server running as `user` must write there)."""
    account = pwd.getpwnam(user)
    for root, dirs, files in os.walk(folder):
        for name in [root, *(os.path.join(root, f) for f in dirs + files)]:
            os.chown(name, account.pw_uid, account.pw_gid, follow_symlinks=False)


# ---- a Galera cluster on loopback ------------------------------------------------------------------

GALERA_PROVIDERS = (
    "/usr/lib/galera/libgalera_smm.so",
    "/usr/lib/libgalera_smm.so",
    "/usr/lib64/galera-4/libgalera_smm.so",
)
GALERA_HINT = (
    "No Galera provider (libgalera_smm.so) was found. Install it, e.g. on Debian/Ubuntu: "
    "`sudo apt-get install galera-4 rsync` (scripts/bootstrap does this)."
)
SYNC_TIMEOUT_SECONDS = 120
# Accounts a node may run as when we are root: rsync state transfer runs as the server's own user
# and cannot write folders that only root may write, and the servers refuse root without --user.
NODE_ACCOUNTS = ("mysql", "nobody")


def find_galera_provider() -> str:
    for path in GALERA_PROVIDERS:
        if os.path.exists(path):
            return path
    raise ServerNotFound(GALERA_HINT)


def _node_account() -> str | None:
    if os.geteuid() != 0:
        return None  # we run the nodes as ourselves
    for name in NODE_ACCOUNTS:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("a Galera node cannot run as root and no 'mysql' or 'nobody' account exists")


@dataclass
class GaleraCluster:
    """`size` private servers in `folder` (node0, node1, …) forming one Galera cluster on 127.0.0.1.

    Every node has its own MySQL, group-communication, incremental (IST) and snapshot (SST, rsync)
    ports. The first start bootstraps node0 as a new cluster and joins the others to it one at a
    time (a joiner copies node0's data by rsync); `start()` returns when every node is `Synced`.
    A node can be stopped, killed and started again (`stop_node`, `kill_node`, `start_node`): it
    rejoins through the others and catches up by IST.
    """

    folder: Path
    size: int = 3
    nodes: list[PrivateServer] = field(default_factory=list)

    def urls(self, database: str) -> list[str]:
        return [node.url(database) for node in self.nodes]

    def url(self, database: str, first: int = 0) -> str:
        """One URL listing every node, node `first` first (`weave.db` fails over along the list)."""
        order = self.nodes[first:] + self.nodes[:first]
        return f"mysql://root@{','.join(f'127.0.0.1:{n.port}' for n in order)}/{database}"

    def start(self) -> "GaleraCluster":
        provider = find_galera_provider()
        account = _node_account()
        self.folder = Path(self.folder).resolve()
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o755)  # a node's account must reach its own folder below this one
        # Each node's MySQL, group-communication, IST and SST ports, the same as last time when free.
        flat = remembered_ports(self.folder / "ports", 4 * self.size)
        ports = [tuple(flat[i : i + 4]) for i in range(0, len(flat), 4)]
        members = ",".join(f"127.0.0.1:{group}" for _, group, _, _ in ports)
        fresh = not (self.folder / "node0" / "data" / "grastate.dat").exists()
        self.nodes = []
        for index, (port, group, ist, sst) in enumerate(ports):
            wsrep = [
                "--wsrep-on=ON",
                f"--wsrep-provider={provider}",
                "--wsrep-cluster-name=weave",
                f"--wsrep-node-name=node{index}",
                f"--wsrep-cluster-address=gcomm://{members}",
                f"--wsrep-node-address=127.0.0.1:{group}",
                f"--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{group};ist.recv_addr=127.0.0.1:{ist}",
                f"--wsrep-sst-receive-address=127.0.0.1:{sst}",
                "--wsrep-sst-method=rsync",
                "--binlog-format=ROW",
                "--innodb-autoinc-lock-mode=2",
            ]
            node = PrivateServer(self.folder / f"node{index}", port=port, user=account, buffer_pool="64M")
            node.extra_args = tuple(wsrep)
            self.nodes.append(node)
        for index, node in enumerate(self.nodes):
            self._start_node(index, bootstrap=index == 0 and fresh)
        return self

    def _start_node(self, index: int, bootstrap: bool = False) -> None:
        node = self.nodes[index]
        if bootstrap:
            node.extra_args = (*node.extra_args, "--wsrep-new-cluster")
        elif index == 0:  # restarting the first node of a cluster that ran before: safe to bootstrap again
            self._mark_safe_to_bootstrap(node)
            node.extra_args = (*node.extra_args, "--wsrep-new-cluster")
        try:
            node.start()
        finally:
            node.extra_args = tuple(a for a in node.extra_args if a != "--wsrep-new-cluster")
        self.wait_synced(index)

    @staticmethod
    def _mark_safe_to_bootstrap(node: PrivateServer) -> None:
        state = node.datadir / "data" / "grastate.dat"
        if state.exists():
            state.write_text(state.read_text().replace("safe_to_bootstrap: 0", "safe_to_bootstrap: 1"))

    def wait_synced(self, index: int) -> None:
        node = self.nodes[index]
        deadline = time.monotonic() + SYNC_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if node.process is not None and node.process.poll() is not None:
                raise RuntimeError(f"node{index} exited with {node.process.returncode}:\n" + node._log_tail())
            try:
                if (
                    dict(node.query("SHOW STATUS LIKE 'wsrep_local_state_comment'")).get("wsrep_local_state_comment")
                    == "Synced"
                ):
                    return
            except pymysql.err.MySQLError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"node{index} was not Synced within {SYNC_TIMEOUT_SECONDS}s:\n" + node._log_tail())

    def certification_refusals(self) -> int:
        """Transactions the nodes refused at certification, or aborted for a replicated one, so far:
        each is a unit of work that Weave re-ran."""
        query = "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')"
        return sum(int(value) for node in self.nodes for _, value in node.query(query))

    def start_node(self, index: int) -> None:
        """Start a stopped or killed node again: it rejoins the running ones and catches up."""
        self._start_node(index)

    def stop_node(self, index: int) -> None:
        self.nodes[index].stop()

    def kill_node(self, index: int) -> None:
        process = self.nodes[index].process
        if process is not None:
            process.kill()
            process.wait()
        self.nodes[index].process = None

    def stop(self) -> None:
        # The last node to stop is the one most up to date: node0, so that the next start may
        # bootstrap from it (`_start_node` marks it safe to bootstrap).
        for node in reversed(self.nodes):
            node.stop()

    def __enter__(self) -> "GaleraCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
