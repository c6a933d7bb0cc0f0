"""``bridges reload --wait`` (the unit's ExecReload): the reload's outcome is its exit status.

systemd 252 has no ``Type=notify-reload``, so a refused config used to leave
``systemctl reload`` at exit 0 and systemd logging "Reloaded". Here a real
``bridges run`` (as under the unit: ``$RUNTIME_DIRECTORY`` and
``$JOURNAL_STREAM`` set) is reloaded by the real command, with a bad config
and a good one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import trio
from family_kit import bridges_command
from notify_kit import running_bridge

from bridges.testing import wait_until

GOOD = """
[routes.files]
source = {{ type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "file", path = "{outbox}", format = "files" }}
"""
BAD = GOOD.replace('format = "files"', 'format = "nope"')


async def reload(pid: int, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    command = [*bridges_command(), "reload", *args, str(pid)]
    return await trio.run_process(command, env=env, capture_stderr=True, check=False)


@pytest.mark.deadline(60)
async def test_reload_wait_exits_with_the_outcome_and_a_refusal_is_logged_at_warning(
    tmp_path: Path,
) -> None:
    (tmp_path / "inbox").mkdir()
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    config = tmp_path / "bridges.toml"
    config.write_text(GOOD.format(outbox="outbox"))
    env = {**os.environ, "RUNTIME_DIRECTORY": str(runtime), "JOURNAL_STREAM": "8:1"}
    async with running_bridge(config, env) as (process, notify, output):
        await notify.wait_for(lambda f: f.get("READY") == "1")
        # A refused config: exit 2, what was wrong on stderr, the old routes run on.
        config.write_text(BAD.format(outbox="outbox"))
        done = await reload(process.pid, env, "--wait", "--timeout", "20")
        assert done.returncode == 2, done.stderr
        said = done.stderr.decode()
        assert "reload failed (1 problem in the config; still running the previous config)" in said
        (tmp_path / "inbox" / "a").write_text("still running")
        await wait_until(lambda: any((tmp_path / "outbox").glob("*a@*")), 0.05)
        # A good one: exit 0, and the new route runs.
        config.write_text(GOOD.format(outbox="outbox2"))
        done = await reload(process.pid, env, "--wait", "--timeout", "20")
        assert done.returncode == 0, done.stderr
        applied = f"bridges: reload: process {process.pid} applied the config\n"
        assert done.stderr.decode() == applied
        (tmp_path / "inbox" / "b").write_text("moved")
        await wait_until(lambda: any((tmp_path / "outbox2").glob("*b@*")), 0.05)
        # Without the runtime folder there is nothing to wait on: said, exit 1.
        bare = {k: v for k, v in env.items() if k != "RUNTIME_DIRECTORY"}
        done = await reload(process.pid, bare, "--wait")
        assert done.returncode == 1
        assert b"$RUNTIME_DIRECTORY is not set" in done.stderr
        process.terminate()
        with trio.fail_after(10):
            await process.wait()
    lines = output.decode().splitlines()
    # Under journald each line carries its priority: the refusal at warning (<4>),
    # so `journalctl -p warning` shows it; the good reload's lines at notice.
    assert next(line for line in lines if "reload failed" in line).startswith("<4>"), lines
    assert any(line.startswith("<4>") and "sink.format" in line for line in lines), lines
    assert any(line.startswith("<5>") and "reloaded: running 1 route" in line for line in lines)
    # A process that is gone: said, exit 1.
    done = await reload(process.pid, env, "--wait")
    assert done.returncode == 1
    assert f"no process {process.pid}".encode() in done.stderr


ANSWER = '{"pid": PID, "reloads": 7, "ok": true, "refused": false, "note": ""}'


@pytest.mark.deadline(60)
@pytest.mark.parametrize("planted", ["link", "fifo", "oversized"])
async def test_reload_wait_refuses_what_is_planted_as_the_answer_at_once_and_sends_nothing(
    tmp_path: Path, planted: str
) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    answer = runtime / "reload"
    # The process to reload: it notes each SIGHUP (and survives it).
    hups = tmp_path / "hups"
    target = await trio.lowlevel.open_process(
        ["sh", "-c", f'trap "echo hup >> {hups}" HUP; while :; do sleep 0.05; done']
    )
    try:
        valid = ANSWER.replace("PID", str(target.pid))
        if planted == "link":  # to a valid answer elsewhere: never followed
            (tmp_path / "elsewhere").write_text(valid)
            answer.symlink_to(tmp_path / "elsewhere")
        elif planted == "fifo":  # a plain open would wait for a writer for ever
            os.mkfifo(answer)
        else:  # valid JSON, padded far beyond any answer
            answer.write_text(valid + " " * (1024 * 1024))
        env = {**os.environ, "RUNTIME_DIRECTORY": str(runtime)}
        with trio.fail_after(30):
            started = trio.current_time()
            done = await reload(target.pid, env, "--wait", "--timeout", "20")
            took = trio.current_time() - started
    finally:
        target.kill()
        await target.wait()
    said = done.stderr.decode()
    assert done.returncode == 1, said
    assert took < 10, took  # at once (the command's start-up), not after the --timeout
    why = {
        "link": "a symbolic link (not followed)",
        "fifo": "not a regular file",
        "oversized": f"{answer.stat().st_size} bytes, more than 65536",
    }[planted]
    assert said == f"bridges: reload: {answer}: cannot read: {why} (no SIGHUP sent)\n", said
    assert not hups.exists()
