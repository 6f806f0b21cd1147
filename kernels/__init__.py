"""rtd's executor: ONNX graphs compiled to NumPy (CPU) and CuPy (GPU) plans."""
from .model import CompiledModel, TensorSpec, compile_model

__all__ = ["CompiledModel", "TensorSpec", "compile_model"]
