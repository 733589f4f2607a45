"""A start given the fleet file the database's fleet was read from does not parse it again (20 s at a million VMs):
the file's digest is stored beside the fleet. Any other file is parsed and compared with the stored fleet, as before."""

from pathlib import Path

import pytest

from forewarn.fleet.file import FleetFile, parse_fleet
from forewarn.server.composition import ServeError, open_service
from forewarn.server.config import ServeConfig

FLEET = """\
hosts: [{name: h1}, {name: h2}]
vms:
  - {name: a, host: h1, tags: {team: web}}
  - {name: b, host: h2}
scale_sets:
  - {name: ss, instances: 4, hosts: [h1, h2]}
event_grid:
  settings: {duplicate_rate: 0.25}
"""
# The same fleet and section, written otherwise.
REFORMATTED = """\
# reformatted, same fleet
hosts:
  - name: h1
  - name: h2
vms:
  - name: a
    host: h1
    tags: {team: web}
  - name: b
    host: h2
scale_sets: [{name: ss, instances: 4, hosts: [h1, h2]}]
event_grid: {settings: {duplicate_rate: 0.25}}
"""


@pytest.fixture
def parses(monkeypatch):
    """The fleet files parsed, by name, in order."""
    seen: list[str] = []
    parse = FleetFile.parse

    def spied(self):
        seen.append(self.filename)
        return parse(self)

    monkeypatch.setattr(FleetFile, "parse", spied)
    return seen


def start(db: Path, fleet: str | Path | None):
    """Open the service as ``forewarn serve --db DB --fleet FLEET --clock manual`` does; the fleet it serves, the
    Event Grid settings, and what the store keeps of the fleet file."""
    config = ServeConfig(db=str(db), fleet_source=None if fleet is None else str(fleet), clock_mode="manual")
    service, servings, _ = open_service(config)
    try:
        return service.settled_engine().fleet, servings["azure"].event_grid.settings, service.store.fleet_file()
    finally:
        service.store.close()


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_restart_given_the_same_file_serves_the_stored_fleet_without_parsing_it(tmp_path, parses):
    db, fleet_file = tmp_path / "f.db", write(tmp_path / "fleet.yaml", FLEET)
    fleet, settings, stored = start(db, fleet_file)
    assert parses == [str(fleet_file)] and fleet == parse_fleet(FLEET)
    assert stored == {"digest": FleetFile(FLEET, "x").digest, "event_grid": {"settings": {"duplicate_rate": 0.25}}}

    fleet_file.unlink()
    write(fleet_file, FLEET)  # a new file, the same bytes
    fleet, settings, again = start(db, fleet_file)
    assert parses == [str(fleet_file)]  # not parsed again
    assert fleet == parse_fleet(FLEET) and again == stored
    assert settings.duplicate_rate == 0.25  # the file's event_grid section still applies


def test_a_different_fleet_file_is_parsed_and_refused(tmp_path, parses):
    db = tmp_path / "f.db"
    start(db, write(tmp_path / "fleet.yaml", FLEET))
    other = write(tmp_path / "other.yaml", FLEET.replace("instances: 4", "instances: 5"))
    with pytest.raises(ServeError, match="different fleet"):
        start(db, other)
    assert parses == [str(tmp_path / "fleet.yaml"), str(other)]
    _, _, stored = start(db, None)
    assert stored["digest"] == FleetFile(FLEET, "x").digest  # the refused file was not remembered


def test_a_reformatted_file_of_the_same_fleet_is_accepted_and_remembered(tmp_path, parses):
    db = tmp_path / "f.db"
    start(db, write(tmp_path / "fleet.yaml", FLEET))
    reformatted = write(tmp_path / "fleet2.yaml", REFORMATTED)
    fleet, settings, stored = start(db, reformatted)
    assert parses == [str(tmp_path / "fleet.yaml"), str(reformatted)]  # compared with the stored fleet: the same
    assert fleet == parse_fleet(FLEET) and settings.duplicate_rate == 0.25
    assert stored["digest"] == FleetFile(REFORMATTED, "x").digest
    start(db, reformatted)
    assert len(parses) == 2  # from now on, this file is the one recognized


def test_the_demo_fleet_is_recognized_too(tmp_path, parses):
    db = tmp_path / "f.db"
    first, _, _ = start(db, "demo")
    again, _, _ = start(db, "demo")
    assert parses == ["demo-fleet.yaml"] and again == first


def test_a_reset_keeps_the_file_digest(tmp_path, parses):
    db, fleet_file = tmp_path / "f.db", write(tmp_path / "fleet.yaml", FLEET)
    start(db, fleet_file)
    service, _, _ = open_service(ServeConfig(db=str(db), clock_mode="manual"))
    try:
        service.reset()
    finally:
        service.store.close()
    start(db, fleet_file)
    assert parses == [str(fleet_file)]
