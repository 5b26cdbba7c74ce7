"""The package version (read statically by setup.cfg)."""

__version__ = "0.1.0"
