"""The record of loop holds that bench/stalls.py reads (FOREWARN_LOOP_HOLDS): a stretch in which the event loop ran
no timer is recorded with its wall time and the CPU the loop's thread used."""

from __future__ import annotations

import asyncio
import threading
import time

from forewarn.server.loop_holds import HOLD, note_stacks_while_late, record_loop_holds


def holds_recorded(path, hold) -> list[tuple[float, float, float]]:
    async def run() -> None:
        recorder = asyncio.create_task(record_loop_holds(str(path)))
        await asyncio.sleep(0.05)  # idle turns: nothing held
        hold()
        await asyncio.sleep(0.05)
        recorder.cancel()

    asyncio.run(run())
    data = path.read_bytes()
    return [HOLD.unpack_from(data, offset) for offset in range(0, len(data), HOLD.size)]


def test_a_blocking_wait_is_a_hold_of_its_wall_time_and_little_cpu(tmp_path):
    holds = holds_recorded(tmp_path / "holds", lambda: time.sleep(0.03))
    longest = max(holds, key=lambda hold: hold[1] - hold[0])
    began, ended, cpu = longest
    assert ended - began >= 0.03
    assert cpu < 0.01  # asleep, not working


def test_work_on_the_loop_is_a_hold_of_its_cpu_time(tmp_path):
    def work() -> None:
        until = time.thread_time() + 0.03
        while time.thread_time() < until:
            pass

    holds = holds_recorded(tmp_path / "holds", work)
    assert max(cpu for _, _, cpu in holds) >= 0.03


def test_while_the_loop_is_late_every_other_threads_stack_is_noted(tmp_path):
    """FOREWARN_LOOP_STACKS: what held the loop (here, the loop's own thread asleep in ``hold_the_loop``) and what the
    other threads were doing meanwhile (``wait_elsewhere``)."""
    path = tmp_path / "stacks"
    release = threading.Event()

    def wait_elsewhere() -> None:
        release.wait(5)

    def hold_the_loop() -> None:
        time.sleep(0.03)

    async def run() -> None:
        watcher = asyncio.create_task(note_stacks_while_late(str(path)))
        await asyncio.sleep(0.02)
        hold_the_loop()
        await asyncio.sleep(0.01)
        watcher.cancel()

    other = threading.Thread(target=wait_elsewhere, name="elsewhere")
    other.start()
    try:
        asyncio.run(run())
    finally:
        release.set()
        other.join()
    notes = path.read_text()
    assert "=== the loop" in notes
    assert "[MainThread] hold_the_loop (test_loop_holds.py" in notes  # time.sleep is C: no frame of its own
    assert "[elsewhere]" in notes and "wait_elsewhere (test_loop_holds.py" in notes
