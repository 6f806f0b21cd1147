"""The model zoo: PyTorch-exported ONNX models checked against onnxruntime (and benchmarked by bench/executor.py)."""
