#!/usr/bin/env bash
# Quick start, command 2: installs what is missing, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
command -v cargo >/dev/null || { echo "test: cargo not found: install Rust (rustup) first" >&2; exit 1; }
cargo test --locked "$@"
