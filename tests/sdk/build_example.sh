#!/usr/bin/env bash
# Builds the SDK example plugins (sdk/examples/hello, sdk/examples/page-archive), the wrong-ABI
# test plugin (tests/sdk/wrong_abi) and the plugin built from the frozen ABI v1 header
# (tests/sdk/abi_v1) the way a third party would: out of tree, from a copy of their sources
# outside this repository, given nothing of Hangar but the SDK headers
# (-DHANGAR_SDK_INCLUDE_DIR=<repo>/sdk/include, or the frozen tests/sdk/abi_v1/include).
#
#   tests/sdk/build_example.sh [OUT_DIR]      (default: <repo>/build/sdk-example)
#
# Leaves OUT_DIR/<name>/<name>.so for each, which the end-to-end tests load into a real server
# (HANGAR_PLUGIN_DIR + HANGAR_PLUGINS_ENABLE).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:-$repo/build/sdk-example}"
sdk_include="$repo/sdk/include"
jobs="${HANGAR_JOBS:-2}"

work="$(mktemp -d "${TMPDIR:-/tmp}/hangar-sdk-example.XXXXXX")"
trap 'rm -rf "$work"' EXIT

fail() { echo "build_example: FAIL: $*" >&2; exit 1; }

build_one() { # name source_dir [sdk_include_dir]
    local name="$1" src="$2" sdk_include="${3:-$sdk_include}"
    cp -r "$src" "$work/$name-src"
    rm -rf "$work/$name-src/build"
    echo "build_example: configuring $name (sources copied to $work/$name-src)"
    cmake -S "$work/$name-src" -B "$work/$name-build" \
        -DHANGAR_SDK_INCLUDE_DIR="$sdk_include" \
        -DCMAKE_DISABLE_FIND_PACKAGE_Hangar=ON \
        >"$work/$name-configure.log" 2>&1 || { cat "$work/$name-configure.log" >&2; fail "configure $name"; }
    cmake --build "$work/$name-build" -j"$jobs" >"$work/$name-build.log" 2>&1 \
        || { cat "$work/$name-build.log" >&2; fail "build $name"; }
    local so="$work/$name-build/$name.so"
    [[ -f "$so" ]] || fail "$name.so was not produced"

    # The only thing of this repository the build may have seen is the SDK include folder.
    local leaks
    leaks="$(grep -rhoa "$repo[[:alnum:]/._+-]*" "$work/$name-build" 2>/dev/null | sort -u | grep -av "^$sdk_include\(/\|$\)" || true)"
    [[ -z "$leaks" ]] || fail "$name's build refers to source-tree paths other than sdk/include: $leaks"

    # Exactly one entry point, and nothing left undefined but libc/libstdc++/libgcc.
    nm -D --defined-only "$so" | grep -q ' T hangar_plugin_init$' || fail "$name.so does not export hangar_plugin_init"
    local exported
    exported="$(nm -D --defined-only "$so" | awk '$2 == "T" { print $3 }')"
    [[ "$exported" == "hangar_plugin_init" ]] || fail "$name.so exports more functions than hangar_plugin_init: $exported"

    mkdir -p "$out/$name"
    cp "$so" "$out/$name/$name.so"
    echo "build_example: $name ok -> $out/$name/$name.so"
}

build_one hello "$repo/sdk/examples/hello"
build_one page-archive "$repo/sdk/examples/page-archive"
build_one wrong_abi "$repo/tests/sdk/wrong_abi"
build_one abi_v1 "$repo/tests/sdk/abi_v1/plugin" "$repo/tests/sdk/abi_v1/include"
echo "build_example: 4 passed, 0 failed"
