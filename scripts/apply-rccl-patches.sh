#!/usr/bin/env bash
# Applies rust-gin's RCCL patch series (patches/series) to an RCCL git checkout:
#
#   scripts/apply-rccl-patches.sh [--gin-type N] <rccl-checkout>
#
# --gin-type N: rust-gin's GIN type number (default 8, the contract). The series
# writes it once, as RUST_GIN_TYPE in src/include/nccl_device/net_device.h
# (patch 0001); this option writes N there instead, for a tree whose own
# numbering already took 8. RCCL's build reads it from that header and passes it
# to rust-gin's crate as RUST_GIN_TYPE (cmake/RustGin.cmake), so the host
# reports the same number; select the backend with NCCL_GIN_TYPE=N.
# docs/configuration.md ("Build-time knobs").
#
# <rccl-checkout> is a rocm-systems checkout (the series' paths are
# projects/rccl/...) or a checkout whose root is projects/rccl; the layout is
# detected and `git am -p3` is used for the latter. The checkout's tracked files
# must be clean. The series is applied with `git am --3way`, one commit per
# patch.
#
# Before applying it says whether HEAD is the pinned rocm-systems commit and,
# file by file, whether the files the series touches are the ones it was written
# against (their blob ids are in the patches' index lines). If a patch does not
# apply, it reports which hunks of that patch and of the ones after it drifted
# (`git apply --check -v`), runs `git am --abort` so the checkout is left as it
# was, and exits 1. Exit 2: usage or an unusable checkout.
set -euo pipefail

PIN=66e4315fa6f05511f37860f8ceebfa26805fbca1
# Files whose pre-image in the series is not the pinned file (patches/README.md).
NOT_PINNED=("projects/rccl/install.sh" "projects/rccl/test/host/CMakeLists.txt")

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
patch_dir="$here/patches"

die() { echo "apply-rccl-patches: $*" >&2; exit 2; }

