"""What a handler's process is given: its machine, its metadata URL and its own directory for the case, in its
arguments and its environment; the probes get the same."""

from __future__ import annotations

from pathlib import Path

from forewarn.conformance.processes import HandlerProcess, probe


def test_the_handler_gets_its_machine_url_and_directory(tmp_path):
    state_dir = tmp_path / "WestNO_0.state"
    state_dir.mkdir()
    argv = ["agent", "--endpoint", "{metadata_url}", "--state", "{state_dir}/state.json", "--name", "{machine}"]
    handler = HandlerProcess(argv, "WestNO_0", "http://127.0.0.1:9", tmp_path / "WestNO_0.log", state_dir)
    assert handler.command == [
        "agent",
        "--endpoint",
        "http://127.0.0.1:9",
        "--state",
        f"{state_dir}/state.json",
        "--name",
        "WestNO_0",
    ]
    assert handler.env["FOREWARN_STATE_DIR"] == str(state_dir) and handler.env["FOREWARN_MACHINE"] == "WestNO_0"


def test_a_probe_sees_the_machines_directory(tmp_path: Path):
    state_dir = tmp_path / "WestNO_0.state"
    state_dir.mkdir()
    drained = 'test -f "$FOREWARN_STATE_DIR/drained"'
    assert not probe(drained, "WestNO_0", "http://127.0.0.1:9", state_dir)
    (state_dir / "drained").touch()
    assert probe(drained, "WestNO_0", "http://127.0.0.1:9", state_dir)
