# Sourced by scripts/demo.sh and scripts/test.sh, whose first step is `require_rust NAME`: a Rust
# older than the crate's rust-version would otherwise fail only after the installs and minutes of
# compiling, and with a message about a dependency rather than about the toolchain.
# The version needed is read from Cargo.toml, so raising rust-version there is the only edit.

RUSTUP_ONE_LINER="curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh"

# True when dotted version $1 is older than $2 (missing parts count as 0: 1.92 = 1.92.0).
version_older() {
  local a b i
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  for i in 0 1 2; do
    if ((10#${a[i]:-0} < 10#${b[i]:-0})); then return 0; fi
    if ((10#${a[i]:-0} > 10#${b[i]:-0})); then return 1; fi
  done
  return 1
}

# require_rust NAME: returns 1, with what to do on stderr, when cargo is missing or rustc is older
# than Cargo.toml's rust-version. Run from the repository's root.
require_rust() {
  local who=$1 need found how
  need=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)
  if [ -z "$need" ]; then
    echo "$who: no rust-version in Cargo.toml" >&2
    return 1
  fi
  if ! command -v cargo >/dev/null; then
    echo "$who: cargo not found; vidcurate needs Rust $need or newer. Install it with rustup: $RUSTUP_ONE_LINER" >&2
    return 1
  fi
  # The rustc cargo will run: $RUSTC when set, else the one on PATH (rustup's proxy honours this
  # directory's toolchain overrides).
  found=$("${RUSTC:-rustc}" --version 2>/dev/null | awk '{print $2}') || true
  # A nightly or beta ("1.93.0-nightly") counts as its release, as cargo counts it.
  found=${found%%-*}
  if command -v rustup >/dev/null; then
    how="rustup update stable (and \`rustup default stable\` if an older toolchain is pinned)"
  else
    # Without rustup this is usually a distribution's package, which lags the releases.
    how="install a current Rust with rustup: $RUSTUP_ONE_LINER"
  fi
  if ! [[ $found =~ ^[0-9]+(\.[0-9]+)*$ ]]; then
    echo "$who: cannot tell the Rust version (\`${RUSTC:-rustc} --version\` gave no version); vidcurate needs $need or newer: $how" >&2
    return 1
  fi
  if version_older "$found" "$need"; then
    echo "$who: Rust $found found, vidcurate needs $need or newer (rust-version in Cargo.toml): $how" >&2
    return 1
  fi
}
