"""How the ``mmhvit`` command and the scripts under tools/ end: one line for a user's mistake, a
traceback for a bug.

A user's mistake is an exception the library raises on purpose with a message that says what is
wrong and what was expected (a missing path, a bad or hostile file, the wrong family): the script
prints ``error: <message>`` to stderr and exits with status 1. Anything else is a bug and keeps its
traceback; ``--debug`` (or ``MMHVIT_DEBUG=1``) shows the traceback of a user's mistake too.
"""
import argparse
import functools
import os
import pickle
import sys
from typing import Callable, List, Optional

# What the library raises for a user's mistake (FileExistsError: a tool that refuses to
# overwrite; pickle.UnpicklingError: a checkpoint that would run code).
USER_ERRORS = (ValueError, TypeError, KeyError, FileNotFoundError, FileExistsError,
               pickle.UnpicklingError)
DEBUG_FLAG = '--debug'


def add_debug_argument(parser: argparse.ArgumentParser) -> None:
    """Give a script's parser the ``--debug`` flag that :func:`reports_user_errors` reads."""
    parser.add_argument(DEBUG_FLAG, action='store_true',
                        help='on an error, show its full traceback instead of one line')


def error_line(error: BaseException) -> str:
    """``error: <first line of the message>`` (a KeyError's message without its quotes)."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return 'error: ' + (lines[0] if lines else type(error).__name__)


def reports_user_errors(main: Callable[[Optional[List[str]]], object]):
    """Decorate a script's ``main(argv=None)`` so that a user's mistake (:data:`USER_ERRORS`)
    ends it with one line on stderr and exit status 1 instead of a traceback."""

    @functools.wraps(main)
    def run(argv: Optional[List[str]] = None):
        try:
            return main(argv)
        except USER_ERRORS as error:
            args = sys.argv[1:] if argv is None else argv
            if DEBUG_FLAG in args or os.environ.get('MMHVIT_DEBUG'):
                raise
            print(error_line(error), file=sys.stderr)
            sys.exit(1)

    return run
