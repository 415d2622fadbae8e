"""`python -m barge.cli` runs the same command as the `barge` console script."""

from barge.cli.main import app

app()
