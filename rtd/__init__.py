"""rtd: a secure, sandboxed model runtime daemon."""

__version__ = "0.1.0"
