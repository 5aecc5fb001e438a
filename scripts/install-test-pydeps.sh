#!/usr/bin/env bash
# Installs the Python packages the tests need that Debian does not ship,
# from PyPI, into build/pydeps (not the system's Python): an independent
# OTLP Profiles encoder (opentelemetry-proto, with the protobuf runtime it
# needs) for the OTLP interop test, grpcio as an independent gRPC client
# for the OTLP over gRPC test (test_otlp_grpc.py, bench/otlp_ingest_load.py),
# and numpy for the Python unwinder's test of native frames under Python
# ones, the MCP SDK (mcp) whose client drives test_mcp, and chdb (a current
# ClickHouse in-process) that checks the fleet store's SQL against the current
# dialect (tests/integration/test_clickhouse_schema.py). Idempotent: nothing happens
# when the pinned versions are already there.
. "$(dirname "$0")/install-test-lib.sh" # strict mode, in the repository root
target=build/pydeps
want="opentelemetry-proto==1.45.2 numpy==2.2.6 mcp==2.3.0 grpcio==1.85.1 chdb==4.4.0"
installed "$target" "$want" && exit 0
pip_target "$target" "$want"
mark_installed "$target" "$want"
