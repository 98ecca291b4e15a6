#!/usr/bin/env bash
# Generates the Python stubs from the service's protos into ./agentrunner (grpcio-tools
# bundles protoc and the google/protobuf well-known types).
set -euo pipefail
cd "$(dirname "$0")"
python -m grpc_tools.protoc -I ../../proto \
  --python_out=. --grpc_python_out=. \
  ../../proto/agentrunner/v1/*.proto
