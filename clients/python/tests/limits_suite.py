"""The smallest harness that runs limits' own storage tests (from its sdist)
against this package's storages, without their docker fixtures:

    cd limits-X.Y.Z && python -m pytest -p limits_suite -o addopts= \
        tests/test_storage.py tests/test_strategy.py tests/aio/test_storage.py tests/aio/test_strategy.py

It starts one redis-server with the module and a three-node cluster, then
replaces the storage lists of tests/utils.py (ALL_STORAGES and
ALL_STORAGES_ASYNC, and the parametrize marks built from them) and of the
TestConcreteStorages classes with throttle://, throttle+cluster://,
async+throttle:// and async+throttle+cluster:// on those servers. Every
test must pass: none is marked as an expected failure. The few limits marks
flaky get the reruns limits gives them, each rerun printed.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
from _pytest.runner import runtestprotocol
from pytest_lazy_fixtures import lf

sys.path.insert(0, os.path.dirname(__file__))
from servers import Cluster, RedisServer  # noqa: E402

_servers: dict = {}


def pytest_configure(config):
    import redis_throttle  # noqa: F401  (registers the schemes)
    import tests.utils as utils

    # limits' own runs retry the tests it marks flaky (the flaky plugin of
    # its dev dependencies): so does pytest_runtest_protocol below.
    config.addinivalue_line("markers", "flaky(max_runs=2): limits' timing-bound tests, rerun as limits reruns them")

    single, cluster = RedisServer(), Cluster()
    _servers.update(single=single, cluster=cluster)
    sync = {
        "throttle": pytest.param(f"throttle://{single.url}", {}, lf("throttle_single"), id="throttle"),
        "throttle-cluster": pytest.param(
            f"throttle+cluster://{cluster.url}", {}, lf("throttle_cluster"), id="throttle-cluster"
        ),
    }
    aio = {
        "throttle": pytest.param(f"async+throttle://{single.url}", {}, lf("throttle_single"), id="throttle"),
        "throttle-cluster": pytest.param(
            f"async+throttle+cluster://{cluster.url}", {}, lf("throttle_cluster"), id="throttle-cluster"
        ),
    }
    utils.ALL_STORAGES.clear()
    utils.ALL_STORAGES.update(sync)
    utils.ALL_STORAGES_ASYNC.clear()
    utils.ALL_STORAGES_ASYNC.update(aio)
    names = "uri, args, fixture"
    for name in ("all_storage", "moving_window_storage", "sliding_window_counter_storage"):
        setattr(utils, name, pytest.mark.parametrize(names, list(sync.values())))
    for name in ("async_all_storage", "async_moving_window_storage", "async_sliding_window_counter_storage"):
        setattr(utils, name, pytest.mark.parametrize(names, list(aio.values())))


def pytest_unconfigure(config):
    for server in _servers.values():
        server.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """limits marks a few of its tests flaky: they check times to 0.01-0.03 s after real sleeps, which a loaded
    machine overshoots. limits' own runs give each up to `max_runs` runs (2 unless it says 3) and count it
    passed when one passes; so does this harness, as the flaky plugin limits uses does. Every rerun is
    printed ("rerun: ..."), with the failure it reruns after; every other test runs once."""
    mark = item.get_closest_marker("flaky")
    if mark is None:
        return None
    runs = int(mark.kwargs.get("max_runs", 2))
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for run in range(1, runs + 1):
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        failure = next((r for r in reports if r.failed), None)
        if failure is None or run == runs:
            break
        crash = getattr(failure.longrepr, "reprcrash", None)
        why = crash.message.splitlines()[0] if crash else str(failure.longrepr).strip().splitlines()[-1]
        item.config.get_terminal_writer().line(f"rerun: {item.nodeid} (run {run} of {runs} failed: {why})")
        item._initrequest()
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    """TestConcreteStorages lists its storages in the test module itself: swap in ours."""
    if name != "TestConcreteStorages":
        return None
    from redis_throttle import limits_storage as s

    if "aio" in str(collector.path):
        single, cluster = s.AsyncThrottleStorage, s.AsyncThrottleClusterStorage
        scheme = "async+throttle"
    else:
        single, cluster = s.ThrottleStorage, s.ThrottleClusterStorage
        scheme = "throttle"
    obj.pytestmark = [
        mark for mark in getattr(obj, "pytestmark", []) if mark.name != "parametrize"
    ] + [
        pytest.mark.parametrize(
            "uri, args, expected_instance, fixture",
            [
                pytest.param(f"{scheme}://{_servers['single'].url}", {}, single, lf("throttle_single"), id="throttle"),
                pytest.param(
                    f"{scheme}+cluster://{_servers['cluster'].url}", {}, cluster, lf("throttle_cluster"),
                    id="throttle-cluster",
                ),
            ],
        )
    ]
    return None


@pytest.fixture
def throttle_single():
    client = _servers["single"].client()
    client.flushall()
    client.close()


@pytest.fixture
def throttle_cluster():
    _servers["cluster"].flush()


@pytest.fixture(autouse=True)
def clear_of_a_minute_boundary(request):
    """limits' sliding-window-counter tests hit per-minute limits for a few seconds and, with storages whose
    windows are aligned on the Unix epoch (TimestampedSlidingWindow, as here), assume no minute boundary
    falls inside the test (limits reruns them, marked flaky, when one does). Here they start at least 10 s
    before the next minute instead: the assumption then holds, and a boundary is never why one fails.

    test_sliding_window_counter_previous_window assumes the same of a second: its hits must fall in the
    window its reference time is in (it only waits for the next second when less than 0.3 s is left), and
    the async twin takes that time before its first hit, which on a fresh cluster client includes finding
    the cluster's nodes. It starts just after a second begins, with the whole second for those hits."""
    if "sliding" in request.node.nodeid.lower():
        left = 60 - time.time() % 60
        if left < 10:
            time.sleep(left + 0.05)
    if request.node.originalname == "test_sliding_window_counter_previous_window":
        time.sleep(1 - time.time() % 1 + 0.02)

