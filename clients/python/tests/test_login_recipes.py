"""The package README's login recipes, through the frameworks' own test clients: login throttling that
counts failures only, and a 15-minute block after 5 failures, each with Flask and with FastAPI. The README's
two blocks run as written (their Redis client pointed at the test server, their password check and clock
supplied by the test); each recipe's twin on the other framework is written here. Time is a clock the test
steps (the Throttle's clock, the module's AT), never waited for."""

from __future__ import annotations

import math
import os
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import redis
import redis.asyncio
from fastapi import FastAPI, HTTPException, Request
from fastapi.testclient import TestClient
from flask import Flask, request
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from pydantic import BaseModel

import redis_throttle  # noqa: F401  (registers throttle://)
from redis_throttle import AsyncThrottle, Throttle

README = os.path.join(os.path.dirname(__file__), "..", "README.md")
T0 = 1_700_000_000.0
PASSWORD = "correct horse"


def readme_block(title: str) -> str:
    """The README's python block whose first line is `# title`."""
    with open(README) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    [block] = [b for b in blocks if b.startswith(f"# {title}\n")]
    return block


class World:
    """What a recipe's app runs against here: the clock, and the attempts that reached the password check."""

    def __init__(self) -> None:
        self.now = T0
        self.tried: List[Tuple[str, str]] = []

    def clock(self) -> float:
        return self.now

    def check_password(self, username: str, password: str) -> bool:
        self.tried.append((username, password))
        return password == PASSWORD

    async def check_password_async(self, username: str, password: str) -> bool:
        return self.check_password(username, password)


def load(title: str, server: Any, world: World, is_async: bool) -> Dict[str, Any]:
    """Runs the README block as a module of its own; its throttle then sends the world's time."""
    code = readme_block(title).replace("redis.Redis()", f"redis.Redis(host='127.0.0.1', port={server.port})")
    namespace: Dict[str, Any] = {"__name__": "recipe"}
    exec(compile(code, f"README.md: {title}", "exec"), namespace)
    namespace["throttle"].clock = world.clock
    namespace["check_password"] = world.check_password_async if is_async else world.check_password
    return namespace


# ------------------------------------------------------------ each recipe's twin on the other framework

def flask_block_after_failures(server: Any, world: World) -> Flask:
    app = Flask(__name__)
    throttle = Throttle(server.client(), clock=world.clock)

    def locked_out(seconds: float) -> Any:
        return "too many failed logins", 429, {"Retry-After": str(math.ceil(seconds))}

    @app.post("/login")
    def login() -> Any:
        username = request.form["username"]
        key = f"login:{request.remote_addr}:{username}"
        peek = throttle.fixed(key, 4, "15m", cost=0)
        if not peek.allowed:
            return locked_out(peek.retry_after)
        if not world.check_password(username, request.form["password"]):
            failure = throttle.fixed(key, 4, "15m", ban="15m")
            if not failure.allowed:
                return locked_out(failure.retry_after)
            return "wrong username or password", 401
        throttle.client.delete(key)
        return "welcome"

    return app


class Login(BaseModel):
    username: str
    password: str


def fastapi_failures_only(server: Any, world: World) -> Tuple[FastAPI, AsyncThrottle]:
    app = FastAPI()
    throttle = AsyncThrottle(redis.asyncio.Redis(host="127.0.0.1", port=server.port), clock=world.clock)

    @app.post("/login")
    async def login(attempt: Login, request: Request) -> Dict[str, str]:
        assert request.client is not None
        key = f"login:{request.client.host}:{attempt.username}"
        peek = await throttle.fixed(key, 5, "15m", cost=0, detail=True)
        if peek.remaining == 0:
            assert peek.next_free is not None
            raise HTTPException(429, "too many failed logins", headers={"Retry-After": str(math.ceil(peek.next_free))})
        if not await world.check_password_async(attempt.username, attempt.password):
            await throttle.fixed(key, 5, "15m")
            raise HTTPException(401, "wrong username or password")
        await throttle.client.delete(key)
        return {"welcome": attempt.username}

    return app, throttle


# ------------------------------------------------------------ the apps, behind one way to post a login

Post = Callable[[str, str], Tuple[int, Optional[str]]]


def flask_post(app: Flask) -> Post:
    client = app.test_client()

    def post(username: str, password: str) -> Tuple[int, Optional[str]]:
        response = client.post("/login", data={"username": username, "password": password})
        return response.status_code, response.headers.get("Retry-After")

    return post


def fastapi_post(client: TestClient) -> Post:
    def post(username: str, password: str) -> Tuple[int, Optional[str]]:
        response = client.post("/login", json={"username": username, "password": password})
        return response.status_code, response.headers.get("Retry-After")

    return post


