"""`python -m adaptis_plan.cli ...`: the `adaptis` command."""

from adaptis_plan.cli import main

main()
