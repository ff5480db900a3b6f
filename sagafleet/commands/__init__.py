"""The subcommands; each module contributes a ``register(subparsers)`` function, and
:data:`sagafleet.cli.COMMANDS` names the module of every subcommand so that only the chosen
one is imported."""
