"""The `sigmatrace` command line: one module per command, registered in main.py."""
