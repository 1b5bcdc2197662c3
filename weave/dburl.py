"""The database URL: `mysql://user:password@host:port/database`, with the nodes of a Galera cluster
as several hosts (`h1:3306,h2:3306`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from urllib.parse import quote, unquote, urlsplit


@dataclass(frozen=True)
class DatabaseUrl:
    """`mysql://user:password@host:port/database`; several hosts (`h1:3306,h2:3306`) name the nodes
    of one cluster: connections go to the first that answers, and move on when it is lost."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)  # a URL in a log line or a traceback must not carry it
    database: str = ""
    more_hosts: tuple[tuple[str, int], ...] = ()

    @property
    def hosts(self) -> tuple[tuple[str, int], ...]:
        return ((self.host, self.port), *self.more_hosts)

    @classmethod
    def parse(cls, url: str) -> "DatabaseUrl":
        parts = urlsplit(url)
        if parts.scheme not in ("mysql", "mysql+pymysql", "mariadb"):
            raise ValueError(f"database URL must start with mysql:// (got {parts.scheme!r})")
        database = parts.path.lstrip("/")
        if not database:
            raise ValueError("database URL must name a database: mysql://user:pass@host:port/db")
        credentials, _, host_list = parts.netloc.rpartition("@")
        user, _, password = credentials.partition(":")
        hosts = [_host_and_port(item) for item in host_list.split(",")] if host_list else [("127.0.0.1", 3306)]
        return cls(
            host=hosts[0][0],
            port=hosts[0][1],
            user=unquote(user or "root"),
            password=unquote(password),
            database=database,
            more_hosts=tuple(hosts[1:]),
        )

    def index_of(self, conn) -> int:
        """The position in `hosts` of the host connection `conn` went to (0 when none of them)."""
        hosts = self.hosts
        return hosts.index((conn.host, conn.port)) if (conn.host, conn.port) in hosts else 0

    def with_database(self, database: str) -> "DatabaseUrl":
        return replace(self, database=database)

    def on_host(self, index: int) -> "DatabaseUrl":
        """The same URL with its hosts listed from the `index`th on (then the ones before it)."""
        hosts = self.hosts[index:] + self.hosts[:index]
        return replace(self, host=hosts[0][0], port=hosts[0][1], more_hosts=hosts[1:])

    def url(self) -> str:
        """The URL again, every host listed (the password too: for a process's environment, not a log)."""
        auth = quote(self.user, safe="") + (":" + quote(self.password, safe="") if self.password else "")
        hosts = ",".join(f"{_netloc_host(host)}:{port}" for host, port in self.hosts)
        return f"mysql://{auth}@{hosts}/{self.database}"

    def yoyo_url(self) -> str:
        """For yoyo, which knows one host: the first."""
        return replace(self, more_hosts=()).url()


def _host_and_port(item: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` of a URL's host list."""
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = item.partition(":")
    if not host:
        raise ValueError(f"database URL: an empty host in {item!r}")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"database URL: {port!r} is not a port")
    return host, int(port) if port else 3306


def _netloc_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
