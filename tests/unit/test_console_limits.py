"""The console's sign-in rate limits (weave/console/limits.py), on a clock the test moves."""

from weave.console import limits


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_lets_a_burst_through_then_says_how_long_until_the_next_token():
    clock = Clock()
    limiter = limits.Limiter(10, window=60, clock=clock)
    assert [limiter.take("a") for _ in range(10)] == [0.0] * 10
    assert limiter.take("a") == 6.0  # one token every 6 s
    clock.now += 3
    assert limiter.take("a") == 3.0  # a refused attempt took nothing: the wait only shrinks
    clock.now += 3
    assert limiter.take("a") == 0.0 and limiter.take("a") == 6.0
    assert limiter.take("b") == 0.0  # every key has its own bucket


def test_a_bucket_refills_to_its_capacity_and_no_further():
    clock = Clock()
    limiter = limits.Limiter(3, window=60, clock=clock)
    for _ in range(3):
        limiter.take("a")
    clock.now += 3600
    assert [limiter.take("a") for _ in range(4)] == [0.0, 0.0, 0.0, 20.0]


def test_the_table_keeps_its_most_recently_used_buckets_only():
    clock = Clock()
    limiter = limits.Limiter(1, window=60, keys=3, clock=clock)
    for key in ("a", "b", "c"):
        limiter.take(key)
    assert limiter.take("a") > 0  # "a" is the most recently used now
    limiter.take("d")  # … so "b" goes
    assert len(limiter._buckets) == 3 and "b" not in limiter._buckets
    assert limiter.take("b") == 0.0  # forgotten: a full bucket again
