"""The guard a handler runs under (processes.py starts it as a script: it imports only the standard library).

``python -I guard.py BATTERY_PID REPORT_FD COMMAND...``: the guard leads a session of its own (the battery starts it
so) and runs COMMAND as its child in that session, so that a signal to the group reaches the guard, the handler and
whatever the handler started (a shell's background jobs, an agent's workers). It stays as their parent for two
reasons:

- A battery killed outright (SIGKILL, a CI job's hard timeout) cannot stop its handlers. The guard asks Linux for a
  signal it can catch when the battery ends (prctl PR_SET_PDEATHSIG), and then kills its whole group: the handler and
  its children. The signal a handler is given by exec'ing would kill the handler alone, and leave its children.
- The guard adopts the group's orphans (PR_SET_CHILD_SUBREAPER), so it knows when the last process of the handler's
  ends; it exits only then, so the battery, which waits for the guard, stops the whole group, not only the handler.

The handler's own exit status (a Popen return code: the status, or minus the signal that ended it) is written to
REPORT_FD the moment the handler ends, and the guard exits with the same status. A command that cannot run exits
127, as a shell's does, and its log says why. A signal to the group (the battery's SIGTERM, a case's ``kill``) is
the handler's: the guard, which gets it too, goes on waiting for its group."""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
BATTERY_ENDED = signal.SIGHUP
CANNOT_RUN = 127
# Every signal whose default would end the guard, other than SIGKILL: the guard catches them while it waits
CAUGHT = sorted(
    set(signal.valid_signals())
    - {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGCONT, signal.SIGURG, signal.SIGWINCH}
    - {signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}
)


def main(battery: int, report: int, command: list[str]) -> int:
    ask_linux()
    if os.getppid() != battery:  # the battery ended before the guard asked to be told
        return 0
    os.set_inheritable(report, False)
    signal.pthread_sigmask(signal.SIG_BLOCK, CAUGHT)  # until each side has its own handling
    handler = os.fork()
    if handler == 0:
        run(command)
    for number in CAUGHT:
        signal.signal(number, lambda number, frame: end_all_if_battery_ended(battery))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, CAUGHT)
    status = wait_for_group(handler, report)
    become(status)
    return 128 - status if status < 0 else status


def ask_linux() -> None:
    """A signal when the battery's thread that started the guard ends; the group's orphans as the guard's children."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl(PR_SET_PDEATHSIG, BATTERY_ENDED)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except (OSError, AttributeError):  # not Linux: the battery's own stopping still ends the group
        pass


def run(command: list[str]) -> None:
    """In the forked child: the handler, with the signals as its command would find them."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, CAUGHT)
    try:
        os.execvp(command[0], command)
    except OSError as error:
        print(f"cannot run {command[0]}: {error}", file=sys.stderr, flush=True)
    os._exit(CANNOT_RUN)


def end_all_if_battery_ended(battery: int) -> None:
    """Any signal the guard catches: the battery's end (the group's own signals leave the battery its parent)."""
    if os.getppid() != battery:
        os.killpg(0, signal.SIGKILL)


def wait_for_group(handler: int, report: int) -> int:
    """The handler's exit status, reported when it comes; returns when the guard has no child left."""
    status = CANNOT_RUN
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            return status
        if pid == handler:
            status = os.waitstatus_to_exitcode(wait_status)
            os.write(report, f"{status}\n".encode())
            os.close(report)


def become(status: int) -> None:
    """Ends the guard as its handler ended: by the same signal, when a signal ended it (no core file)."""
    if status < 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]))
