"""The service around the core: one command at a time, committed before anyone hears of it.

``Maintenance`` owns the engine, the store and the clock. Every command runs the engine, commits the changes it
returned in one transaction, then tells the listeners (read models such as the IMDS document cache, and the log).
If the commit fails, the engine is rebuilt from the store, so memory never holds a change the database lacks. A
database that cannot be reached refuses the command before the engine runs it (``SQLStore.ready``); one lost between
that check and the commit leaves the engine unsettled: every read and command is refused (Unavailable) until the
database answers again and the engine is rebuilt from it.

Group commit (``perform_soon``) takes the transaction off the event loop: one group's transaction runs in a worker
thread while the loop goes on reading requests, and the commands that arrive meanwhile form the next group, run on
the engine once the first is durable. While a group's transaction is under way the engine holds changes the
database may not have yet, so ``engine`` (how every surface reads it) first waits for that transaction and
announces it: nothing uncommitted is ever read, and reading costs nothing when no group is under way.

A clock move over many deadlines is made in parts (``changes_per_part``): each part is the move's turn in one group,
committed like any command, and the rest goes first in the next group, which starts at the event loop's next turn,
so that requests are answered between parts; the move is answered once its last part is durable, and its clock is
committed with that part. Between parts the engine holds whole deadlines applied, at the instant reached.
A command over many machines can be made in parts the same way (``perform_in_parts_soon``): its checks come first, as
parts that change nothing, and no other command runs between its parts, so that none can make a later part wrong.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from forewarn.app.errors import Unavailable
from forewarn.core.changes import Change, Rebuilt, Reset, TimeMoved
from forewarn.core.clock import MANUAL, REAL, Clock
from forewarn.core.component import StoredRows
from forewarn.core.errors import Conflict, CoreError
from forewarn.engine.engine import Engine
from forewarn.engine.rules import Rules
from forewarn.engine.teardown import dismantle
from forewarn.fleet.model import Fleet
from forewarn.fleet.section import stored_fleet
from forewarn.store import JournalEntry, Outgoing, SQLStore, StoredState, StoreError, records_digest

log = logging.getLogger("forewarn.events")

Listener = Callable[[list[Change]], None]


def _repair_line(change: Change) -> str:
    return f"{change.subject()} repaired: {getattr(change, 'reason', change)}"


class _Reads:
    """The database as the engine reads what it no longer keeps in memory (core/component.py's StoredRows): one out
    of reach is Unavailable, which each surface answers with its own retryable error, as for a write."""

    def __init__(self, database: StoredRows) -> None:
        self._database = database

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._database.read(sql, params)
        except StoreError as error:
            raise Unavailable(str(error), error.retry_after) from error


def _stored(store: SQLStore) -> StoredState:
    """The state of a store that was initialized (it keeps its fleet from then on)."""
    state = store.load()
    if state is None:
        raise StoreError(f"{store.description}: the database holds no fleet (was it emptied while in use?)")
    return state


def _served_fleet(state: StoredState, given: Fleet | None) -> Fleet:
    """The fleet a stored database serves: its own, which ``given`` (--fleet) must equal. Compared by digest when the
    database stored one: the given fleet is then served as it is, and the stored records are never read."""
    if given is not None and state.fleet_digest is not None:
        if records_digest(given.to_records()) != state.fleet_digest:
            raise FleetMismatch(FLEET_DIFFERS)
        return given
    stored = stored_fleet(state.fleet_records)
    if given is not None and given != stored:
        raise FleetMismatch(FLEET_DIFFERS)
    return stored


FLEET_DIFFERS = (
    "the database already holds a different fleet; use a new database, or start without --fleet to keep the stored one"
)


def _describe_clock(clock: Clock) -> str:
    return clock.mode + (f" x{clock.speed:g}" if clock.mode == REAL and clock.speed != 1 else "")


class FleetMismatch(Exception):
    """The database already holds a different fleet than the one given."""


@dataclass(frozen=True)
class ClockView:
    mode: str
    speed: float
    now: datetime
    next_deadline: datetime | None


Command = Callable[[Engine], list[Change]]
# Reads the engine and raises CoreError when the command it goes with is to be refused; changes nothing. A refusal
# that comes from the command itself costs a rebuild of the engine from the store (it may have changed part of it);
# one from its check costs nothing, which is why the commands clients send often come with one.
Check = Callable[[Engine], None]
# A clock move, found when it runs (after the commands before it in its group): from the clock those left, the
# engine and the wall time, the clock it leaves and the simulated time the engine goes to (deadlines up to it fire).
ClockMove = Callable[[Clock, Engine, float], tuple[Clock, datetime]]
# A command made in parts: one part on the engine, its changes, and the rest of the command (None: it is done).
Parts = Callable[[Engine], tuple[list[Change], "Parts | None"]]
# The changes a clock move's part may make before the rest of the move is left to the next group commit: each part
# holds the event loop for its engine work and its announcement (20 to 40 µs a change, a wave's end step the
# dearest: 5 to 10 ms a part), and its transaction runs in the worker while the loop answers requests
# (bench/stalls.py). Fixed, not timed: where a move's parts end shows in the documents (a scope touched by two parts
# moves two DocumentIncarnations), and the same commands must give the same documents on any machine.
CHANGES_PER_PART = 250


class RefusedMidway(Exception):
    """A member of a group commit refused (``refusal``) after it may have changed the engine."""

    def __init__(self, member: Member, refusal: CoreError):
        super().__init__(str(refusal))
        self.member = member
        self.refusal = refusal


class Member:
    """A command waiting for its group commit: the command and its check, or the clock move that gives them; once
    a part of it is committed, the rest (``parts``), what the parts made so far and the clock its move leaves."""

    __slots__ = ("command", "future", "check", "move", "first", "parts", "made", "clock")

    def __init__(
        self,
        command: Command | None,
        future: asyncio.Future[list[Change]],
        check: Check | None = None,
        move: ClockMove | None = None,
        first: Parts | None = None,
    ):
        self.command = command
        self.future = future
        self.check = check
        self.move = move
        self.first = first  # a command made in parts (``perform_in_parts_soon``): its first part
        self.parts: Parts | None = None  # set once its first part is committed
        self.made: list[Change] = []
        self.clock: Clock | None = None


@dataclass(frozen=True)
class _Continued:
    """A member's part made in a group: its changes, the rest of the command, and the clock the move leaves."""

    made: list[Change]
    rest: Parts
    clock: Clock | None


Outcome = list[Change] | CoreError | _Continued


def _by(delta: timedelta) -> ClockMove:
    def move(clock: Clock, engine: Engine, wall: float) -> tuple[Clock, datetime]:
        moved = clock.advanced_by(delta, wall)
        return moved, moved.anchor_sim

    return move


def _to(moment: datetime) -> ClockMove:
    return lambda clock, engine, wall: (clock.moved_to(moment, wall), moment)


def _to_next_deadline(clock: Clock, engine: Engine, wall: float) -> tuple[Clock, datetime]:
    """Manual clocks: to the next deadline, or nowhere when nothing is pending."""
    due = engine.next_deadline()
    moment = due if due is not None else clock.anchor_sim
    return clock.moved_to(moment, wall), moment


def _reconfigured(mode: str, speed: float) -> ClockMove:
    def move(clock: Clock, engine: Engine, wall: float) -> tuple[Clock, datetime]:
        # The engine goes to the same instant, as a clock move takes it (deadlines up to it fire, committed together).
        reconfigured = clock.reconfigured(mode, speed, wall)
        return reconfigured, max(reconfigured.anchor_sim, engine.now)

    return move


T = TypeVar("T")


class Role(Protocol):
    """The part a process plays in writing the database it serves. A process serving alone always leads (``ALONE``);
    one sharing its database with others (``replication/``) leads it or follows the leader, and can change."""

    def admit(self, write: str) -> None:
        """Nothing when this process may make ``write`` ("command", "reset"); else raise an ``Unavailable`` saying
        why not, before anything is changed."""

    def took(self, seconds: float) -> None:
        """An admitted command took ``seconds``, from handed in to durable (or failed)."""

    def catch_up(self, service: Maintenance) -> list[Change]:
        """Bring the engine to the clock's time: a leader commits the deadlines that fell due
        (``Maintenance.commit_due``); a follower applies them in memory only (``Maintenance.follow``)."""

    def relays_read(self, scope: str) -> bool:
        """A machine of ``scope`` read its metadata here. True: the write that reading makes (an idle timer moved, a
        scope enabled) is noted for the leader, which makes it (``Maintenance.reads_relayed``); False: make it here."""


class Alone:
    """A process that serves its database alone: it makes every write, and commits what falls due."""

    def admit(self, write: str) -> None:
        return None

    def took(self, seconds: float) -> None:
        return None

    def catch_up(self, service: Maintenance) -> list[Change]:
        return service.commit_due()

    def relays_read(self, scope: str) -> bool:
        return False


ALONE = Alone()


class _Group:
    """A group commit whose transaction is under way in the worker thread."""

    __slots__ = ("members", "outcomes", "changes", "clock", "delivers", "commit", "moves_time", "time_before")

    def __init__(
        self,
        members: list[Member],
        outcomes: list[Outcome],
        changes: list[Change],
        clock: Clock | None,
        delivers: bool,
        commit: concurrent.futures.Future[None],
        moves_time: bool,
        time_before: datetime,
    ):
        self.members = members
        self.outcomes = outcomes
        self.changes = changes
        self.clock = clock  # the clock it commits, when one of its commands moved it
        self.delivers = delivers  # it writes deliveries to the outbox, or moves the clock
        self.commit = commit
        self.moves_time = moves_time  # it moves the engine's time (a clock move, or a part of one)
        self.time_before = time_before  # the engine's time before it ran: what the database holds until it lands


class Maintenance:
    def __init__(
        self,
        store: SQLStore,
        engine: Engine,
        clock: Clock,
        wall: Callable[[], float] = time.time,
        role: Role = ALONE,
    ):
        self.store = store
        self.role = role  # whether this process writes, and how time passes here (leader or follower)
        # What a leader does with the reads a follower relayed (``reads_relayed``): each cloud that tracks them.
        self._read_handlers: list[Callable[[list[str]], Awaitable[object] | None]] = []
        self._engine = engine
        # The engine's rules, read without waiting for a group commit (a rebuilt engine keeps them).
        self.rules: Rules = engine.rules
        self.clock = clock
        self.wall = wall
        self._listeners: list[Listener] = []
        # Functions of a command's changes that give the messages to deliver, committed with the changes.
        self._outboxes: list[Callable[[list[Change], Engine], list[Outgoing]]] = []
        self._lock = threading.RLock()
        # Commands waiting for the next group commit (perform_soon), with the futures that answer them.
        self._grouped: list[Member] = []
        self._delivery_watchers: list[Callable[[], None]] = []
        self._in_flight: _Group | None = None  # the group whose transaction the worker runs
        # Told, on their event loop, once that group has landed (``after_landing``).
        self._landings: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []
        # The changes a part of a clock move may make (``CHANGES_PER_PART``); None: a move is one command.
        self.changes_per_part: int | None = CHANGES_PER_PART
        # The rest of a real clock's catch-up, under way in parts (``commit_due``); None: none is.
        self.catching_up: asyncio.Future[list[Change]] | None = None
        # Why the engine may hold changes the database lacks (a failed commit it could not be rebuilt after); None:
        # it holds exactly what was committed.
        self._unsettled: Exception | None = None
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        # A reset, or a rebuild after a failed group commit, under way in a thread (``reset_soon``,
        # ``_rebuild_soon``), done once its engine is installed; None: none is.
        self._resetting: asyncio.Future[None] | None = None
        self._rebuilding: asyncio.Task[None] | None = None  # the rebuild's task, held (one nobody holds may vanish)
        self._due_wall = float("inf")
        self._refresh_due()
        # What surrounds building a whole engine while the server runs (``reset_soon``): the server pauses the
        # garbage collector there (server/tuning.py).
        self.engine_building: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext

    def settled_engine(self) -> Engine:
        """The engine as the database has it: a group commit under way is waited for (and announced) first, which
        blocks the caller (the event loop, in a route) for what is left of its transaction. Unavailable while the
        engine may hold changes the database lacks and the database is out of reach."""
        if self._in_flight is not None:
            self.settle()
        if self._unsettled is not None:
            self._resettle()
        return self._engine

    def _install(self, engine: Engine) -> None:
        replaced, self._engine = self._engine, engine
        self.rules = engine.rules
        if replaced is not engine:
            replaced.close()  # freed as it is dropped, not left to the cyclic collector
            parts = [*replaced.components.values(), replaced.wave_runner, replaced.scheduler]
            threading.Thread(target=dismantle, args=(parts,), name="forewarn-dismantle", daemon=True).start()

    # -------------------------------------------------------------------------------------------- opening
    @classmethod
    def open(
        cls,
        store: SQLStore,
        fleet: Fleet | None,
        clock_mode: str | None = None,
        speed: float | None = None,
        start: datetime | None = None,
        seed: str | None = None,
        rules: Rules | None = None,
        wall: Callable[[], float] = time.time,
        outboxes: Iterable[Callable[[list[Change], Engine], list[Outgoing]]] = (),
        role: Role = ALONE,
    ) -> Maintenance:
        """Open a store: initialize it with ``fleet``, or load it and apply deadlines that passed while it was down.

        ``clock_mode`` and ``speed`` left None keep the stored clock setting (a new database: real, speed 1); given,
        they reconfigure it from the same simulated time."""
        state = store.load()
        now_wall = wall()
        created = state is None
        if state is None:
            if fleet is None:
                raise FleetMismatch("the database is empty; give a fleet file (--fleet FILE, or --fleet demo)")
            clock = Clock.start(clock_mode or REAL, 1.0 if speed is None else speed, now_wall, start)
            seed = seed or secrets.token_hex(8)
            store.initialize(fleet.to_records(), seed, clock, clock.now(now_wall))
            state = _stored(store)
            served = fleet
        else:
            if start is not None or seed is not None:
                log.warning("--start and --seed apply to a new database only; this one keeps its time and seed")
            served = _served_fleet(state, fleet)
        # A database written before the bounds (core/bounds.py) were enforced may hold values beyond them. They are
        # clamped, logged with what they name, and written back before anything else happens: refusing to start
        # would leave the database unusable, and dropping the events would lose them.
        stored_clock, clock_repair = state.clock.within_bounds()
        if clock_repair:
            log.warning("%s", clock_repair)
        # One Fleet object in memory, not one more built from the records (a million VMs are hundreds of megabytes).
        engine = cls.engine_from(state, rules, served)
        for change in engine.repaired:
            log.warning("%s", _repair_line(change))
        if clock_repair or engine.repaired:
            store.commit(engine.repaired, engine.now, stored_clock)
            engine.repaired = []
        service = cls(store, engine, stored_clock, wall, role)
        for derive in outboxes:  # before catching up, so that what happened while down is delivered too
            service.add_outbox(derive)
        stored = stored_clock
        reconfigured = stored.reconfigured(
            clock_mode or stored.mode, stored.speed if speed is None else speed, now_wall
        )
        if reconfigured != stored:
            service.clock = reconfigured
            store.commit([], service.settled_engine().now, reconfigured)
            log.info(
                "clock: %s, as given (--clock/--speed); the database had %s",
                _describe_clock(reconfigured),
                _describe_clock(stored),
            )
        elif created:
            log.info("clock: %s (new database)", _describe_clock(stored))
        else:
            log.info(
                "clock: %s, as stored in the database%s",
                _describe_clock(stored),
                "" if clock_mode or speed is not None else " (--clock/--speed change it)",
            )
        service.catch_up()
        return service

    @staticmethod
    def engine_from(state: StoredState, rules: Rules | None, fleet: Fleet | None = None) -> Engine:
        # Each component's stored state comes under the names the engine takes it by (its Records.load).
        return Engine(
            fleet or stored_fleet(state.fleet_records),
            state.seed,
            state.now,
            rules,
            created_at=state.created_at,
            stored=state.records,
            next_seq=state.next_seq,
            database=None if state.database is None else _Reads(state.database),
        )

    # ----------------------------------------------------------------------------------------------- core
    def subscribe(self, listener: Listener) -> None:
        """``listener(changes)`` after each committed command that changed something (never an empty list);
        ``listener([Rebuilt(cause)])`` when the engine was rebuilt from the database, so that whatever was derived
        from it is dropped."""
        self._listeners.append(listener)

    def watch_deliveries(self, wake: Callable[[], None]) -> None:
        """``wake()`` after each commit that wrote deliveries or moved simulated time, and after the engine was
        rebuilt or reset: whenever the outbox may hold something newly due (and only then, so that the sender does
        not read the database after every approval)."""
        self._delivery_watchers.append(wake)

    def _deliveries_changed(self) -> None:
        for wake in self._delivery_watchers:
            wake()

    def add_outbox(self, derive: Callable[[list[Change], Engine], list[Outgoing]]) -> None:
        """Deliveries derived from each command's changes are committed in the same transaction (at least once,
        durable: ``app/outbox.py`` sends them)."""
        self._outboxes.append(derive)

    def _run(self, command: Command, clock: Clock | None = None, check: Check | None = None) -> list[Change]:
        self.role.admit("command")
        started = time.perf_counter()
        try:
            return self._commit(command, clock, check)
        finally:
            self.role.took(time.perf_counter() - started)

    def _commit(self, command: Command, clock: Clock | None, check: Check | None) -> list[Change]:
        self.settle()  # after the group commit under way, which this command's state follows
        with self._lock:
            # Before the engine changes: a database out of reach refuses the command here, with nothing to undo.
            try:
                self.store.ready()
            except StoreError as error:
                raise Unavailable(str(error), error.retry_after) from error
            self._resettle()
            engine = self._engine
            if check is not None:
                check(engine)  # refused here, the command has changed nothing
            try:
                changes = command(engine)
                outgoing = [item for derive in self._outboxes for item in derive(changes, engine)]
                self.store.commit(changes, engine.now, clock, outgoing, engine.next_seq)
                engine.release()  # what ended is durable now: it may leave memory
            except Exception as error:
                # Whatever stopped the command, a refusal included, may have come after it changed part of the
                # engine: the engine is rebuilt from what was committed, so that nothing of it stays.
                self._rebuild_soon(error)
                if isinstance(error, StoreError):
                    raise Unavailable(str(error), error.retry_after) from error
                raise
            if clock is not None:
                self.clock = clock
            self._refresh_due()
        self.announce(changes)
        if outgoing or clock is not None or any(isinstance(change, TimeMoved) for change in reversed(changes)):
            self._deliveries_changed()
        return changes

    def _rebuild(self, cause: Exception) -> None:
        try:
            state = _stored(self.store)
        except Exception as error:
            # Memory may hold changes the database lacks (a database lost between the check before a command and
            # its commit, and still out of reach after the store's wait for it). Serving them would show clients
            # what may never have been committed (an EventId the database will hand out again), so nothing is
            # served from memory until the engine is rebuilt: ``engine`` raises Unavailable until then, and
            # rebuilds it once the database answers again (``_resettle``).
            if self._unsettled is None:
                log.error(
                    "commit failed (%s) and reloading from the database failed (%s); answering 503 until the "
                    "database is back, then reloading",
                    cause,
                    error,
                )
            self._unsettled = cause
            return
        self._take(state, cause)

    def _rebuild_soon(self, cause: Exception) -> None:
        """As ``_rebuild``, with the database read and the engine built (O(fleet): seconds at a million VMs) in a
        thread. Meanwhile nothing is read from the engine, which may hold the failed commit's changes (Unavailable,
        as while the database is out of reach), and commands and due deadlines wait, as for a reset."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # landed in a thread with no event loop (``settle``): rebuilt here
            with self._lock:
                self._rebuild(cause)
            return
        self._unsettled = cause
        if self._resetting is not None:  # a reset waits for this group: the engine it installs is built afresh
            return
        self._resetting = loop.create_future()
        self._rebuilding = loop.create_task(self._rebuilt_off_loop(cause))

    async def _rebuilt_off_loop(self, cause: Exception) -> None:
        try:
            with self.engine_building():
                clock, engine = await asyncio.to_thread(self._built_from_store)
            with self._lock:
                self._take_built(clock, engine, cause)
        except Exception as error:  # the database out of reach: rebuilt once it answers again (``_resettle``)
            log.error(
                "commit failed (%s) and reloading from the database failed (%s); answering 503 until the database "
                "is back, then reloading",
                cause,
                error,
            )
            # Refused, not left waiting: the next command to come tries the database again (``_start_group``).
            waiting, self._grouped = self._grouped, []
            _fail(waiting, Unavailable(f"the engine could not be reloaded from the database: {error}", 1))
        finally:
            rebuilding, self._resetting = self._resetting, None
            if rebuilding is not None:
                rebuilding.set_result(None)
            if self._grouped:
                asyncio.get_running_loop().call_soon(self._start_group)

    def _built_from_store(self) -> tuple[Clock, Engine]:
        """The stored clock and an engine built from the database. What was read is freed here, in the caller's
        thread: a million events' records, freed on the event loop, would hold it."""
        state = _stored(self.store)
        return state.clock.within_bounds()[0], self.engine_from(state, self._engine.rules, self._engine.fleet)

    def _take(self, state: StoredState, cause: Exception) -> None:
        """The engine rebuilt from ``state``, what was derived from the old one dropped."""
        self._take_built(
            state.clock.within_bounds()[0], self.engine_from(state, self._engine.rules, self._engine.fleet), cause
        )

    def _take_built(self, clock: Clock, engine: Engine, cause: Exception) -> None:
        self._install(engine)
        self.clock = clock
        self._unsettled = None
        self._refresh_due()
        what = "refused" if isinstance(cause, CoreError) else "commit failed"
        self.tell([Rebuilt(f"{what}: {cause}")])
        self._deliveries_changed()

    def _resettle(self) -> None:
        """Nothing while the engine holds only what was committed. Otherwise (``_rebuild`` could not reach the
        database) rebuild it once the database answers again: in a thread where an event loop runs (the caller is
        refused, Unavailable, until it is installed), here where none does; Unavailable while the database is still
        out of reach."""
        cause = self._unsettled
        if cause is None:
            return
        if self._resetting is None:
            with self._lock:
                if self._unsettled is None:
                    return
                try:
                    self.store.ready()
                except StoreError as error:
                    raise Unavailable(
                        f"the engine may hold changes the database lacks and is reloaded once it is back: {error}",
                        error.retry_after,
                    ) from error
                self._rebuild_soon(cause)
                if self._unsettled is None:  # rebuilt here: no event loop runs
                    self._told_resettled()
                    return
                if self._resetting is not None:
                    self._resetting.add_done_callback(self._told_resettled)
        raise Unavailable(f"the engine is being reloaded from the database after a failed commit ({cause})", 1)

    def _told_resettled(self, _: object = None) -> None:
        if self._unsettled is None:
            log.warning("reloaded the engine from the database after a failed commit; serving again")

    def announce(self, changes: list[Change]) -> None:
        """Tell the log and the listeners of ``changes`` (nothing, when there are none)."""
        if not changes:
            return  # nothing happened (an approval of a Started event, a policy set to what it was)
        if log.isEnabledFor(logging.INFO):
            for change in changes:
                line = change.describe()
                if line is not None:
                    log.info("%s", line)
        for listener in self._listeners:
            listener(changes)

    def tell(self, changes: list[Change]) -> None:
        """Tell the listeners of ``changes`` as they are, unlogged: what a follower took from the leader."""
        for listener in self._listeners:
            listener(changes)

    # ------------------------------------------------------------------------------------------ following
    # What a role that follows another process's commits does with the engine (replication/): it changes the engine
    # in memory only, under the lock commands take, and never commits.
    def follow(self, change: Callable[[Engine], T], clock: Clock | None = None) -> T:
        """``change(engine)`` without committing it, under the commands' lock; then ``clock`` (if given) is the
        clock, and the next deadline is found again. The caller tells the listeners what they are to hear."""
        with self._lock:
            made = change(self.settled_engine())
            if clock is not None:
                self.clock = clock
            self._refresh_due()
        return made

    def adopt(self, engine: Engine, clock: Clock, told: Change) -> None:
        """Serve ``engine`` and ``clock`` from now on (built elsewhere from what the database holds); the listeners
        hear ``told`` (a ``Rebuilt``), so that whatever was derived from the old engine is dropped."""
        with self._lock:
            self._install(engine)
            self.clock = clock
            self._refresh_due()
        self.tell([told])

    def in_memory(self, read: Callable[[Engine], T]) -> T:
        """``read(engine)`` under the commands' lock, without waiting for a group commit under way: only for what no
        command of a group changes and nothing commits (an idle timer that lives in memory)."""
        with self._lock:
            return read(self._engine)

    def on_reads_relayed(self, handle: Callable[[list[str]], Awaitable[object] | None]) -> None:
        """``handle(scopes)`` at the leader for the scopes whose machines read their metadata at a follower
        (``Role.relays_read``): the writes those reads make here, through the group commit (what ``handle``
        returns, None when they make none)."""
        self._read_handlers.append(handle)

    def reads_relayed(self, scopes: list[str]) -> list[Awaitable[object]]:
        """A follower's report of the scopes read there, each as if read here: the commits it makes, to await before
        the follower is answered; refused where this process may not write."""
        self.role.admit("report")
        made = (handle(scopes) for handle in self._read_handlers)
        return [commit for commit in made if commit is not None]

    def _refresh_due(self) -> None:
        due = self._engine.next_deadline()
        when = None if due is None else self.clock.wall_when(due)
        self._due_wall = float("inf") if when is None else when

    @property
    def due_wall(self) -> float:
        """Wall time at which the next deadline falls due (infinity for a manual clock or no deadline)."""
        return self._due_wall

    def journal(self, event_id: str | None = None, limit: int = 1000) -> list[JournalEntry]:
        """What was committed, oldest first: one event's entries, or the latest ``limit`` of all."""
        try:
            return self.store.journal(event_id, limit=limit)
        except StoreError as error:
            raise Unavailable(str(error), error.retry_after) from error

    def deliveries(self, limit: int = 1000) -> list[dict[str, Any]]:
        """Outgoing messages (AWS Health events) and how their delivery went."""
        try:
            return self.store.deliveries(limit)
        except StoreError as error:
            raise Unavailable(str(error), error.retry_after) from error

    def catch_up(self) -> list[Change]:
        """Bring the engine to the clock's time (real clocks; manual ones move only by command), as this process's
        role does it: committed where it leads (``commit_due``), in memory where it follows."""
        return self.role.catch_up(self)

    def commit_due(self) -> list[Change]:
        """Bring the engine to the clock's time (real clocks; manual ones move only by command).

        Deadlines that fell due are applied and committed: more than ``changes_per_part`` changes' worth is applied
        in parts, the first here and the rest through the group commit (``catching_up`` until they are durable).
        Time that passes with nothing due needs no commit: a real clock's time is derived from its stored anchor, so
        the engine just follows it in memory.
        """
        if self.clock.mode == MANUAL or self.catching_up is not None or self._resetting is not None:
            # A catch-up in parts is under way (what it applied so far is what there is to read), or a reset, whose
            # new engine catches up once installed.
            return []
        now = self.clock.now(self.wall())
        with self._lock:
            due = self.settled_engine().next_deadline()
            if due is None or now < due:
                if now > self.settled_engine().now:
                    self.settled_engine().advance(now)
                return []
        # One part here, committed before this returns; the rest, if any, in parts through the group commit (on an
        # event loop; with none, such as at start-up, everything here).
        try:
            asyncio.get_running_loop()
            budget = self.changes_per_part
        except RuntimeError:
            budget = None
        finished: list[bool] = []

        def first_part(engine: Engine) -> list[Change]:
            changes, done = engine.advance_some(max(now, engine.now), budget)
            finished[:] = [done]
            return changes

        made = self._run(first_part)
        if not finished[0]:
            rest = self._enqueue(None, None, lambda clock, engine, wall: (clock, max(now, engine.now)))
            self.catching_up = rest
            rest.add_done_callback(self._caught_up)
        return made

    def _caught_up(self, done: asyncio.Future[list[Change]]) -> None:
        if self.catching_up is done:
            self.catching_up = None

    def now(self) -> datetime:
        # Only a grouped clock move (or a part of one) changes the engine's time (catch_up does too, before the group
        # runs). While one is under way, the time is the one the database holds, from before it: read without
        # waiting for its transaction, which every metadata answer (its Date header) would otherwise wait for.
        group = self._in_flight
        if group is not None and group.moves_time:
            return max(self.clock.now(self.wall()), group.time_before)
        return max(self.clock.now(self.wall()), self._engine.now)

    # ------------------------------------------------------------------------------------------ commands
    def perform(self, command: Command, check: Check | None = None) -> list[Change]:
        """Run one engine command at the current time, committed before this returns; ``check`` first, if given.

        The transaction runs in the calling thread: only for callers with no event loop (start-up, tests, scripts).
        Surfaces on the event loop use ``perform_soon``, which commits off the loop (a metadata read that writes,
        such as one that enables its scope, returns a Deferred answer that waits for it)."""
        self.catch_up()
        return self._run(command, check=check)

    def perform_soon(self, command: Command, check: Check | None = None) -> asyncio.Future[list[Change]]:
        """Group commit: run ``command`` with the others handed in while the previous group's transaction was under
        way (or during the same turn of the event loop), all in one transaction, and resolve the future once that
        transaction is durable (never before: committed before answered, as ``perform``). Each command runs on the
        engine in turn, as ``perform`` would run them one after the other; a refused one (CoreError) fails alone.
        If the commit fails, every command of the group fails and the engine is rebuilt from what was committed.

        The transaction runs in a worker thread: the event loop goes on reading requests meanwhile, and the commands
        they bring form the next group, which runs on the engine once this one is durable. The cost is latency: a
        command waits for the transaction under way, then for its own group's."""
        return self._enqueue(command, check, None)

    def perform_in_parts_soon(self, first: Parts, check: Check | None = None) -> asyncio.Future[list[Change]]:
        """``perform_soon`` for a command over many machines, given as its first part (each part returns its changes
        and the next part, None for the last): each part runs in a group of its own, started at the loop's next turn
        once the part before is durable, so that the event loop answers requests between parts, and the future
        resolves with every part's changes once the last is durable. ``check`` refuses the whole command before its
        first part, and so does a ``CheckingPart``'s refusal. No other command runs between its parts (they wait,
        as a clock move waits for another in parts), so a part after its checks is refused only by a defect; on a
        real clock, deadlines that fall due meanwhile still apply between them. Readers see the parts committed so
        far."""
        return self._enqueue(None, check, None, first)

    def _enqueue(
        self, command: Command | None, check: Check | None, move: ClockMove | None, first: Parts | None = None
    ) -> asyncio.Future[list[Change]]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Change]] = loop.create_future()
        try:
            self.role.admit("command")
        except Unavailable as refusal:
            future.set_exception(refusal)
            return future
        started = time.perf_counter()
        future.add_done_callback(lambda _: self.role.took(time.perf_counter() - started))
        self._grouped.append(Member(command, future, check, move, first))
        if len(self._grouped) == 1 and self._in_flight is None:
            loop.call_soon(self._start_group)
        return future

    def _requeue(self, member: Member) -> None:
        """``member`` goes on with its next part in the next group, first (it began before the others waiting)."""
        self._grouped.insert(0, member)
        member.future.get_loop().call_soon_threadsafe(self._start_group)

    def _runnable(self) -> list[Member]:
        """The members waiting that may run in the next group (and out of ``_grouped``): all but a clock move while
        another is under way in parts, which waits for it to end (it would find the clock the first move is to
        leave, and time part of the way there); only the next part of a command under way in parts, when one is."""
        commanding = next((m for m in self._grouped if m.move is None and m.parts is not None), None)
        if commanding is not None:
            self._grouped.remove(commanding)
            return [commanding]
        moving = any(member.move is not None and member.parts is not None for member in self._grouped)
        if not moving:
            group, self._grouped = self._grouped, []
            return group
        group = [m for m in self._grouped if m.move is None or m.parts is not None]
        self._grouped = [m for m in self._grouped if not (m.move is None or m.parts is not None)]
        return group

    def _start_group(self) -> None:
        if self._in_flight is not None or not self._grouped or self._resetting is not None:
            return  # the group under way starts this one when it lands, and a reset when it ends
        if self._unsettled is not None and not self._rebuilt_first():
            return
        group = self._runnable()
        try:
            self.catch_up()
        except Exception as error:
            _fail(group, error)
            return
        with self._lock:
            try:
                self.store.ready()
                self._resettle()
            except StoreError as error:
                _fail(group, Unavailable(str(error), error.retry_after))
                return
            except Unavailable as error:
                _fail(group, error)
                return
            try:
                time_before = self._engine.now
                outcomes, changes, outgoing, clock = self._run_group(group)
                engine = self._engine
                if not changes and not outgoing and clock is None:  # nothing to make durable (all refused, or no-ops)
                    self._answer(group, outcomes)
                    return
                if self._worker is None:
                    self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forewarn-commit")
                # The worker encodes the rows too: from the changes, and from engine objects that nothing changes
                # until this group lands (commands wait for it, and so does every read of ``engine``).
                commit = self._worker.submit(self.store.commit, changes, engine.now, clock, outgoing, engine.next_seq)
            except RefusedMidway as refused:
                self._refused_midway(group, refused)
                return
            except Exception as error:  # a defect (or no worker, at exit): the engine may hold part of the group
                self._rebuild_soon(error)
                _fail(group, error)
                return
            moves_time = clock is not None or any(
                isinstance(outcome, _Continued) and member.move is not None for member, outcome in zip(group, outcomes)
            )
            self._in_flight = _Group(
                group, outcomes, changes, clock, bool(outgoing) or moves_time, commit, moves_time, time_before
            )
        loop = asyncio.get_running_loop()

        # The callback names no group: the future keeps its callbacks, and one that held the group would make a
        # cycle of every group (its changes, its futures) for the garbage collector to find.
        def landed(_: concurrent.futures.Future[None]) -> None:
            # The worker's: hand the outcome to the loop. A loop closed meanwhile (the server stopped) has no one
            # left to answer; the transaction finished or failed on its own.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._landed)

        commit.add_done_callback(landed)

    def _run_group(self, group: list[Member]) -> tuple[list[Outcome], list[Change], list[Outgoing], Clock | None]:
        """Each command of ``group`` on the engine in turn: what each made or why it was refused, all their changes
        and deliveries, and the clock they leave when one moved it (None: unmoved). A command refused by its check
        fails alone. One refused only after it may have changed the engine raises ``RefusedMidway``. A clock move
        makes one part of itself (``changes_per_part``): its outcome is then a ``_Continued``, and the clock it
        leaves is committed with its last part."""
        engine = self._engine
        outcomes: list[Outcome] = []
        changes: list[Change] = []
        outgoing: list[Outgoing] = []
        clock: Clock | None = None
        for member in group:
            try:
                if member.parts is None:
                    parts, moved = self._first_part(member, clock, engine)
                else:
                    parts, moved = member.parts, member.clock
            except CoreError as refusal:
                outcomes.append(refusal)
                continue
            try:
                made, rest = parts(engine)
            except CoreError as refusal:
                if isinstance(parts, CheckingPart) and not member.made:  # nothing of it to undo
                    outcomes.append(refusal)
                    continue
                raise RefusedMidway(member, refusal) from refusal
            if rest is None:
                clock = moved or clock
                outcomes.append(member.made + made if member.made else made)
            else:
                outcomes.append(_Continued(made, rest, moved))
            changes += made
            outgoing += [item for derive in self._outboxes for item in derive(made, engine)]
        return outcomes, changes, outgoing, clock

    def _refused_midway(self, group: list[Member], refused: RefusedMidway) -> None:
        """The member refused after it may have changed the engine fails alone. The engine may hold part of it, and
        of the members run before it: it is rebuilt from the store, off the event loop (``_rebuild_soon``), and the
        others wait in their order, ahead of those that came since, to run on the rebuilt engine. The refusal is
        answered once it is rebuilt: the client's next read finds the engine as before its command, not refused."""
        others = [member for member in group if member is not refused.member]
        self._grouped[:0] = others
        self._rebuild_soon(refused.refusal)

        def answer(_: object = None) -> None:
            _fail([refused.member], refused.refusal)

        if self._resetting is not None:
            self._resetting.add_done_callback(answer)
        else:
            answer()

    def _rebuilt_first(self) -> bool:
        """Whether the next group may run on the engine. Not while a failed commit's changes may be in it, the
        database having been out of reach when it was to be rebuilt: its rebuild starts now, in a thread, and
        starts the group once done. Not either while the database is still out of reach: the commands waiting are
        refused (Unavailable), and the next one to come tries again."""
        try:
            self._resettle()
        except Unavailable as refusal:
            if self._resetting is None:
                waiting, self._grouped = self._grouped, []
                _fail(waiting, refusal)
            return False
        return True

    def _first_part(self, member: Member, clock: Clock | None, engine: Engine) -> tuple[Parts, Clock | None]:
        """What a member runs in its first group, once its check passed (CoreError: refused, nothing changed), and
        the clock it leaves: a clock move goes from ``clock`` (the one the group's commands before it leave, or
        the current one) in parts; any other command is one part."""
        if member.move is not None:
            moved, to = member.move(clock or self.clock, engine, self.wall())
            engine.check_advance(to)
            return _advance_in_parts(to, self.changes_per_part), moved
        if member.check is not None:
            member.check(engine)
        if member.first is not None:
            return member.first, None
        command = member.command
        assert command is not None  # a member has a command, or a move that gives one
        return (lambda engine: (command(engine), None)), None

    def _landed(self) -> None:
        """The worker finished a transaction: answer its group (unless ``settle`` did), then start the next."""
        group = self._in_flight
        if group is not None and group.commit.done():
            self._finish(group)
        if self._in_flight is None and self._grouped:
            # At the loop's next turn, not now: the requests that came in meanwhile are read first (a command made
            # in parts would otherwise go from one part to the next without the loop answering anyone).
            asyncio.get_running_loop().call_soon(self._start_group)

    def settle(self) -> None:
        """Wait for the group commit under way, if any, and announce and answer it (or rebuild the engine, if it
        failed): the engine then holds only what was committed. Blocks the event loop for what is left of the
        transaction; the commands waiting for the next group stay queued."""
        group = self._in_flight
        if group is not None:
            self._finish(group)  # its commit's outcome is waited for there

    def after_landing(self, then: Callable[[], None]) -> bool:
        """``then()`` once the group commit under way has landed (announced and answered, or failed and the engine
        rebuilt), and True; False, with nothing done, when none is under way. A read that must see the engine and
        finds a transaction under way waits for it this way instead of holding the event loop (``settle``)."""
        if self._in_flight is None:
            return False
        self._landings.append((asyncio.get_running_loop(), then))
        return True

    def _finish(self, group: _Group) -> None:
        # Queued before landing, so that they run before the next group starts (the next part of a clock move is
        # queued while this one is answered): queued after it, they would find that one under way, and wait again.
        landings, self._landings = self._landings, []
        for loop, then in landings:
            loop.call_soon_threadsafe(then)
        self._land(group)

    def _land(self, group: _Group) -> None:
        failure = group.commit.exception()  # waits for the worker, if it is not done
        self._in_flight = None
        if failure is not None:
            error = failure if isinstance(failure, Exception) else Exception(repr(failure))
            self._rebuild_soon(error)
            _fail(group.members, Unavailable(str(error), error.retry_after) if isinstance(error, StoreError) else error)
            return
        self._engine.release()  # what the group ended is durable now: it may leave memory
        if group.clock is not None:
            self.clock = group.clock
        self._refresh_due()
        self.announce(group.changes)
        if group.delivers:
            self._deliveries_changed()
        self._answer(group.members, group.outcomes)

    def _answer(self, members: list[Member], outcomes: list[Outcome]) -> None:
        """Each member's outcome, committed: its answer, or (a part of it made) its next part queued. A command
        made in parts goes on even when its caller gave up: each part leaves a whole state, and so does the last."""
        for member, outcome in zip(members, outcomes):
            if isinstance(outcome, _Continued):
                member.made += outcome.made
                member.parts, member.clock = outcome.rest, outcome.clock
                self._requeue(member)
            elif member.future.done():  # its caller gave up (the connection closed)
                continue
            elif isinstance(outcome, CoreError):
                member.future.set_exception(outcome)
            else:
                member.future.set_result(outcome)

    # Clock moves: each committed with the clock it leaves, the deadlines it passes fired in the same transaction.
    # The ``*_soon`` forms go through the group commit (surfaces on the event loop); the others commit at once, as
    # ``perform`` does (callers with no loop).
    def advance_clock(self, delta: timedelta) -> list[Change]:
        return self._move_now(_by(delta))

    def set_clock(self, moment: datetime) -> list[Change]:
        return self._move_now(_to(moment))

    def configure_clock(self, mode: str, speed: float) -> list[Change]:
        """Pause (manual) or run (real, at ``speed``) the clock from the simulated time it shows now; committed."""
        self.catch_up()
        return self._move_now(_reconfigured(mode, speed))

    def step_clock(self) -> list[Change]:
        """Manual clocks: jump to the next deadline (or stay, when nothing is pending)."""
        return self._move_now(_to_next_deadline)

    def advance_clock_soon(self, delta: timedelta) -> asyncio.Future[list[Change]]:
        return self._enqueue(None, None, _by(delta))

    def set_clock_soon(self, moment: datetime) -> asyncio.Future[list[Change]]:
        return self._enqueue(None, None, _to(moment))

    def configure_clock_soon(self, mode: str, speed: float) -> asyncio.Future[list[Change]]:
        return self._enqueue(None, None, _reconfigured(mode, speed))

    def step_clock_soon(self) -> asyncio.Future[list[Change]]:
        return self._enqueue(None, None, _to_next_deadline)

    def _move_now(self, move: ClockMove) -> list[Change]:
        clock, to = move(self.clock, self.settled_engine(), self.wall())
        return self._run(_advance(to), clock, _check_advance(to))

    def reset(self) -> None:
        """Back to the server's start, as a new database with the same fleet and seed would be: the clock at its start
        time (same mode and speed), no events, waves, deliveries or journal, every incarnation back to 1. Committed
        before the engine is rebuilt from the store, as ``open`` builds it. A clock move under way in parts ends
        there, refused: the rest of it would take the new start's clock to where the old one was going.

        In the calling thread: for callers with no event loop. A server resets with ``reset_soon``."""
        self.role.admit("reset")
        self.settle()
        self._refuse_moves_under_way()
        self._install_reset(*self._reset_store())

    async def reset_soon(self) -> None:
        """As ``reset``, with the database's reset and the engine's rebuild (O(fleet): 0.45 s at a million VMs) in a
        thread. Meanwhile the event loop answers reads from the engine as it was (the reset is not answered before
        the new one is installed), and commands and due deadlines wait: no group starts and nothing is caught up."""
        self.role.admit("reset")
        if self._resetting is not None:
            await asyncio.shield(self._resetting)  # one reset at a time; this one starts from the other's end
            return await self.reset_soon()
        loop = asyncio.get_running_loop()
        self._resetting = loop.create_future()
        try:
            await self._group_landed()  # the group under way lands first; no other starts
            self._refuse_moves_under_way()
            with self.engine_building():
                clock, engine = await asyncio.to_thread(self._reset_store)
                self._install_reset(clock, engine)
        finally:
            resetting, self._resetting = self._resetting, None
            resetting.set_result(None)
            if self._grouped:
                loop.call_soon(self._start_group)

    @property
    def resetting(self) -> asyncio.Future[None] | None:
        """The reset under way (``reset_soon``), or the rebuild after a failed group commit (``_rebuild_soon``), done
        once its engine is installed; None: none is. Nothing falls due until then (``catch_up`` does nothing)."""
        return self._resetting

    async def _group_landed(self) -> None:
        """Once the group commit under way, if any, has landed: waited for without holding the loop (``settle``)."""
        while self._in_flight is not None:
            landed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.after_landing(functools.partial(_resolve, landed))
            await landed

    def _refuse_moves_under_way(self) -> None:
        """Clock moves and commands under way in parts fail: the reset undid the parts committed so far."""
        under_way = [member for member in self._grouped if member.parts is not None]
        self._grouped = [member for member in self._grouped if member.parts is None]
        for member in under_way:
            what = "clock move" if member.move is not None else "command"
            _fail([member], Conflict(f"the server was reset while this {what} was under way; what it did is undone"))

    def _reset_store(self) -> tuple[Clock, Engine]:
        """The database reset, and the engine built from it (not installed)."""
        with self._lock:
            try:
                self.store.ready()
                deployed = self.store.deployed_at()
                clock = Clock.start(self.clock.mode, self.clock.speed, self.wall(), deployed)
                self.store.reset(clock, deployed)
                state = _stored(self.store)
            except StoreError as error:
                raise Unavailable(str(error), error.retry_after) from error
            return clock, self.engine_from(state, self._engine.rules, self._engine.fleet)

    def _install_reset(self, clock: Clock, engine: Engine) -> None:
        with self._lock:
            self._install(engine)
            self.clock = clock
            self._unsettled = None
            self._refresh_due()
        self.tell([Reset("reset to the start")])
        self._deliveries_changed()

    def clock_view(self) -> ClockView:
        return ClockView(self.clock.mode, self.clock.speed, self.now(), self.settled_engine().next_deadline())


