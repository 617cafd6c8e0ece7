"""Tuners and cost models: rank the legal candidates of a schedule space."""
