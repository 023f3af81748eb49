"""The one error type sub-commands raise: a one-line message and its exit code."""

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INPUT_UNREADABLE = 3
EXIT_NOT_A_TRACE = 4
EXIT_NO_STARTUP = 5
EXIT_WOULD_OVERWRITE = 6


class CliError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(" ".join(str(message).split()))  # always one line
        self.exit_code = exit_code
