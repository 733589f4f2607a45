"""Hostile and broken YAML files (fleet, scenario, --event-grid, --access): each is refused by the CLI with one clear
line naming the file and line, quickly and in bounded memory; anchors, aliases and merge keys within the bounds
still work, and the shipped fleet and scenarios still load."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import time

import pytest

from forewarn import yamlfile
from forewarn.azure.fleet import azure_fleet
from forewarn.fleet.file import FleetFileError, load_fleet, parse_fleet
from forewarn.scenarios import ScenarioError, load_library, load_scenario, parse_scenario
from forewarn.scenarios.server import answered_by
from helpers import ROOT, SMALL_FLEET, free_port

# Ten anchors of nine aliases each: 9**9 (387 million) strings from 500 bytes.
LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join(['*' + previous] * 9)}]\n" for previous, name in zip("abcdefgh", "bcdefghi")
)
MEMORY_LIMIT = 1536 * 1024 * 1024  # address space of a CLI run: the probe's billion laughs reached 3.4 GB


def write(path, content: bytes | str):
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


BAD_FILES = {  # name: (content, what the one-line error says)
    "laughs": (LAUGHS, ":7: aliases repeat more than 1,000,000 nodes in all"),
    "latin1": (b"hosts:\n  - name: caf\xe9\n", ":2: not UTF-8: byte 0xe9 at byte offset 20 (line 2, column 14)"),
    "empty": ("# nothing yet\n\n", ":1: the {kind} file is empty"),
    "list": ("- name: a\n- name: b\n", ":1: a {kind} file is a mapping"),
    "deep": ("a: " + "[" * 80 + "]" * 80 + "\n", ":1: nested more than 64 levels deep"),
    "recursive": ("a: &loop\n  - *loop\n", ":1: an alias is inside the anchor it names"),
    "nul": ("a: 1\nb: \x00\n", ":2: not valid YAML: character #x0000 is not allowed"),
    "bad-date": ("a: 1\nb: 2026-13-45\n", ":2: not valid YAML: '2026-13-45': month must be in 1..12"),
}


def cli(*args, timeout=60) -> tuple[subprocess.CompletedProcess, float]:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "forewarn", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=limit,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    return result, time.monotonic() - started


def serve(*args) -> tuple[subprocess.CompletedProcess, float]:
    return cli(
        "serve",
        "--db",
        ":memory:",
        "--port",
        str(free_port()),
        "--imds-port",
        str(free_port()),
        "--arm-port",
        str(free_port()),
        "--ec2-port",
        str(free_port()),
        "--gce-port",
        str(free_port()),
        "--clock",
        "manual",
        *args,
    )


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# ------------------------------------------------------------------------------------------------- the reader
def test_billion_laughs_is_refused_at_once_in_process():
    started = time.monotonic()
    with pytest.raises(FleetFileError, match=r"laughs.yaml:7: aliases repeat more than 1,000,000 nodes"):
        parse_fleet(LAUGHS, "laughs.yaml")
    with pytest.raises(ScenarioError, match=r"laughs.yaml:7: aliases repeat"):
        parse_scenario(LAUGHS, "laughs.yaml")
    assert time.monotonic() - started < 2.0


def test_anchors_aliases_and_merge_keys_within_the_bounds_work():
    text = textwrap.dedent("""\
        hosts: [{name: host-01}]
        vms:
          - &web {name: web-0, host: host-01, availability_set: web, tags: &tags {team: web, tier: front}}
          - {<<: *web, name: web-1}
          - {<<: *web, name: web-2, tags: {team: db}}
          - {name: solo, tags: *tags}
        """)
    fleet = parse_fleet(text, "anchors.yaml")
    assert sorted(azure_fleet(fleet).vms) == ["solo", "web-0", "web-1", "web-2"]
    assert azure_fleet(fleet).vms["web-1"].availability_set == "web" and azure_fleet(fleet).vms["web-1"].tags == {
        "team": "web",
        "tier": "front",
    }
    assert (
        azure_fleet(fleet).vms["web-2"].tags == {"team": "db"}
        and azure_fleet(fleet).vms["solo"].tags == azure_fleet(fleet).vms["web-0"].tags
    )
    # Many aliases of a small anchor are normal use: 2,000 VMs sharing one tag map.
    many = "vms:\n  - {name: vm-0, tags: &t {a: '1', b: '2', c: '3'}}\n" + "".join(
        f"  - {{name: vm-{i}, tags: *t}}\n" for i in range(1, 2000)
    )
    assert len(azure_fleet(parse_fleet(many, "many.yaml")).vms) == 2000


@pytest.mark.parametrize(
    "text, line, problem",
    [
        (
            "a: &x 1\nb: &x 2\n",
            2,
            "not valid YAML: second occurrence",
        ),  # a duplicate anchor, as libyaml's composer says
        ("a: 1\nb: *nowhere\n", 2, "not valid YAML: found undefined alias"),
        ("a: 1\n---\nb: 2\n", 2, "not valid YAML: expected a single document in the stream, but found another"),
        ("a: 1\n? [x]\n: 2\n", 2, "keys must be plain words"),
        ("a: !!int word\n", 1, "not valid YAML: 'word': invalid literal for int()"),
        ("a: {b: [c, &d {e: f}], g: *d, h: *d}\nx: &s scalar\n*s : 3\n", None, None),
    ],
)
def test_the_reader_refuses_what_the_composer_refused(text, line, problem):
    """The reader builds values from the parser's events as they come (no tree of nodes): what a composed tree was
    refused for is refused the same way, at the same line; aliases to scalars and containers, and alias keys, read
    as before."""
    if problem is None:
        document = yamlfile.parse(text, "f.yaml")
        assert document.data == {
            "a": {"b": ["c", {"e": "f"}], "g": {"e": "f"}, "h": {"e": "f"}},
            "x": "scalar",
            "scalar": 3,
        }
        assert document.data["a"]["g"] is document.data["a"]["h"]  # an alias is the same value again
        assert document.lines[("a", "g")] == 1 and document.lines[("scalar",)] == 3
        return
    with pytest.raises(yamlfile.YamlFileError) as refused:
        yamlfile.parse(text, "f.yaml")
    assert str(refused.value).startswith(f"f.yaml:{line}: {problem}")


def test_a_large_file_s_problem_is_named_at_its_line():
    """A fleet file is read without the line of every value; a problem sends it to a second read that has them."""
    text = "vms:\n" + "".join(f"  - {{name: vm-{index}, host: h{index}}}\n" for index in range(5000))
    text += "  - {name: bad, host: h, spot: perhaps}\n"
    with pytest.raises(FleetFileError, match=r"big.yaml:5002: vms\[5000\].spot: Input should be a valid boolean"):
        parse_fleet(text, "big.yaml")
    document = yamlfile.parse(text, "big.yaml", lines=False)
    assert ("vms", 5000, "spot") not in document.lines and document.lines[("vms",)] == 1


def test_a_problem_in_merged_keys_is_reported_on_the_merge_line():
    with pytest.raises(FleetFileError, match=r"f.yaml:4: vms\[1\].hots: unknown key 'hots'"):
        parse_fleet("vms:\n  - {name: a}\n  - name: c\n    <<: {hots: h}\n", "f.yaml")


def test_the_shipped_fleet_and_scenarios_still_load():
    assert len(azure_fleet(load_fleet("demo")).vms) > 5
    assert len(load_library()) >= 13
    for path in sorted((ROOT / "src/forewarn/scenarios/library").glob("*.yaml")):
        assert load_scenario(str(path)).name == path.stem


def test_a_file_over_the_size_bound_is_refused_before_it_is_read(tmp_path):
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as handle:
        handle.truncate(yamlfile.MAX_FILE_BYTES + 1)  # sparse: nothing is written
    started = time.monotonic()
    with pytest.raises(FleetFileError, match=r"huge.yaml: the fleet file is larger than 128 MiB"):
        load_fleet(str(huge))
    assert time.monotonic() - started < 1.0


def test_an_empty_mapping_or_a_fleet_of_nothing_is_refused():
    for text in ("{}\n", "hosts: [{name: h}]\n", "scale_sets: [{name: s, instances: 0}]\n"):
        with pytest.raises(FleetFileError, match=r"f.yaml:1: the fleet has no VM and no instance"):
            parse_fleet(text, "f.yaml")


# ------------------------------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_serve_refuses_a_bad_fleet_file_with_one_line(tmp_path, name):
    content, expected = BAD_FILES[name]
    path = write(tmp_path / f"{name}.yaml", content)
    result, elapsed = serve("--fleet", str(path))
    line = one_line_error(result)
    assert f"{path}{expected.format(kind='fleet')}" in line, line
    assert elapsed < 15  # start-up included; the billion laughs ran 35 s and 3.4 GB before


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_scenario_validate_refuses_a_bad_scenario_file_with_one_line(tmp_path, name):
    content, expected = BAD_FILES[name]
    path = write(tmp_path / f"{name}.yaml", content)
    result, elapsed = cli("scenario", "validate", str(path))
    line = one_line_error(result)
    assert f"{path}{expected.format(kind='scenario')}" in line, line
    assert elapsed < 15


@pytest.mark.parametrize("name", ["laughs", "latin1", "empty"])
def test_scenario_validate_refuses_a_scenario_whose_fleet_file_is_bad(tmp_path, name):
    content, expected = BAD_FILES[name]
    write(tmp_path / "fleet.yaml", content)
    scenario = write(
        tmp_path / "s.yaml",
        "name: s\ndescription: d\nfleet: fleet.yaml\nsteps: [{at: 0s, do: restart, with: {vms: [a]}}]\n",
    )
    result, _ = cli("scenario", "validate", str(scenario))
    line = one_line_error(result)
    assert line.startswith(f"{scenario}:3: fleet: {tmp_path / 'fleet.yaml'}{expected.format(kind='fleet')}"), line


def test_scenario_run_refuses_a_bad_file_without_starting_anything(tmp_path):
    path = write(tmp_path / "laughs.yaml", LAUGHS)
    result, elapsed = cli("scenario", "run", str(path))
    assert "laughs.yaml:7: aliases repeat" in one_line_error(result).removeprefix("forewarn: ")
    assert elapsed < 15


@pytest.mark.parametrize("option", ["--event-grid", "--access"])
@pytest.mark.parametrize("name", ["laughs", "latin1"])
def test_serve_refuses_bad_event_grid_and_access_files(tmp_path, option, name):
    content, expected = BAD_FILES[name]
    fleet = write(tmp_path / "fleet.yaml", SMALL_FLEET)
    path = write(tmp_path / f"{name}.yaml", content)
    result, _ = serve("--fleet", str(fleet), option, str(path))
    assert f"{path}{expected}" in one_line_error(result)


def test_bounds_are_documented():
    fleet_docs = (ROOT / "docs" / "fleet.md").read_text()
    scenario_docs = (ROOT / "docs" / "scenarios.md").read_text()
    for docs in (fleet_docs, scenario_docs):
        assert "128 MiB" in docs and "1,000,000" in docs and "64 levels" in docs and "UTF-8" in docs


def test_the_memory_limit_leaves_a_good_fleet_servable(tmp_path):
    """The CLI runs above are under MEMORY_LIMIT; the same limit must not be what refuses a file."""
    fleet = write(tmp_path / "fleet.yaml", SMALL_FLEET)
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "forewarn",
            "serve",
            "--fleet",
            str(fleet),
            "--db",
            ":memory:",
            "--port",
            str(port),
            "--imds-port",
            str(free_port()),
            "--arm-port",
            "0",
            "--ec2-port",
            "0",
            "--gce-port",
            "0",
            "--clock",
            "manual",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT)),
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        import httpx

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read()
            try:
                if answered_by(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1), process):
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            pytest.fail("the server did not start under the memory limit")
    finally:
        process.terminate()
        process.wait(10)
