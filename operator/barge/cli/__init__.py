"""The `barge` command line (typer): the top layer, free to import every other layer."""
