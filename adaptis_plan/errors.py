"""One user-facing error hierarchy, turned into a one-line message and an exit code by the CLI.

Library code raises these; it never prints. Message = the offending value, the violated
constraint, the fix. Imports nothing from the package.
"""

from __future__ import annotations


class AdaptisError(Exception):
    """Base class. `exit_code` is what `adaptis` exits with."""

    exit_code = 1


class InputError(AdaptisError):
    """Bad input: a file, field or value the user can fix (exit 2).

    Build the message as: "<where>: <field> = <value>: <what is wrong>; <fix>".
    """

    exit_code = 2


class InfeasibleError(AdaptisError):
    """No plan fits (exit 3): say which device runs out of memory by how much and what to change."""

    exit_code = 3


class DeadlockError(InputError):
    """A plan's orders can never finish. `grid` is the device x step text grid with the stuck steps marked."""

    def __init__(self, message: str, grid: str = "") -> None:
        super().__init__(message)
        self.grid = grid


def located(e: InputError, path: object) -> InputError:
    """The same error, its message prefixed with the file it concerns; a device grid is kept."""
    err = type(e)(f"{path}: {e}")
    err.grid = getattr(e, "grid", "")  # type: ignore[attr-defined]
    return err
