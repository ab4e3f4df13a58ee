"""The `arm-act` command line: one module per command, each exposing configure(parser) and
run(args) -> int; main.py dispatches."""
