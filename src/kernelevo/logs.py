"""Diagnostics through `logging`: every module logs under the "kernelevo" logger.

As a library KernelEvo only emits records (a NullHandler keeps Python from
printing them unasked); the command line attaches a handler and picks the
level from --verbose and --quiet.
"""

from __future__ import annotations

import logging
import sys

ROOT_LOGGER = "kernelevo"
# Records at or above WARNING are shown by default; --verbose shows all,
# --quiet only errors.
DEFAULT_LEVEL, VERBOSE_LEVEL, QUIET_LEVEL = logging.WARNING, logging.DEBUG, logging.ERROR

logging.getLogger(ROOT_LOGGER).addHandler(logging.NullHandler())


def get_logger(name: str) -> logging.Logger:
    """The logger of a module: `get_logger(__name__)` gives kernelevo.<module>."""
    return logging.getLogger(name if name.startswith(ROOT_LOGGER) else
                             f"{ROOT_LOGGER}.{name}")


def level_for(verbose: bool, quiet: bool) -> int:
    if verbose and quiet:
        from kernelevo.errors import ConfigError

        raise ConfigError("--verbose and --quiet contradict each other: give one of them")
    return VERBOSE_LEVEL if verbose else QUIET_LEVEL if quiet else DEFAULT_LEVEL


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of each record.

    A handler bound to the stream of its creation keeps writing to it after
    a caller (a test runner, a notebook) has replaced and closed it.
    """

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure(level: int) -> logging.Logger:
    """Send kernelevo's records to stderr at `level`; calling again only changes the level."""
    logger = logging.getLogger(ROOT_LOGGER)
    logger.setLevel(level)
    if not any(getattr(h, "_kernelevo_cli", False) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s",
                                               datefmt="%H:%M:%S"))
        handler._kernelevo_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    # The CLI shows its records once, not again through a handler on the root logger.
    logger.propagate = False
    return logger
