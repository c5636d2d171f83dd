#!/usr/bin/env bash
# Holds the published library crates to semantic versioning against the previous release:
# `cargo semver-checks` compares their public API with the release's and fails on a breaking
# change the version numbers do not allow (before 1.0, one that keeps the minor version).
# A version must also have its entry in CHANGELOG.md, so a bump cannot come without one.
set -euo pipefail
cd "$(dirname "$0")/.."

# The previous release: its tag, or the commit the tag names, for a clone made without tags.
previous_release=v0.1.0
previous_release_commit=9e2dcbd
# Crates published at the previous release; a crate new since has nothing to compare with.
crates=(eventstore-api eventstore-memory eventstore-file eventstore-postgres eventstore-tck)

version=$(cargo pkgid --quiet --package eventstore-api | sed 's/.*[#@]//')
if ! grep -q "^## $version\b" CHANGELOG.md; then
  echo "CHANGELOG.md has no entry for version $version (a line starting with '## $version')" >&2
  exit 1
fi

if ! command -v cargo-semver-checks >/dev/null 2>&1; then
  echo "installing cargo-semver-checks"
  cargo install --locked --quiet cargo-semver-checks
fi

baseline=$(git rev-parse -q --verify "refs/tags/$previous_release^{commit}" \
  || git rev-parse -q --verify "$previous_release_commit^{commit}" || true)
if [ -z "$baseline" ] && [ "$(git rev-parse --is-shallow-repository)" = true ]; then
  git fetch --quiet --unshallow --tags || true
  baseline=$(git rev-parse -q --verify "$previous_release_commit^{commit}" || true)
fi
if [ -z "$baseline" ]; then
  echo "the previous release ($previous_release, $previous_release_commit) is not in this clone's history" >&2
  exit 1
fi

echo "comparing ${crates[*]} at $version with $previous_release ($baseline)"
cargo semver-checks check-release --baseline-rev "$baseline" "${crates[@]/#/--package=}"
