"""The redis endpoints ask the server whether it keeps what it acknowledges (appendonly)."""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path
from typing import Any

import coredis
import coredis.exceptions
import pytest
import trio
from redis_servers import private_redis, private_redis_available

from bridges import Context
from bridges._cli import EXIT_OK, EXIT_WEAKER, main
from bridges.endpoints.redis import RedisSink, RedisSinkConfig
from bridges.endpoints.redis._probe import ask_persistence

CTX = Context(route="r", role="sink")


async def set_appendonly(url: str, value: str) -> None:
    async with coredis.Redis.from_url(url) as client:
        await client.config_set({"appendonly": value})


async def test_appendonly_off_is_at_most_once_and_warned_once_at_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    private_redis_available()
    async with private_redis(tmp_path) as server:
        sink = RedisSink(RedisSinkConfig(url=server.url, stream="s"), CTX)
        on = await sink.probe()
        assert on.level == "durable"
        assert "appendfsync always" in on.reason
        await set_appendonly(server.url, "no")  # (the test's own server: nothing to restore)
        off = await sink.probe()
        assert off.weaker
        assert "appendonly no" in off.reason
        with caplog.at_level(logging.WARNING, logger="bridges"):
            for _ in range(2):
                async with sink.open():
                    pass
        warned = [r for r in caplog.records if "appendonly no" in r.getMessage()]
        assert len(warned) == 1
        assert warned[0].levelno == logging.WARNING


async def test_check_probe_says_so_and_exits_5_when_a_target_is_weaker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private_redis_available()
    (tmp_path / "redis").mkdir()
    async with private_redis(tmp_path / "redis") as server:
        config = tmp_path / "b.toml"
        config.write_text(
            "[routes.r]\n"
            f'source = {{ type = "file", path = "{tmp_path / "in"}" }}\n'
            f'sink = {{ type = "redis", url = "{server.url}", stream = "s" }}\n'
        )
        probe = partial(main, ["check", "--probe", str(config)])
        assert await trio.to_thread.run_sync(probe) == EXIT_OK
        assert "r: durable (appendonly yes" in capsys.readouterr().err
        await set_appendonly(server.url, "no")
        assert await trio.to_thread.run_sync(probe) == EXIT_WEAKER
        assert "r: at most once across a target restart" in capsys.readouterr().err


class _NoConfig:
    async def config_get(self, parameters: Any) -> Any:
        raise coredis.exceptions.ResponseError("ERR unknown command 'CONFIG'")


async def test_a_server_without_config_is_could_not_ask() -> None:
    answer = await ask_persistence(_NoConfig())  # type: ignore[arg-type]
    assert answer.level == "not asked"
    assert "could not ask" in answer.reason
