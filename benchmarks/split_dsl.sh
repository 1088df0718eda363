#!/usr/bin/env bash
# The device tool carries at most 64 MiB a call, the working tree included, and the kit's DSL
# part (.device/dsl, one ~61 MiB archive from ../shared/device/kit) no longer fits beside this
# tree. This repacks it, here, into two archives that do: -a (the DSL's MLIR library, ~48 MiB
# packed) and -b (the rest, ~13 MiB). Then, on a fresh machine:
#   1. carry [".device/dsl/<name>-a.tar.xz", ".device/setup.sh"]: source .device/setup.sh
#   2. carry [".device/dsl/<name>-b.tar.xz", ".device/wheels", ".device/setup.sh"]: the work
# (setup.sh unpacks every .device/dsl/*.tar.xz it is given). The original moves to /tmp.
# Takes about three minutes (xz -9e).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
src=$(ls .device/dsl/*.tar.xz | grep -v -- '-[ab]\.tar\.xz$' | head -1)
[ -n "$src" ] || { echo "no unsplit archive in .device/dsl"; exit 1; }
name=$(basename "$src" .tar.xz)
tmp=$(mktemp -d)
tar -xJf "$src" -C "$tmp"
big=$(cd "$tmp" && find . -type f -name '_cutlass_ir*.so')
(cd "$tmp" && tar -cf - "$big" | xz -9e -T0 >"$OLDPWD/.device/dsl/$name-a.tar.xz")
(cd "$tmp" && find . -type f ! -path "$big" | tar -cf - -T - | xz -9e -T0 >"$OLDPWD/.device/dsl/$name-b.tar.xz")
mv "$src" /tmp/ && rm -rf "$tmp"
ls -l .device/dsl
