"""Throttle and the limits storage on a real three-node cluster."""

from __future__ import annotations

import pytest
import redis
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES

from redis_throttle import AsyncThrottle, Decision, Spec, Throttle
from redis_throttle.limits_storage import ThrottleClusterStorage

T0 = 1_700_000_000


def node_of(cluster, rc, key):
    return rc.get_node_from_key(key).port


def test_keys_are_routed_to_their_nodes(cluster, rc):
    throttle = Throttle(rc)
    keys = [f"user:{i}" for i in range(30)]
    for key in keys:
        assert throttle.fixed(key, 2, 60, at=T0) == Decision(True, 2, 1, 0.0, 60.0)
    ports = {node_of(cluster, rc, key) for key in keys}
    assert ports == {node.port for node in cluster.nodes}  # the keys landed on all three nodes
    for key in keys:  # each node holds its own keys, as module types
        assert cluster.nodes[[n.port for n in cluster.nodes].index(node_of(cluster, rc, key))].client().type(key) == b"thr-fixed"
        assert throttle.info(key)["used"] == 1


def test_all_in_one_slot(rc):
    throttle = Throttle(rc)
    specs = (Spec.fixed("{user:42}:s", 1, 1), Spec.sliding("{user:42}:h", 100, 3600))
    assert throttle.all(*specs, at=T0).allowed
    assert not throttle.all(*specs, at=T0)


def test_all_across_slots_is_refused(rc):
    with pytest.raises(redis.RedisClusterException):
        Throttle(rc).all(Spec.fixed("a", 1, 1), Spec.fixed("b", 1, 1))


async def test_async_cluster(cluster, rc):
    client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    throttle = AsyncThrottle(client)
    for i in range(10):
        assert await throttle.token(f"t:{i}", 5, 1, at=T0) == Decision(True, 5, 4, 0.0, 0.2)
    assert (await throttle.info("t:3"))["algorithm"] == "token"
    await client.aclose()


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_limits_strategies_on_the_cluster(cluster, rc, strategy):
    storage = storage_from_string(f"throttle+cluster://{cluster.url}")
    assert isinstance(storage, ThrottleClusterStorage) and storage.check()
    limiter = STRATEGIES[strategy](storage)
    item = parse("3/minute")
    for user in ("alice", "bob", "carol", "dave"):
        assert [limiter.hit(item, user) for _ in range(4)] == [True, True, True, False]
        assert limiter.get_window_stats(item, user).remaining == 0
    limiter.clear(item, "alice")
    assert limiter.hit(item, "alice")
    # the keys spread over the nodes; reset() finds them on each
    assert storage.reset() == 4
    assert limiter.hit(item, "bob")