usage="usage: $0 [--gin-type N] <rccl-checkout>   (a rocm-systems checkout, or one whose root is projects/rccl)"
# The contract's number (shared/reference/contracts.md); 0001 writes it once.
DEFAULT_GIN_TYPE=8
gin_type=$DEFAULT_GIN_TYPE
while [[ $# -gt 1 ]]; do
  case "$1" in
    --gin-type) [[ $# -ge 3 ]] || die "$usage"; gin_type="$2"; shift 2 ;;
    --gin-type=*) gin_type="${1#--gin-type=}"; shift ;;
    *) die "$usage" ;;
  esac
done
[[ $# -eq 1 ]] || die "$usage"
# A GIN type (0 means "any", 1 is the unpack net device) and a bit of RCCL's
# 32-bit unsigned device backend mask (patch 0001 checks the same at compile time).
[[ "$gin_type" =~ ^[0-9]+$ ]] && ((10#$gin_type >= 2 && 10#$gin_type <= 31)) ||
  die "--gin-type $gin_type: must be a number from 2 to 31 (a GIN type and a bit of RCCL's 32-bit device backend mask)"
gin_type=$((10#$gin_type))
[[ -d "$1" ]] || die "$1 is not a folder"
git -C "$1" rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
  die "$1 is not a git checkout; the series is applied with git am (clone RCCL with git)"
top=$(git -C "$1" rev-parse --show-toplevel)

if [[ -f "$top/projects/rccl/src/include/nccl_device/core.h" ]]; then
  strip=1
  prefix=""
  layout="rocm-systems (paths projects/rccl/...)"
elif [[ -f "$top/src/include/nccl_device/core.h" ]]; then
  strip=3
  prefix="projects/rccl/"
  layout="RCCL at the repository root (git am -p3)"
else
  die "$top has neither projects/rccl/src/include/nccl_device/core.h nor src/include/nccl_device/core.h"
fi

series=()
while IFS= read -r line; do
  line="${line%%#*}"
  line="${line//[[:space:]]/}"
  [[ -n "$line" ]] && series+=("$patch_dir/$line")
done <"$patch_dir/series"
[[ ${#series[@]} -gt 0 ]] || die "$patch_dir/series names no patches"
for p in "${series[@]}"; do [[ -f "$p" ]] || die "missing patch $p"; done

if [[ -d "$(git -C "$top" rev-parse --git-path rebase-apply)" ]]; then
  die "$top has a git am or rebase in progress; finish or abort it first"
fi
if ! git -C "$top" diff --quiet || ! git -C "$top" diff --cached --quiet; then
  die "$top has uncommitted changes to tracked files; commit or stash them first"
fi

# Repository path of a series path (projects/rccl/x -> x for -p3 checkouts).
repo_path() {
  local p="$1"
  if [[ -n "$prefix" ]]; then echo "${p#"$prefix"}"; else echo "$p"; fi
}

# The enumerators of `} <name>;` in <file> whose value is <n>, as "NAME = n"
# lines: the enum's body is read back from its closing line to its opening brace.
enum_users() {
  awk -v name="$2" -v n="$3" '
    { body[NR] = $0 }
    $0 ~ "^[[:space:]]*}[[:space:]]*" name "[[:space:]]*;" {
      for (i = NR - 1; i > 0 && body[i] !~ /[{]/; i--) {
        line = body[i]; sub(/\/\/.*/, "", line)
        if (match(line, /[A-Za-z_][A-Za-z0-9_]*[[:space:]]*=[[:space:]]*[0-9]+/)) {
          e = substr(line, RSTART, RLENGTH); split(e, kv, "=")
          gsub(/[[:space:]]/, "", kv[1]); gsub(/[[:space:]]/, "", kv[2])
          if (kv[1] != "NCCL_GIN_MAX_TYPES" && kv[2] + 0 == n + 0) print kv[1] " = " kv[2]
        }
      }
    }' "$1"
}
# Every value the two enums use, for the suggestion of a free number.
enum_values() {
  awk -v name="$2" '
    { body[NR] = $0 }
    $0 ~ "^[[:space:]]*}[[:space:]]*" name "[[:space:]]*;" {
      for (i = NR - 1; i > 0 && body[i] !~ /[{]/; i--) {
        line = body[i]; sub(/\/\/.*/, "", line)
        if (line ~ /NCCL_GIN_MAX_TYPES/) continue
        if (match(line, /=[[:space:]]*[0-9]+/)) { v = substr(line, RSTART + 1, RLENGTH - 1); gsub(/[[:space:]]/, "", v); print v }
      }
    }' "$1"
}
core_h="$top/$(repo_path projects/rccl/src/include/nccl_device/core.h)"
net_h="${core_h%/core.h}/net_device.h"
[[ -f "$net_h" ]] || die "$net_h is missing (the series adds rust-gin's number to ncclNetDeviceType there)"
if grep -q "NCCL_GIN_TYPE_RUST\|RUST_GIN_TYPE" "$core_h" "$net_h"; then
  echo "apply-rccl-patches: $top already has rust-gin's GIN type (NCCL_GIN_TYPE_RUST or RUST_GIN_TYPE):" >&2
  echo "apply-rccl-patches: the series is applied already. Start from a checkout without it." >&2
  exit 3
fi
users=$( { enum_users "$core_h" ncclGinType_t "$gin_type" | sed "s|\$| (ncclGinType_t, ${core_h#"$top"/})|"
           enum_users "$net_h" ncclNetDeviceType "$gin_type" | sed "s|\$| (ncclNetDeviceType, ${net_h#"$top"/})|"; } )
if [[ -n "$users" ]]; then
  used=" $(
    { enum_values "$core_h" ncclGinType_t; enum_values "$net_h" ncclNetDeviceType; } | sort -un | tr '\n' ' '
  )"
  # Above every number in use: below it RCCL's numbering is dense.
  free=""
  for ((n = 31; n >= 2; n--)); do
    [[ "$used" == *" $n "* ]] && break
    free=$n
  done
  {
    echo "apply-rccl-patches: REFUSED: this RCCL already uses GIN type $gin_type for another backend:"
    echo "$users" | sed 's/^/apply-rccl-patches:     /'
    echo "apply-rccl-patches: rust-gin needs a number of its own (RCCL appends its new GIN types, and 8 is"
    echo "apply-rccl-patches: where it appends next). Nothing was changed. What to do:"
    echo "apply-rccl-patches:   1. apply with a free number, e.g. the first one above those this tree uses:"
    echo "apply-rccl-patches:        $0 --gin-type ${free:-N} $1"
    echo "apply-rccl-patches:      (0001 writes it as RUST_GIN_TYPE in net_device.h; RCCL's build passes it"
    echo "apply-rccl-patches:      to rust-gin's crate, so the backend reports the same number);"
    echo "apply-rccl-patches:   2. select rust-gin with NCCL_GIN_TYPE=${free:-N} instead of $gin_type;"
    echo "apply-rccl-patches:   3. if 0001's hunks no longer apply around ncclGinType_t, rebase the series onto"
    echo "apply-rccl-patches:      this tree (patches/README.md); its compile-time checks will hold the number."
  } >&2
  exit 3
fi
if [[ "$gin_type" != "$DEFAULT_GIN_TYPE" ]]; then
  # The series with N written where 0001 defines the number, and nowhere else.
  custom=$(mktemp -d)
  trap 'rm -rf "$custom"' EXIT
  for p in "${series[@]}"; do cp "$p" "$custom/"; done
  first="$custom/$(basename "${series[0]}")"
  hits=$(grep -c "^+#define RUST_GIN_TYPE $DEFAULT_GIN_TYPE\$" "$first" || true)
  [[ "$hits" == 1 ]] || die "$(basename "$first") does not define RUST_GIN_TYPE $DEFAULT_GIN_TYPE exactly once; cannot write --gin-type"
  sed -i "s/^+#define RUST_GIN_TYPE $DEFAULT_GIN_TYPE\$/+#define RUST_GIN_TYPE $gin_type/" "$first"
  for i in "${!series[@]}"; do series[$i]="$custom/$(basename "${series[$i]}")"; done
fi

echo "apply-rccl-patches: checkout $top"
echo "apply-rccl-patches: layout   $layout"
echo "apply-rccl-patches: GIN type $gin_type$([[ "$gin_type" == "$DEFAULT_GIN_TYPE" ]] && echo " (the default)" || echo " (--gin-type; not the contract's $DEFAULT_GIN_TYPE)")"
head_sha=$(git -C "$top" rev-parse HEAD)
if [[ "$head_sha" == "$PIN" ]]; then
  echo "apply-rccl-patches: HEAD is the pinned rocm-systems commit $PIN"
else
  echo "WARNING: ************************************************************************"
  echo "WARNING: HEAD is $head_sha,"
  echo "WARNING: NOT the pinned rocm-systems commit $PIN."
  echo "WARNING: The series was written against the pinned commit; hunks may drift."
  echo "WARNING: ************************************************************************"
fi

# Pre-image check: the first patch that touches a file names the blob it expects.
declare -A expected=()
declare -a order=()
for p in "${series[@]}"; do
  file=""
  while IFS= read -r line; do
    case "$line" in
      "diff --git a/"*)
        file="${line#diff --git a/}"
        file="${file%% b/*}"
        ;;
      "index "*)
        blob="${line#index }"
        blob="${blob%%..*}"
        if [[ -n "$file" && -z "${expected[$file]+x}" ]]; then
          expected[$file]="$blob"
          order+=("$file")
        fi
        ;;
    esac
  done <"$p"
done
for file in "${order[@]}"; do
  blob="${expected[$file]}"
  path=$(repo_path "$file")
  note=""
  for np in "${NOT_PINNED[@]}"; do [[ "$np" == "$file" ]] && note=" (the series' copy was not the pinned file)"; done
  if [[ "$blob" =~ ^0+$ ]]; then
    if [[ -e "$top/$path" ]]; then
      echo "apply-rccl-patches:   $path: the series creates it, but it exists already"
    else
      echo "apply-rccl-patches:   $path: new file"
    fi
  elif [[ ! -e "$top/$path" ]]; then
    echo "apply-rccl-patches:   $path: MISSING$note"
  else
    have=$(git -C "$top" rev-parse "HEAD:$path" 2>/dev/null || echo none)
    if [[ "$have" == "$blob"* ]]; then
      echo "apply-rccl-patches:   $path: as written against"
    else
      echo "apply-rccl-patches:   $path: DIFFERS from what the series was written against$note"
    fi
  fi
done

am=(git -C "$top")
if [[ -z "$(git -C "$top" config user.email || true)" ]]; then
  am+=(-c user.name="rust-gin apply-rccl-patches" -c user.email="rust-gin@invalid")
fi

am_log=$(mktemp)
check_index=$(mktemp -u)
trap 'rm -f "$am_log" "$check_index"; [[ -z "${custom:-}" ]] || rm -rf "$custom"' EXIT
if "${am[@]}" am --3way -p"$strip" "${series[@]}" >"$am_log" 2>&1; then
  cat "$am_log"
  echo "apply-rccl-patches: applied ${#series[@]} patches; HEAD is now $(git -C "$top" rev-parse --short HEAD)"
  exit 0
fi

cat "$am_log"
echo
echo "apply-rccl-patches: FAILED. What drifted, patch by patch (git apply --check -v, without"
echo "apply-rccl-patches: 3-way merge; a hunk listed here may still merge where its blobs exist):"
# The patches before the failing one are committed; check it and those after it
# against that commit, in a scratch index, so the failed 3-way state is left alone.
applied=$(git -C "$top" rev-list --count "$head_sha"..HEAD)
GIT_INDEX_FILE="$check_index" git -C "$top" read-tree HEAD
for ((i = applied; i < ${#series[@]}; i++)); do
  p="${series[$i]}"
  if [[ $i -gt $applied ]]; then
    echo "--- $(basename "$p") (checked without $(basename "${series[$applied]}"), which failed)"
  else
    echo "--- $(basename "$p")"
  fi
  if out=$(GIT_INDEX_FILE="$check_index" git -C "$top" apply --cached --check -v -p"$strip" "$p" 2>&1); then
    echo "    applies cleanly"
  else
    echo "$out" | sed 's/^/    /'
  fi
done
git -C "$top" am --abort
if [[ "$(git -C "$top" rev-parse HEAD)" != "$head_sha" ]] || ! git -C "$top" diff --quiet; then
  echo "apply-rccl-patches: WARNING: git am --abort did not restore $head_sha cleanly" >&2
fi
echo "apply-rccl-patches: git am --abort done; $top is back at $(git -C "$top" rev-parse --short HEAD)"
exit 1
