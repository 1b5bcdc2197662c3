"""Weave: durable workflows on MySQL/MariaDB. The version is read here by `weave --version` and by
setup.cfg, so that it never depends on the distribution's name (`weave-workflows`)."""

__version__ = "0.1.0"
