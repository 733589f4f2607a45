"""After a committed batch of at least FROZEN_AFTER changes, what lives is frozen (the cyclic collector's full
collections no longer walk a wave's events); smaller batches freeze nothing."""

from __future__ import annotations

import asyncio
import contextlib
import gc

from forewarn.app.runtime import Maintenance
from forewarn.core.changes import TimeMoved
from forewarn.server.tuning import FROZEN_AFTER, collector_paused, freeze_after_bulk
from helpers import T0, open_store, small_fleet


def test_a_bulk_batch_freezes_what_lives_and_a_small_one_does_not():
    gc.unfreeze()
    try:
        kept = [[index] for index in range(1000)]  # long-lived objects the collector tracks
        freeze_after_bulk([TimeMoved(T0)] * (FROZEN_AFTER - 1))
        assert gc.get_freeze_count() == 0
        freeze_after_bulk([TimeMoved(T0)] * FROZEN_AFTER)
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()


def test_a_reset_builds_its_engine_with_the_collector_paused_and_freezes_what_it_built(tmp_path):
    """``Maintenance.reset_soon`` builds the new engine inside ``engine_building``; the server's
    (``collector_paused``) pauses the cyclic collector meanwhile and freezes what was built, the new engine
    installed by then."""
    service = Maintenance.open(open_store(str(tmp_path / "r.db")), small_fleet(), "manual", 1.0, T0, "seed")
    seen: list[tuple[str, bool, object]] = []

    @contextlib.contextmanager
    def recorded():
        with collector_paused():
            seen.append(("building", gc.isenabled(), service.settled_engine()))
            yield
            seen.append(("built", gc.isenabled(), service.settled_engine()))

    service.engine_building = recorded
    before = service.settled_engine()
    gc.unfreeze()
    try:
        asyncio.run(service.reset_soon())
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert [(step, enabled) for step, enabled, _ in seen] == [("building", False), ("built", False)]
    assert seen[0][2] is before and seen[1][2] is service.settled_engine() is not before
    service.store.close()
