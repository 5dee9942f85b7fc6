"""The one exception type for user mistakes: the CLI prints its message as a single line."""


class LasError(Exception):
    """Bad input, bad configuration or a missing file: reported without a traceback."""
