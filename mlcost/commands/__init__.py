"""One module per group of `mlcost` subcommands, each with register(commands)."""
