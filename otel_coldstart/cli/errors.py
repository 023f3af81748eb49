"""The one error type sub-commands raise: a one-line message and its exit code."""

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INPUT_UNREADABLE = 3
EXIT_NOT_A_TRACE = 4
EXIT_NO_STARTUP = 5
EXIT_WOULD_OVERWRITE = 6
EXIT_INPUT_TOO_LARGE = 7  # a single JSON document over --max-input-mb
EXIT_BUDGET_EXCEEDED = 8  # analyze --budget: a start-up went over budget
EXIT_SOURCE_UNAVAILABLE = 9  # --jaeger/--tempo: connection, timeout, HTTP error
EXIT_OUTPUT_FAILED = 10  # the report could not be written: stdout closed, disk full, I/O error
EXIT_PARTIAL_INPUT = 12  # a report was made, but a file or JSON line was left out (warned on stderr)
EXIT_STARTUP_KILLED = 11  # analyze: a start-up has no end (killed; rebuilt from its progress records)
EXIT_NOT_READY = 13  # analyze --require-ready: a start-up did not reach ready() (killed, SIGTERM, crashed, exited)


class CliError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(" ".join(str(message).split()))  # always one line
        self.exit_code = exit_code
