"""The `forge-rl` command line: thin glue over the services."""
