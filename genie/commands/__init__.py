"""Command modules of the ``genie`` CLI; each defines ``register(subparsers)``."""
