#!/usr/bin/env bash
# dist/SHA256SUMS over every artifact in dist/ (scripts/dist.sh, scripts/dist_node.sh).
set -euo pipefail
cd "${1:-dist}"
shopt -s nullglob
artifacts=(*.tar.gz *.whl *.tgz)
[ ${#artifacts[@]} -gt 0 ] || { : > SHA256SUMS; exit 0; }
sha256sum -- "${artifacts[@]}" > SHA256SUMS
