"""What the Python framework benches share (bench/python_frameworks.py,
bench/django_drf.py): running in the Python package's virtualenv, counting
the round trips redis-py sends, the test servers, and measuring one batch
of requests against one server.

Import it first, before redis: `in_package_venv()` re-runs the calling
script in the virtualenv, where redis and the frameworks are installed.
"""

import collections
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON_TESTS = os.path.join(ROOT, "clients", "python", "tests")


def in_package_venv(flag):
    """Re-runs the calling script in the package's virtualenv (clients/python/tests/run.sh venv) unless
    the environment variable `flag` says it already runs there."""
    if os.environ.get(flag) == "1":
        return
    venv_python = subprocess.run([os.path.join(PYTHON_TESTS, "run.sh"), "venv"], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    os.environ[flag] = "1"
    os.execv(venv_python, [venv_python, *sys.argv])


def count_round_trips():
    """A Counter of the commands redis-py sends, by lower-case name: every command goes through
    Redis.execute_command (limits' scripts as EVALSHA, django-redis's get/set, the package's calls)."""
    import redis

    sent = collections.Counter()
    execute_command = redis.Redis.execute_command

    def counting_execute_command(self, *args, **options):
        sent[str(args[0]).lower()] += 1
        return execute_command(self, *args, **options)

    redis.Redis.execute_command = counting_execute_command
    return sent


def test_servers():
    """The package's test servers (clients/python/tests/servers.py), with the module named on the command
    line (the scripts' first argument) unless THROTTLE_MODULE names one."""
    sys.path.insert(0, PYTHON_TESTS)
    os.environ.setdefault("THROTTLE_MODULE", sys.argv[1] if len(sys.argv) > 1 else "")
    import servers

    return servers


# The benches' own commands, left out of the counts.
OWN_COMMANDS = ("info", "config resetstat", "config", "flushall")


def measure(r, sent, requests):
    """Runs `requests()` (the statuses of one batch of requests) against the server `r` talks to, from
    reset statistics, and returns per request: admitted and limited, round trips (commands sent), the
    server's own time for them (INFO commandstats, a script's including the commands it runs), the server
    process's CPU (INFO cpu, user + sys), requests per second, and the commands sent by name (`sent`)."""
    r.config_resetstat()
    sent.clear()
    cpu0 = r.info("cpu")
    start = time.perf_counter()
    statuses = requests()
    elapsed = time.perf_counter() - start
    cpu1 = r.info("cpu")
    commands = {name: calls for name, calls in sent.items() if name not in OWN_COMMANDS}
    stats = {k[len("cmdstat_"):].lower(): v for k, v in r.info("commandstats").items()}
    n = len(statuses)
    return {
        "requests": n,
        "admitted": statuses.count(200),
        "limited": statuses.count(429),
        "round_trips": sum(commands.values()) / n,
        "server_us": sum(stats[name]["usec"] for name in commands) / n,
        "cpu_us": sum(cpu1[k] - cpu0[k] for k in ("used_cpu_user", "used_cpu_sys")) * 1e6 / n,
        "req_per_s": n / elapsed,
        "sent": {name: calls / n for name, calls in sorted(commands.items())},
    }
