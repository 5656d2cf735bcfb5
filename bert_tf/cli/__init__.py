"""The command line: flag groups (each flag and its default defined once) and the predict CLI."""
