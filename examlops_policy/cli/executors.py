"""``exa hardware discover|submit|manifest``: the executor commands (Slurm, Kubernetes, local)."""

from __future__ import annotations

import argparse


def register(hardware: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    """Add the executor subcommands to ``exa hardware``."""
