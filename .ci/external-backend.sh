#!/usr/bin/env bash
# Builds and tests tests-external/minimal-backend, a backend outside the workspace, against
# eventstore-api and eventstore-tck as the registry would serve them: packaged by
# `cargo package`, unpacked, and patched in for the crates.io versions its manifest asks for.
# What the packages leave out, or a path that only resolves inside the workspace, fails here.
set -euo pipefail
cd "$(dirname "$0")/.."

root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
unpacked=$target/external-backend
backend=$root/tests-external/minimal-backend
# The kit depends on the runtime (`eventstore`), so that is packaged and patched in too.
crates=(eventstore-api eventstore eventstore-tck)

# No verification build: building the backend on the unpacked sources below is one.
# --allow-dirty: a local run checks the working tree as it is.
cargo package --quiet --no-verify --allow-dirty "${crates[@]/#/--package=}"

rm -rf "$unpacked"
mkdir -p "$unpacked"
patches=()
for name in "${crates[@]}"; do
  version=$(cargo pkgid --quiet --package "$name" | sed 's/.*[#@]//')
  tar -xzf "$target/package/$name-$version.crate" -C "$unpacked"
  patches+=(--config "patch.crates-io.$name.path=\"$unpacked/$name-$version\"")
done

# The workspace's lockfile pins the other dependencies at the versions the workspace is
# tested with, so nothing new is resolved or downloaded; cargo drops what is not needed.
cp Cargo.lock "$backend/Cargo.lock"
cd "$backend"

# Without the patch, a crate of the same name on crates.io would stand in unnoticed.
tree=$(cargo tree "${patches[@]}" --edges normal,dev --prefix none)
for name in "${crates[@]}"; do
  if ! grep -qF "($unpacked/$name-" <<<"$tree"; then
    echo "the backend does not build against the unpacked $name" >&2
    exit 1
  fi
done

cargo test "${patches[@]}"