def _advance(to: datetime) -> Command:
    return lambda engine: engine.advance(to)


def _check_advance(to: datetime) -> Check:
    return lambda engine: engine.check_advance(to)


def _advance_in_parts(to: datetime, budget: int | None) -> Parts:
    def part(engine: Engine) -> tuple[list[Change], Parts | None]:
        changes, done = engine.advance_some(to, budget)
        return changes, None if done else part

    return part


# Machines a command made in parts takes a part (``sliced``): 2 to 4 ms of the event loop's time each (a Compute
# Engine or EC2 event costs 10 to 15 µs to make, a check of one 2 to 4 µs). Counted, not timed, as CHANGES_PER_PART.
MACHINES_PER_PART = 250


def sliced(names: Sequence[str]) -> list[Sequence[str]]:
    """``names`` in slices of ``MACHINES_PER_PART``, in order."""
    return [names[at : at + MACHINES_PER_PART] for at in range(0, len(names), MACHINES_PER_PART)]


def nth_slice(names: Sequence[str], index: int) -> Sequence[str]:
    """The ``index``-th of ``sliced(names)`` (empty past the last): for a part whose names are known only once the
    parts before it have run."""
    return names[index * MACHINES_PER_PART : (index + 1) * MACHINES_PER_PART]


class CheckingPart:
    """A part that reads the engine and changes nothing, before its command's first change: refused, it fails its
    command alone, with nothing to undo, as a command's check does (any other part's refusal costs a rebuild)."""

    def __init__(self, check: Callable[[Engine], None], rest: Parts | None):
        self.check = check
        self.rest = rest

    def __call__(self, engine: Engine) -> tuple[list[Change], Parts | None]:
        self.check(engine)
        return [], self.rest


def checked_then_made(checks: Sequence[Callable[[Engine], None]], makes: Sequence[Command]) -> Parts:
    """A command in parts (``perform_in_parts_soon``): each of ``checks`` a part of its own (``CheckingPart``),
    then each of ``makes``."""
    rest: Parts | None = None
    for make in reversed(makes):
        rest = _made_then(make, rest)
    for check in reversed(checks):
        rest = CheckingPart(check, rest)
    assert rest is not None, "a command in parts has at least one part"
    return rest


def _made_then(make: Command, rest: Parts | None) -> Parts:
    return lambda engine: (make(engine), rest)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _fail(group: list[Member], error: BaseException) -> None:
    for member in group:
        if not member.future.done():
            member.future.set_exception(error)
