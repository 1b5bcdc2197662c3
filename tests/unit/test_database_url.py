"""WEAVE_DATABASE_URL: one host, or the nodes of a cluster in the order they are tried (issue 18)."""

from __future__ import annotations

import pytest

from weave.dburl import DatabaseUrl


def test_one_host_with_defaults():
    url = DatabaseUrl.parse("mysql://db.internal/weave")
    assert (url.hosts, url.user, url.password, url.database) == ((("db.internal", 3306),), "root", "", "weave")


def test_several_hosts_are_kept_in_order_with_their_ports():
    url = DatabaseUrl.parse("mysql://app:p%40ss@h1:3306,h2:3307,h3/weave")
    assert url.hosts == (("h1", 3306), ("h2", 3307), ("h3", 3306))
    assert (url.user, url.password, url.database) == ("app", "p@ss", "weave")
    assert url.on_host(1).hosts == (("h2", 3307), ("h3", 3306), ("h1", 3306))
    assert url.yoyo_url() == "mysql://app:p%40ss@h1:3306/weave"  # yoyo knows one host: the first
    assert url.with_database("other").hosts == url.hosts


def test_ipv6_hosts_in_brackets():
    url = DatabaseUrl.parse("mysql://u@[::1]:3307,[fe80::1]/weave")
    assert url.hosts == (("::1", 3307), ("fe80::1", 3306))
    assert url.yoyo_url() == "mysql://u@[::1]:3307/weave"


@pytest.mark.parametrize(
    "text", ["mysql://u@h1:99999/weave", "mysql://u@,h2/weave", "mysql://u@h:x/weave", "mysql://u@h1", "http://h/weave"]
)
def test_a_malformed_url_is_refused_with_a_reason(text):
    with pytest.raises(ValueError):
        DatabaseUrl.parse(text)


def test_the_password_stays_out_of_the_urls_repr():
    assert "secret" not in repr(DatabaseUrl.parse("mysql://u:secret@h1,h2/weave"))
