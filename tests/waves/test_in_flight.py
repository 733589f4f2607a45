"""A wave's units in flight (``InFlight``): each version, one unit more or one fewer than the one it came from, is
equal to the tuple of its units and stays so whatever versions are made after it, from it or from older ones; and a
step that ends and starts thousands of units keeps no copy of them per unit."""

import random
import tracemalloc

from forewarn.waves.model import InFlight, UnitRun


def run(unit: int) -> UnitRun:
    return UnitRun(unit, (f"op-{unit}",))


def test_every_version_stays_the_tuple_it_was_made_as():
    for seed in range(300):
        chance = random.Random(seed)
        current, expected, versions, made = InFlight(), (), [], 0
        for _ in range(chance.randint(1, 80)):
            if expected and chance.random() < 0.5:
                # mostly the oldest unit ends, as a wave's units do; sometimes another one
                leaving = expected[0] if chance.random() < 0.7 else chance.choice(expected)
                current, left = current.without(leaving.unit)
                assert left is leaving
                expected = tuple(unit for unit in expected if unit is not leaving)
            else:
                starting, made = run(made), made + 1
                current, expected = current.with_run(starting), (*expected, starting)
            versions.append((current, expected))
            if chance.random() < 0.1:  # go on from an older version, as a replaced wave would
                current, expected = chance.choice(versions)
        for version, units in versions:
            assert version == units and units == version and hash(version) == hash(units)
            assert (len(version), tuple(version), list(version[:3])) == (len(units), units, list(units[:3]))


def test_a_unit_not_in_flight_is_refused():
    in_flight = InFlight([run(1), run(2)])
    try:
        in_flight.without(3)
    except KeyError:
        return
    raise AssertionError("a unit not in flight was removed")


def test_a_step_of_thousands_of_units_keeps_no_copy_of_them_per_unit():
    # A million VMs' whole-fleet wave: 5,000 hosts in flight, each ending and the next starting, all in one step
    # whose changes keep every version until the commit.
    current = InFlight(run(unit) for unit in range(5_000))
    versions = []
    tracemalloc.start()
    try:
        for unit in range(5_000, 10_000):
            current, _ = current.without(unit - 5_000)
            current = current.with_run(run(unit))
            versions.append(current)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current == tuple(run(unit) for unit in range(5_000, 10_000))
    # 5,000 versions and the 5,000 units they added (2 MB); a tuple per version would be 5,000 copies of 40 kB, 200 MB
    assert held < 5_000_000