@pytest.fixture(params=["flask", "fastapi"])
def failures_only(request, server, r):
    """The failures-only recipe on one framework: (post, world). Flask's is the README's block."""
    world = World()
    if request.param == "flask":
        yield flask_post(load("Login throttling on failures only, with Flask", server, world, False)["app"]), world
        return
    app, throttle = fastapi_failures_only(server, world)
    with TestClient(app) as client:
        yield fastapi_post(client), world
        client.portal.call(throttle.client.aclose)


@pytest.fixture(params=["flask", "fastapi"])
def block_after_failures(request, server, r):
    """The 15-minute block on one framework: (post, world). FastAPI's is the README's block."""
    world = World()
    if request.param == "flask":
        yield flask_post(flask_block_after_failures(server, world)), world
        return
    namespace = load("Block for 15 minutes after 5 failed logins, with FastAPI", server, world, True)
    with TestClient(namespace["app"]) as client:
        yield fastapi_post(client), world
        client.portal.call(namespace["throttle"].client.aclose)


# ------------------------------------------------------------ login throttling on failures only

def test_failures_only_locks_out_after_five_failures_in_the_window(failures_only, r):
    post, world = failures_only
    for minute in range(5):  # five failures in the 15 minutes from the first one
        world.now = T0 + 60 * minute
        assert post("bob", "guess") == (401, None)
    world.now = T0 + 300
    assert post("bob", PASSWORD) == (429, "600")  # until the window the first failure opened ends
    world.now = T0 + 899.5
    assert post("bob", PASSWORD) == (429, "1")
    assert world.tried == [("bob", "guess")] * 5  # the refused attempts never reached the check
    world.now = T0 + 900
    assert post("bob", PASSWORD) == (200, None)
    assert r.keys("login:*") == []  # the success forgot the failures


def test_failures_only_successes_cost_nothing_and_reset_the_count(failures_only, r):
    post, world = failures_only
    assert [post("alice", PASSWORD)[0] for _ in range(10)] == [200] * 10
    assert r.keys("login:*") == []
    assert [post("carol", "guess")[0] for _ in range(4)] == [401] * 4
    assert post("carol", PASSWORD)[0] == 200  # forgets the four failures
    assert [post("carol", "guess")[0] for _ in range(5)] == [401] * 5
    assert post("carol", PASSWORD)[0] == 429
    assert post("alice", PASSWORD)[0] == 200  # another user's key


# ------------------------------------------------------------ a 15-minute block after 5 failures

def test_block_after_the_fifth_failure_for_fifteen_minutes(block_after_failures, r):
    post, world = block_after_failures
    for minute in range(4):  # four failures fit
        world.now = T0 + 60 * minute
        assert post("mallory", "guess") == (401, None)
    world.now = T0 + 600  # the fifth, 10 minutes in: refused, and the ban starts
    assert post("mallory", "guess") == (429, "900")
    world.now = T0 + 660
    assert post("mallory", PASSWORD) == (429, "840")  # not even tried
    world.now = T0 + 1499.5
    assert post("mallory", "guess") == (429, "1")  # retrying does not extend the ban
    assert world.tried == [("mallory", "guess")] * 5
    world.now = T0 + 1500  # 15 minutes after the fifth failure
    assert post("mallory", PASSWORD) == (200, None)
    assert r.keys("login:*") == []


def test_block_after_failures_counts_from_the_last_success(block_after_failures, r):
    post, world = block_after_failures
    assert [post("trent", "guess")[0] for _ in range(3)] == [401] * 3
    assert post("trent", PASSWORD)[0] == 200
    assert [post("trent", "guess")[0] for _ in range(4)] == [401] * 4  # counted afresh
    assert post("trent", "guess") == (429, "900")
    assert post("peggy", PASSWORD)[0] == 200  # another user's key


# ------------------------------------------------------------ Flask-Limiter's own deduct_when

def test_flask_limiter_deduct_when_counts_failures_only(server, r):
    """Flask-Limiter's deduct_when on throttle://: a test before the view, a hit only after a 401."""
    app = Flask(__name__)
    limiter = Limiter(get_remote_address, app=app, storage_uri=f"throttle://{server.url}")

    @app.post("/login")
    @limiter.limit("3 per 15 minutes", deduct_when=lambda response: response.status_code == 401)
    def login() -> Any:
        return ("welcome", 200) if request.form["password"] == PASSWORD else ("wrong", 401)

    client = app.test_client()
    statuses = [client.post("/login", data={"password": p}).status_code
                for p in [PASSWORD] * 3 + ["guess"] * 3 + [PASSWORD]]
    assert statuses == [200, 200, 200, 401, 401, 401, 429]
