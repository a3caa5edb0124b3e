"""Converters between AtlasRun results directories and other harnesses' files."""
