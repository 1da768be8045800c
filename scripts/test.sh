#!/usr/bin/env bash
# Quick start, command 2: installs what is missing, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
command -v cargo >/dev/null || { echo "test: cargo not found: install Rust (rustup) first" >&2; exit 1; }
# The book: a page SUMMARY.md names but that is missing fails the build (create-missing = false);
# tests/book.rs checks its links, its generated reference and its runnable guide commands.
data/venv-tools/bin/mdbook build docs
cargo test --locked "$@"
