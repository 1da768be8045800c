#!/usr/bin/env bash
# Quick start, command 2: installs what is missing, then runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/rust_version.sh
. scripts/lib/rust_version.sh
require_rust test || exit 1
./scripts/setup.sh --system
# On a fresh clone the build is most of the set-up time, and the Python installs below mostly
# wait on downloads: build beside them. A build error is reported by `cargo test` itself.
mkdir -p target
cargo test --locked --no-run >target/test-build.log 2>&1 &
build=$!
trap 'kill "$build" 2>/dev/null || true' EXIT
./scripts/setup.sh
wait "$build" || echo "test: the early build failed (target/test-build.log); cargo test says why below" >&2
# The book: a page SUMMARY.md names but that is missing fails the build (create-missing = false);
# tests/book.rs checks its links, its generated reference and its runnable guide commands.
data/venv-tools/bin/mdbook build docs
cargo test --locked "$@"
