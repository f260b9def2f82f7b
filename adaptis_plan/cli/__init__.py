"""`adaptis` command line: thin click commands over the library.

Every command imports its heavy modules lazily so `adaptis --help` stays instant and never
imports torch or ortools. User errors (`AdaptisError`) are turned into one line on stderr
and an exit code in one place, `main()`. `--json` prints one JSON object on stdout and
nothing else there; human output goes to stderr through one rich console.

Modules: `commands` (the click group `cli`, every command, and `main`, the console entry point),
`streams` (the console, stdout / stderr writes and closed pipes), `tables` (the tables the
commands print) and `checks` (option values checked before a request is built). Run as
`adaptis ...` or `python -m adaptis_plan.cli ...`.
"""

from adaptis_plan.cli.commands import cli, main

__all__ = ["cli", "main"]
