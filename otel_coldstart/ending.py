"""When a start-up ends if ``ready()`` never comes: at exit, on SIGTERM, and what a forked
child forgets.

Every ending goes through one method, ``Startup.finish(reason)`` (startup.py), which plans
and then carries out what follows; ``ready()`` and ``uninstrument()`` reach it through the
controller. This module decides when the other endings reach it, and keeps them safe for
the host:

- **Exit.** An ``atexit`` handler ends the start-up with its real reason: ``exit`` (a normal
  exit or ``sys.exit``) or ``exception`` (an uncaught exception, ``KeyboardInterrupt``
  included, with its type), and exports within ``export_timeout_s``. The exit status stays
  Python's own: an uncaught ``KeyboardInterrupt`` still dies of SIGINT (130 in a shell),
  also when a thread of ours was importing a module then (:data:`SOURCE_EVALS`).
- **SIGTERM.** Nothing runs in a signal handler but a non-blocking ``os.write``: ending a
  start-up takes the recorder's and the SDK's locks, which the interrupted thread may hold
  (ending it in the handler could hang the process for ever). Instead a watcher thread
  ends and exports the start-up. It is woken by ``signal.set_wakeup_fd``, which CPython's
  C-level handler writes to at once, so it runs even while the main thread sits in a long
  C call (a Python-level handler only runs between two bytecodes: a 3000x3000 SVD would
  hold it for seconds). If the host already has a wakeup fd (an asyncio loop), or replaces
  ours later, the Python-level handler writes to the watcher's pipe instead. After at most
  ``export_timeout_s`` the watcher restores the default disposition at C level and sends
  SIGTERM again: the process dies of SIGTERM (-15), as it would have without us.
  Only a process whose SIGTERM disposition is the default gets the watcher; a host handler
  installed before ``instrument()`` is left alone, one installed after it wins (the watcher
  then stands aside). ``ready()`` and ``uninstrument()`` give the host back exactly its
  disposition and wakeup fd.
- **Fork.** A forked child drops the parent's start-up without ending or exporting it, and
  the parent's SIGTERM watcher (the thread does not survive the fork; the pipe and the
  handler would): see ``SigtermWatcher.forget_in_child`` and the controller's at-fork hook.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import (
    _fork_warning,  # noqa: F401  (3.12+: our threads never make a host's fork warn)
    semconv,
)
from ._bounded import exit_has_begun, in_background
from ._errors import internal_errors, report_internal_error

# --- exit ----------------------------------------------------------------------------------

_atexit_registered = False


def register_exit(on_exit: Callable[[str, str | None], None]) -> None:
    """Call ``on_exit(reason, exception_type)`` once when the interpreter exits."""
    global _atexit_registered
    if not _atexit_registered:
        _atexit_registered = True
        atexit.register(_at_exit, on_exit)


def uncaught_exception() -> BaseException | None:
    """The exception that ended the main program, if one did. The interpreter prints it and
    keeps it in ``sys.last_value`` (``sys.last_exc`` on 3.12+) before ``atexit`` handlers run;
    ``SystemExit`` is not kept there (it is a normal exit).

    Any C code that calls ``PyErr_Print`` while the program goes on sets the same attributes:
    torch prints a warning turned into an error that way (``Tensor.pin_memory``'s
    DeprecationWarning under ``-W error``), and the process later exits 0. What tells them
    apart is where the exception went: one that ended the program unwound every frame of it, so
    its traceback begins at an outermost frame (the main module's, or runpy's for ``-m``) that
    nothing called; one printed from C carries no traceback, or one that begins in a frame
    called by a running caller."""
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if not isinstance(error, BaseException) or isinstance(error, SystemExit):
        return None
    traceback = error.__traceback__
    if traceback is None or traceback.tb_frame.f_back is not None:
        return None
    return error


def exit_reason() -> tuple[str, str | None]:
    """(end reason, exception type) of an exit happening now."""
    error = uncaught_exception()
    if error is not None:
        return semconv.END_EXCEPTION, type(error).__name__
    return semconv.END_EXIT, None


def _at_exit(on_exit: Callable[[str, str | None], None]) -> None:
    if SIGTERM.fired.is_set():
        # The watcher is ending the start-up and will kill the process with SIGTERM: let it,
        # so that the exit status stays -15.
        SIGTERM.wait_until_killed()
    keyboard_interrupt = _KeyboardInterruptFlag.read()
    exit_has_begun()  # the exit's export runs here and on threads of ours that exist (_bounded.py)
    try:
        reason, exception_type = exit_reason()
        on_exit(reason, exception_type)
    except Exception:
        report_internal_error("at exit")
    finally:
        # Exporting may import protobuf's C extension for the first time, and any code run
        # through PyRun_* clears CPython's "unhandled KeyboardInterrupt" flag: the process
        # would exit 1 instead of dying of SIGINT. Put the flag back as we found it, once
        # our other threads can no longer clear it again (SOURCE_EVALS).
        if keyboard_interrupt:
            SOURCE_EVALS.close(SOURCE_EVALS_WAIT_S)
        _KeyboardInterruptFlag.restore(keyboard_interrupt)


class _SourceEvals:
    """Work of our background threads that evaluates generated source, so clears CPython's
    "unhandled KeyboardInterrupt" flag whatever thread runs it: any ``eval``/``exec`` of a
    string does (``PyRun_StringFlags``), and so does making a namedtuple, a ``NamedTuple``
    class or a dataclass, and so importing a module that makes one. The in-flight monitor
    imports such modules lazily (the time-to-ready history, the metrics SDK). Run through
    :meth:`run`, that work cannot straddle ``_at_exit``: at a KeyboardInterrupt exit,
    :meth:`close` waits for what is under way (bounded) and refuses what comes after, and
    only then is the flag put back. Seen without it: a forked child that got SIGINT right
    after a fast load exited 1, its monitor importing the history's module meanwhile."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.closed = False

    def run(self, work: Callable[[], object]) -> bool:
        """``work()`` now, unless the process is exiting on a KeyboardInterrupt (False)."""
        with self._lock:
            if self.closed:
                return False
            work()
            return True

    def close(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for work under way; refuse any after."""
        acquired = self._lock.acquire(timeout=timeout_s)
        self.closed = True
        if acquired:
            self._lock.release()

    def reopen(self) -> None:
        """In a forked child: the parent's exit is not the child's (a held lock is dropped)."""
        self._lock = threading.Lock()
        self.closed = False


SOURCE_EVALS = _SourceEvals()
SOURCE_EVALS_WAIT_S = 1.0  # the history module's import takes ~3-11 ms; the metrics SDK's ~100 ms


class _KeyboardInterruptFlag:
    """CPython's ``_Py_UnhandledKeyboardInterrupt``: set when ``KeyboardInterrupt`` ended the
    main module; ``Py_RunMain`` then re-raises SIGINT after finalisation (exit status 130
    in a shell). Reachable through ctypes where the symbol is exported (3.10, 3.11); where
    it is not, an uncaught ``KeyboardInterrupt`` re-raises SIGINT itself after our export."""

    @staticmethod
    def _variable():
        try:
            import ctypes

            return ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt")
        except (ImportError, ValueError, AttributeError, OSError):
            return None

    @classmethod
    def read(cls) -> bool | None:
        variable = cls._variable()
        if variable is not None and variable.value:
            return True
        # The flag can be cleared before our handler runs, by a thread of ours evaluating
        # source between the main module's KeyboardInterrupt and the atexit handlers (seen in
        # the ending matrix under load: exit 1 instead of death by SIGINT). The exception the
        # top level printed says the same and nothing clears it: CPython sets the flag for
        # exactly KeyboardInterrupt, not a subclass. Not in the REPL, where sys.last_value is
        # the last line's error and the session did not end on it.
        if type(uncaught_exception()) is KeyboardInterrupt and not hasattr(sys, "ps1"):
            return True
        return False if variable is not None else None

    @classmethod
    def restore(cls, was_set: bool | None) -> None:
        if not was_set:
            return
        variable = cls._variable()
        if variable is not None:
            variable.value = 1
            return
        # No flag to restore: die of SIGINT now, as Py_RunMain would after finalising.
        try:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except Exception:  # inside the SIGINT ending: the exit goes on with Python's own status
            pass


# --- SIGTERM ----------------------------------------------------------------------------------

_STOP = b"\x00"  # no signal has number 0: tells the watcher to stop


class SigtermWatcher:
    """Ends and exports the start-up on SIGTERM from a thread, never from the handler."""

    def __init__(self) -> None:
        self.fired = threading.Event()  # SIGTERM seen: the start-up is being ended, then we die
        self._installed = False
        self._previous_handler: Any = None  # what signal.signal() returned: a handler, an int or None
        self._wakeup_ours = False
        self._read_fd = -1
        self._write_fd = -1
        self._thread: threading.Thread | None = None
        self._on_sigterm: Callable[[], None] | None = None
        self._deadline_s = 5.0
        self._setsig = None  # PyOS_setsig, bound at install: the watcher must not import

    @property
    def installed(self) -> bool:
        return self._installed

    def install(self, on_sigterm: Callable[[], None], deadline_s: float) -> bool:
        """Watch for SIGTERM if the host left its disposition at the default. Main thread
        only (signal.signal's rule). True if the watcher is in place."""
        self._on_sigterm = on_sigterm
        self._deadline_s = max(0.0, float(deadline_s))
        if self._installed:
            return True
        if sys.platform == "win32" or not hasattr(signal, "SIGTERM") or not hasattr(signal, "set_wakeup_fd"):
            return False
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return False  # the host's own handler (or SIG_IGN): never replaced
            self._setsig = _bind_setsig()
            read_fd, write_fd = os.pipe()
        except (OSError, ValueError):
            return False
        try:
            os.set_blocking(write_fd, False)  # set_wakeup_fd's rule; a full pipe drops the byte
            self._read_fd, self._write_fd = read_fd, write_fd
            self._previous_handler = signal.signal(signal.SIGTERM, self._handler)
        except (OSError, ValueError):
            self._close_fds(read_fd, write_fd)
            return False
        try:
            host_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
            if host_fd != -1:  # an asyncio loop's: keep it; our handler wakes us instead
                signal.set_wakeup_fd(host_fd)
            else:
                self._wakeup_ours = True
        except (OSError, ValueError):
            pass
        self._installed = True
        self.fired.clear()
        self._thread = threading.Thread(target=self._watch, args=(read_fd, write_fd),
                                        name="otel-coldstart-sigterm", daemon=True)
        self._thread.start()
        return True

    def _give_back_disposition(self, where: str) -> None:
        """The host's SIGTERM handler and wakeup fd back, where ours are still in place: a
        handler or wakeup fd someone installed since (asyncio's) stays theirs."""
        try:
            if signal.getsignal(signal.SIGTERM) == self._handler:
                signal.signal(signal.SIGTERM, self._previous_handler)
            if self._wakeup_ours:
                current = signal.set_wakeup_fd(-1)
                if current != self._write_fd:
                    signal.set_wakeup_fd(current)
        except (OSError, ValueError):
            report_internal_error(where)

    def release(self) -> None:
        """Give the host back its SIGTERM disposition and wakeup fd, if nobody replaced ours
        since, and stop the watcher. From another thread than the main one, nothing can be
        restored (signal.signal's rule): the watcher stays, and a SIGTERM still ends the
        process at once after exporting."""
        if not self._installed or threading.current_thread() is not threading.main_thread():
            return
        self._give_back_disposition("release SIGTERM")
        self._installed = False
        self._wakeup_ours = False
        write_fd, self._read_fd, self._write_fd = self._write_fd, -1, -1
        try:
            os.write(write_fd, _STOP)  # the watcher closes both ends as it leaves
        except OSError:
            pass
        self._thread = None

    def forget_in_child(self) -> None:
        """In a forked child: the watcher thread did not survive the fork; the pipe (shared
        with the parent, whose watcher would read the child's signals) and our handler did.
        Put the child's disposition and wakeup fd back and close the inherited pipe."""
        if not self._installed:
            return
        self._give_back_disposition("SIGTERM after fork")
        self._close_fds(self._read_fd, self._write_fd)
        self._read_fd = self._write_fd = -1
        self._installed = False
        self._wakeup_ours = False
        self._thread = None
        self.fired.clear()

    def wait_until_killed(self) -> None:
        """Block the exiting main thread while the watcher ends, exports, and kills us."""
        time.sleep(self._deadline_s + 1.0)

    # --- inside the signal handler: one non-blocking write, nothing else ------------------

    def _handler(self, signum, frame) -> None:
        """Runs in the main thread between two bytecodes, maybe inside one of our (or the
        SDK's) critical sections: it must not take a lock, so it only wakes the watcher (in
        case the wakeup fd is not ours) and returns."""
        write_fd = self._write_fd
        if write_fd < 0:
            # Released, and yet called: someone saved our handler and put it back later.
            # Act as the default disposition would.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        try:
            os.write(write_fd, bytes((signal.SIGTERM,)))
        except OSError:
            pass

    @staticmethod
    def _close_fds(*fds: int) -> None:
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass

    # --- the watcher thread ---------------------------------------------------------------

    def _watch(self, read_fd: int, write_fd: int) -> None:
        sigterm = bytes((signal.SIGTERM,))
        try:
            while True:
                try:
                    data = os.read(read_fd, 512)
                except InterruptedError:
                    continue
                except OSError:
                    return
                if not data or _STOP in data:
                    return
                # Bytes for other signals (SIGINT...) come through the wakeup fd too: ignored.
                # A SIGTERM the host has a handler for now is the host's to handle.
                if sigterm in data and signal.getsignal(signal.SIGTERM) == self._handler:
                    self._end_then_die()
                    return
        finally:
            if not self.fired.is_set():
                self._close_fds(read_fd, write_fd)

    def _end_then_die(self) -> None:
        self.fired.set()
        on_sigterm = self._on_sigterm
        if on_sigterm is not None:
            # On its own thread: whatever it waits on (a lock the main thread holds, an
            # exporter), the process still dies by the deadline.
            worker = in_background(on_sigterm, name="otel-coldstart-sigterm-export")
            worker.join(self._deadline_s)
        _die_of_sigterm(self._setsig)


def _bind_setsig():
    """``PyOS_setsig``: sets a C-level disposition from any thread (signal.signal is for
    the main thread only). None if ctypes cannot reach it."""
    try:
        import ctypes

        setsig = ctypes.pythonapi.PyOS_setsig
        setsig.argtypes = (ctypes.c_int, ctypes.c_void_p)
        setsig.restype = ctypes.c_void_p
        return setsig
    except Exception:  # no ctypes or no such symbol: the caller exits with the status instead
        return None


def _die_of_sigterm(setsig) -> None:
    """Die of SIGTERM as the host would have: default disposition, then the signal again."""
    try:
        if setsig is not None:
            setsig(signal.SIGTERM, None)  # SIG_DFL is the null handler
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # delivery is immediate; this is only a guard
    except Exception:  # dying of SIGTERM from a handler: _exit below ends it either way
        pass
    os._exit(128 + signal.SIGTERM)  # the shell's spelling of "killed by SIGTERM"


SIGTERM = SigtermWatcher()


# --- fork --------------------------------------------------------------------------------------

def _after_fork_in_child() -> None:
    """The SIGTERM watcher let go; the parent's exit is not the child's. (The controller's
    own at-fork hook drops the start-up.)"""
    with internal_errors("after fork"):
        SIGTERM.forget_in_child()
    SOURCE_EVALS.reopen()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
