# Shared by the scripts: the repository root, the release binary, and a
# check that it is static.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="${CARGO_TARGET_DIR:-$ROOT/target}/x86_64-unknown-linux-gnu/release/warden"

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "$(basename "$0"): needs root (namespaces, bind mounts, users); run it with sudo" >&2
    exit 1
  fi
}

build_release() {
  (cd "$ROOT" && cargo build --release --quiet)
  # A static PIE (which keeps address randomisation) reads "statically
  # linked"; a non-PIE static binary "not a dynamic executable".
  if ! ldd "$BIN" 2>&1 | grep -Eq "statically linked|not a dynamic executable"; then
    echo "warden is not static: $(ldd "$BIN" 2>&1 | head -3)" >&2
    exit 1
  fi
}
