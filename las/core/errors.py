"""The one exception type for user mistakes: the CLI prints its message as a single line."""


class LasError(Exception):
    """Bad input, bad configuration or a missing file: reported without a traceback."""


def message_of(error: LasError) -> str:
    """The error's one line. One raised in a DataLoader worker comes back re-raised with the
    worker's traceback as its message: its own line is the traceback's last."""
    message = str(error)
    if "\nOriginal Traceback" in message:
        last = message.rstrip().splitlines()[-1]
        message = last.split("LasError: ", 1)[-1]
    return message
