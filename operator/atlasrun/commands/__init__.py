"""Subcommands beyond ``run``/``validate``/``servers``: one module per command.

Each module defines ``register(subparsers)`` that adds its parser and sets
``func`` (taking the parsed args, returning an exit code). ``atlas`` discovers
the modules in this package.
"""
