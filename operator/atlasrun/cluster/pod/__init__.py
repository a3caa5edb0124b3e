"""The pod: ``atlas run-task`` runs a Job's work items with the local engine against its sidecars.

Imports ``wire``, never ``operator`` (import-linter contract in pyproject.toml).
"""
