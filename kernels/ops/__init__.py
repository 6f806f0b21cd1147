"""The op registry: every `op_*.py` module here is imported (eagerly) and registers its kernels."""
import importlib
import pkgutil

from .base import REQUIRED, Elementwise, Kernel, lookup, supported

for _module in pkgutil.iter_modules(__path__):
    if _module.name.startswith("op_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["REQUIRED", "Elementwise", "Kernel", "lookup", "supported"]
