#!/usr/bin/env bash
# Regenerates rtd/proto/*_pb2.py from the .proto files (needs grpcio-tools in .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m grpc_tools.protoc -I. --python_out=. rtd/proto/*.proto
