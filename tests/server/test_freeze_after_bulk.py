"""After a committed batch of at least FROZEN_AFTER changes, what lives is frozen (the cyclic collector's full
collections no longer walk a wave's events); smaller batches freeze nothing."""

from __future__ import annotations

import gc

from forewarn.core.changes import TimeMoved
from forewarn.server.tuning import FROZEN_AFTER, freeze_after_bulk
from helpers import T0


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
