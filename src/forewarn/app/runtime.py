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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from forewarn.app.errors import Unavailable
from forewarn.core.changes import Change, Rebuilt, Reset, TimeMoved
from forewarn.core.clock import MANUAL, REAL, Clock
from forewarn.core.errors import CoreError
from forewarn.engine.engine import Engine
from forewarn.engine.rules import Rules
from forewarn.fleet.model import Fleet
from forewarn.store import JournalEntry, Outgoing, SQLStore, StoredState, StoreError, records_digest

log = logging.getLogger("forewarn.events")

Listener = Callable[[list[Change]], None]


def _repair_line(change: Change) -> str:
    return f"{change.subject()} repaired: {getattr(change, 'reason', change)}"


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
    stored = Fleet.from_records(state.fleet_records)
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
# A command waiting for its group commit: the command and its check, or the clock move that gives them.
Member = tuple[Command | None, "asyncio.Future[list[Change]]", Check | None, ClockMove | None]


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

    __slots__ = ("members", "outcomes", "changes", "clock", "delivers", "commit")

    def __init__(
        self,
        members: list[Member],
        outcomes: list[list[Change] | CoreError],
        changes: list[Change],
        clock: Clock | None,
        delivers: bool,
        commit: concurrent.futures.Future[None],
    ):
        self.members = members
        self.outcomes = outcomes
        self.changes = changes
        self.clock = clock  # the clock it commits, when one of its commands moved it
        self.delivers = delivers  # it writes deliveries to the outbox, or moves the clock
        self.commit = commit


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
        self._read_handlers: list[Callable[[list[str]], None]] = []
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
        # Why the engine may hold changes the database lacks (a failed commit it could not be rebuilt after); None:
        # it holds exactly what was committed.
        self._unsettled: Exception | None = None
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        self._due_wall = float("inf")
        self._refresh_due()

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
        self._engine = engine
        self.rules = engine.rules

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
            fleet or Fleet.from_records(state.fleet_records),
            state.seed,
            state.now,
            rules,
            created_at=state.created_at,
            stored=state.records,
            next_seq=state.next_seq,
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
            except Exception as error:
                # Whatever stopped the command, a refusal included, may have come after it changed part of the
                # engine: the engine is rebuilt from what was committed, so that nothing of it stays.
                self._rebuild(error)
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

    def _take(self, state: StoredState, cause: Exception) -> None:
        """The engine rebuilt from ``state``, what was derived from the old one dropped."""
        self._engine = self.engine_from(state, self._engine.rules, self._engine.fleet)
        self.clock = state.clock.within_bounds()[0]
        self._unsettled = None
        self._refresh_due()
        what = "refused" if isinstance(cause, CoreError) else "commit failed"
        self.tell([Rebuilt(f"{what}: {cause}")])
        self._deliveries_changed()

    def _resettle(self) -> None:
        """Nothing while the engine holds only what was committed. Otherwise (``_rebuild`` could not reach the
        database) rebuild it now, or raise Unavailable while the database is still out of reach."""
        cause = self._unsettled
        if cause is None:
            return
        with self._lock:
            if self._unsettled is None:
                return
            try:
                self.store.ready()
                state = _stored(self.store)
            except StoreError as error:
                raise Unavailable(
                    f"the engine may hold changes the database lacks and is reloaded once it is back: {error}",
                    error.retry_after,
                ) from error
            self._take(state, cause)
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

    def on_reads_relayed(self, handle: Callable[[list[str]], None]) -> None:
        """``handle(scopes)`` at the leader for the scopes whose machines read their metadata at a follower
        (``Role.relays_read``): the writes those reads make here."""
        self._read_handlers.append(handle)

    def reads_relayed(self, scopes: list[str]) -> None:
        """A follower's report of the scopes read there, each as if read here; refused where this process may not
        write."""
        self.role.admit("report")
        for handle in self._read_handlers:
            handle(scopes)

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

        Deadlines that fell due are applied and committed. Time that passes with nothing due needs no commit: a real
        clock's time is derived from its stored anchor, so the engine just follows it in memory.
        """
        if self.clock.mode == MANUAL:
            return []
        now = self.clock.now(self.wall())
        with self._lock:
            due = self.settled_engine().next_deadline()
            if due is None or now < due:
                if now > self.settled_engine().now:
                    self.settled_engine().advance(now)
                return []
        return self._run(lambda engine: engine.advance(max(now, engine.now)))

    def now(self) -> datetime:
        # Only a grouped clock move changes the engine's time (catch_up does too, before the group runs): only such a
        # group under way is waited for.
        if self._in_flight is not None and self._in_flight.clock is not None:
            self.settle()
        return max(self.clock.now(self.wall()), self._engine.now)

    # ------------------------------------------------------------------------------------------ commands
    def perform(self, command: Command, check: Check | None = None) -> list[Change]:
        """Run one engine command at the current time, committed before this returns; ``check`` first, if given.

        The transaction runs in the calling thread: only for callers with no event loop (start-up, tests, scripts)
        or code that must see the command durable before it goes on without awaiting (a metadata read that enables
        its scope). Surfaces on the event loop use ``perform_soon``, which commits off the loop."""
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

    def _enqueue(
        self, command: Command | None, check: Check | None, move: ClockMove | None
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
        self._grouped.append((command, future, check, move))
        if len(self._grouped) == 1 and self._in_flight is None:
            loop.call_soon(self._start_group)
        return future

    def _start_group(self) -> None:
        if self._in_flight is not None or not self._grouped:
            return  # the group under way starts this one when it lands
        group, self._grouped = self._grouped, []
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
            except Exception as error:  # a defect (or no worker, at exit): the engine may hold part of the group
                self._rebuild(error)
                _fail(group, error)
                return
            delivers = bool(outgoing) or clock is not None
            self._in_flight = _Group(group, outcomes, changes, clock, delivers, commit)
        loop = asyncio.get_running_loop()

        # The callback names no group: the future keeps its callbacks, and one that held the group would make a
        # cycle of every group (its changes, its futures) for the garbage collector to find.
        def landed(_: concurrent.futures.Future[None]) -> None:
            # The worker's: hand the outcome to the loop. A loop closed meanwhile (the server stopped) has no one
            # left to answer; the transaction finished or failed on its own.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._landed)

        commit.add_done_callback(landed)

    def _run_group(
        self, group: list[Member]
    ) -> tuple[list[list[Change] | CoreError], list[Change], list[Outgoing], Clock | None]:
        """Each command of ``group`` on the engine in turn: what each made or why it was refused, all their changes
        and deliveries, and the clock they leave when one moved it (None: unmoved). A command refused by its check
        fails alone. One refused only after it may have changed the engine has the engine rebuilt from the store,
        and the group runs again without it."""
        refused: dict[int, CoreError] = {}
        while True:
            engine = self._engine
            outcomes: list[list[Change] | CoreError] = []
            changes: list[Change] = []
            outgoing: list[Outgoing] = []
            clock: Clock | None = None
            for index, (command, _, check, move) in enumerate(group):
                moved: Clock | None = None
                try:
                    if index in refused:
                        raise refused[index]
                    if move is not None:
                        moved, to = move(clock or self.clock, engine, self.wall())
                        command, check = _advance(to), _check_advance(to)
                    if check is not None:
                        check(engine)
                except CoreError as refusal:
                    outcomes.append(refusal)
                    continue
                assert command is not None  # a member has a command, or a move that gives one
                try:
                    made = command(engine)
                except CoreError as refusal:
                    refused[index] = refusal
                    self._rebuild(refusal)
                    self.catch_up()  # the rebuilt engine is at the time last committed
                    break
                clock = moved or clock
                outcomes.append(made)
                changes += made
                outgoing += [item for derive in self._outboxes for item in derive(made, engine)]
            else:
                return outcomes, changes, outgoing, clock

    def _landed(self) -> None:
        """The worker finished a transaction: answer its group (unless ``settle`` did), then start the next."""
        group = self._in_flight
        if group is not None and group.commit.done():
            self._finish(group)
        if self._in_flight is None and self._grouped:
            self._start_group()

    def settle(self) -> None:
        """Wait for the group commit under way, if any, and announce and answer it (or rebuild the engine, if it
        failed): the engine then holds only what was committed. Blocks the event loop for what is left of the
        transaction; the commands waiting for the next group stay queued."""
        group = self._in_flight
        if group is not None:
            self._finish(group)  # its commit's outcome is waited for there

    def _finish(self, group: _Group) -> None:
        failure = group.commit.exception()  # waits for the worker, if it is not done
        self._in_flight = None
        if failure is not None:
            error = failure if isinstance(failure, Exception) else Exception(repr(failure))
            with self._lock:
                self._rebuild(error)
            _fail(group.members, Unavailable(str(error), error.retry_after) if isinstance(error, StoreError) else error)
            return
        if group.clock is not None:
            self.clock = group.clock
        self._refresh_due()
        self.announce(group.changes)
        if group.delivers:
            self._deliveries_changed()
        self._answer(group.members, group.outcomes)

    @staticmethod
    def _answer(members: list[Member], outcomes: list[list[Change] | CoreError]) -> None:
        for (_, future, _check, _move), outcome in zip(members, outcomes):
            if future.done():  # its caller gave up (the connection closed)
                continue
            if isinstance(outcome, CoreError):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

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
        before the engine is rebuilt from the store, as ``open`` builds it."""
        self.role.admit("reset")
        self.settle()
        with self._lock:
            try:
                self.store.ready()
                stored = _stored(self.store)
                clock = Clock.start(self.clock.mode, self.clock.speed, self.wall(), stored.created_at)
                self.store.reset(clock, stored.created_at)
                state = _stored(self.store)
            except StoreError as error:
                raise Unavailable(str(error), error.retry_after) from error
            self._install(self.engine_from(state, self._engine.rules, self._engine.fleet))
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


def _fail(group: list[Member], error: BaseException) -> None:
    for _, future, _check, _move in group:
        if not future.done():
            future.set_exception(error)
