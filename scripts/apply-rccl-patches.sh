#!/usr/bin/env bash
# Applies rust-gin's RCCL patch series (patches/series) to an RCCL git checkout:
#
#   scripts/apply-rccl-patches.sh <rccl-checkout>
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

[[ $# -eq 1 ]] || die "usage: $0 <rccl-checkout>   (a rocm-systems checkout, or one whose root is projects/rccl)"
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

echo "apply-rccl-patches: checkout $top"
echo "apply-rccl-patches: layout   $layout"
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
trap 'rm -f "$am_log" "$check_index"' EXIT
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
