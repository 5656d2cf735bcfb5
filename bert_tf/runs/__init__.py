"""Runs: a task trained, evaluated, predicted and exported (the drivers the scripts call)."""
