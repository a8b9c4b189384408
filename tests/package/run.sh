#!/usr/bin/env bash
# make package-test: builds the .deb and .rpm, inspects them, installs the .deb into a staging
# root (dpkg-deb -x; the maintainer scripts are checked, not run: they would create a user and
# folders on this machine), runs `hangar doctor` and a real `hangar serve` from the installed
# layout with the official SDK creating a browser, and builds the example plugins from the
# installed hangar-dev alone: hello, loaded from an extra plugin folder, and page-archive,
# installed with `cmake --install` into the staged host's own plugin folder and etc/plugins.d,
# which archives a real page in a real browser.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD_DIR:-$repo/build}"
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }
step() { echo "package-test: $*"; }

step "building packages"
rm -rf "$build/packages"
(cd "$build" && cpack -G "DEB;RPM" >/dev/null) || fail "cpack"
deb=$(ls "$build"/packages/hangar_*.deb); devdeb=$(ls "$build"/packages/hangar-dev_*.deb)
rpm=$(ls "$build"/packages/hangar-[0-9]*.rpm); devrpm=$(ls "$build"/packages/hangar-devel-*.rpm)

step "inspecting $(basename "$deb")"
contents=$(dpkg-deb -c "$deb")
for f in ./usr/bin/hangar ./usr/lib/hangar/plugins/browsers.so ./usr/lib/hangar/plugins/computer.so \
         ./usr/lib/hangar/plugins/browsers.openapi.json \
         ./etc/hangar/hangar.ini ./etc/hangar/plugins.d/browsers.ini ./usr/lib/systemd/system/hangar.service \
         ./usr/share/hangar/playwright-executor/executor.mjs ./usr/share/hangar/bidi-mapper/mapper.mjs \
         ./usr/share/hangar/bidi-mapper/node_modules/chromium-bidi/package.json; do
  grep -q " $f\$" <<<"$contents" || fail "$f missing from the .deb"
done
info=$(dpkg-deb -I "$deb")
for dep in chromium xvfb bubblewrap ffmpeg x11vnc libpoco; do grep -q "Depends:.*$dep" <<<"$info" || fail "no $dep dependency"; done
conffiles=$(dpkg-deb -I "$deb" conffiles)
grep -qx /etc/hangar/hangar.ini <<<"$conffiles" || fail "hangar.ini is not a conffile"
grep -qx /etc/hangar/plugins.d/browsers.ini <<<"$conffiles" || fail "plugins.d/*.ini are not conffiles"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Instances run as the unprivileged sandbox user, who must reach the staged binary and plugins.
chmod 755 "$tmp"
dpkg-deb -e "$deb" "$tmp/control"
for s in postinst prerm postrm; do sh -n "$tmp/control/$s" || fail "$s has a syntax error"; done
grep -q 'adduser --system' "$tmp/control/postinst" || fail "postinst does not create the user"
grep -q 'purge' "$tmp/control/postrm" || fail "postrm must delete state only on purge"
! grep -B2 'rm -rf /var/lib/hangar' "$tmp/control/postrm" | grep -q '"remove"' || fail "remove deletes state"
grep -q 'User=hangar' <(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/systemd/system/hangar.service) || fail "unit not run as hangar"
dev=$(dpkg-deb -c "$devdeb")
for f in ./usr/include/hangar/plugin.h ./usr/include/hangar/plugin.hpp ./usr/lib/cmake/Hangar/HangarConfig.cmake \
         ./usr/lib/pkgconfig/hangar-plugin.pc ./usr/share/doc/hangar-dev/examples/hello/hello.cpp \
         ./usr/include/hangar/process.hpp ./usr/share/doc/hangar-dev/examples/page-archive/page_archive.cpp \
         ./usr/share/doc/hangar-dev/examples/page-archive/page-archive.ini; do
  grep -q " $f\$" <<<"$dev" || fail "$f missing from hangar-dev"
done

step "inspecting $(basename "$rpm")"
# Whole outputs first: grep -q would close the pipe early and pipefail would call that a failure.
files=$(rpm -qlp "$rpm" 2>/dev/null); config=$(rpm -qcp "$rpm" 2>/dev/null)
requires=$(rpm -qp --requires "$rpm" 2>/dev/null); scripts=$(rpm -qp --scripts "$rpm" 2>/dev/null)
grep -qx /usr/bin/hangar <<<"$files" || fail "rpm lacks /usr/bin/hangar"
grep -qx /usr/lib/hangar/plugins/browsers.so <<<"$files" || fail "rpm lacks the plugins"
grep -qx /etc/hangar/hangar.ini <<<"$config" || fail "rpm: hangar.ini is not %config"
grep -qx /etc/hangar/plugins.d/browsers.ini <<<"$config" || fail "rpm: plugins.d/*.ini are not %config"
grep -q '^chromium' <<<"$requires" || fail "rpm: no chromium requirement"
grep -q 'libPocoFoundation' <<<"$requires" || fail "rpm: no Poco library requirement"
grep -q 'useradd -r' <<<"$scripts" || fail "rpm: %pre does not create the user"
grep -q '/usr/include/hangar/plugin.hpp' <<<"$(rpm -qlp "$devrpm" 2>/dev/null)" || fail "hangar-devel lacks the headers"

step "exercising the maintainer scripts in a throwaway root"
stub="$tmp/stub"; mkdir -p "$stub"
printf '#!/bin/sh\necho "adduser $*" >> /tmp/calls; touch /tmp/user-exists\n' > "$stub/adduser"
printf '#!/bin/sh\necho "deluser $*" >> /tmp/calls\n' > "$stub/deluser"
printf '#!/bin/sh\n[ -e /tmp/user-exists ]\n' > "$stub/getent"
printf '#!/bin/sh\necho "systemctl $*" >> /tmp/calls\n' > "$stub/systemctl"
chmod 755 "$stub"/*
bwrap --bind / / --dev /dev --proc /proc --tmpfs /tmp --tmpfs /var/lib --tmpfs /etc/chromium --tmpfs /run \
  --ro-bind "$tmp/control" /control --ro-bind "$stub" /stub --setenv PATH "/stub:/usr/sbin:/usr/bin:/sbin:/bin" \
  sh -euc '
    sh /control/postinst configure
    grep -q "adduser --system --group" /tmp/calls
    [ "$(stat -c %U:%a /var/lib/hangar)" = hangar:750 ]
    [ -d /etc/chromium/policies/managed ]
    touch /var/lib/hangar/hangar.db
    sh /control/prerm remove
    sh /control/postrm remove
    [ -e /var/lib/hangar/hangar.db ]        # remove keeps state
    sh /control/postrm purge
    [ ! -e /var/lib/hangar ]                 # purge deletes it
    grep -q "deluser --system hangar" /tmp/calls' || fail "maintainer scripts"

step "installing into a staging root"
root="$tmp/root"
dpkg-deb -x "$deb" "$root"; dpkg-deb -x "$devdeb" "$root"
"$root/usr/bin/hangar" version | grep -q "plugin ABI v1" || fail "installed binary does not run"

step "hangar doctor from the installed layout"
HANGAR_DATA_DIR="$tmp/data" "$root/usr/bin/hangar" doctor > "$tmp/doctor.txt" || { cat "$tmp/doctor.txt"; fail "doctor"; }
grep -q "config $root/etc/hangar/hangar.ini" "$tmp/doctor.txt" || fail "doctor did not find the installed config"
HANGAR_PLUGIN_DIR=/nonexistent "$root/usr/bin/hangar" doctor --config=/dev/null > "$tmp/doctor-bad.txt" 2>&1 && fail "doctor passed without plugins enabled"
grep -q "no plugin is enabled" "$tmp/doctor-bad.txt" || fail "doctor did not say what is wrong"

step "the unit's ExecStopPost, hangar park, from the installed layout"
unit=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/systemd/system/hangar.service)
grep -qx 'ExecStopPost=/usr/bin/hangar park' <<<"$unit" || fail "the unit does not park instances after a stop"
# This data dir's last start (doctor's) recorded no layout that needs a park: nothing to do.
HANGAR_DATA_DIR="$tmp/data" "$root/usr/bin/hangar" park || fail "hangar park where nothing needs parking"

step "building the example plugin from the installed hangar-dev alone"
cp -r "$root/usr/share/doc/hangar-dev/examples/hello" "$tmp/hello-src"
cmake -S "$tmp/hello-src" -B "$tmp/hello-build" -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_BUILD_TYPE=Release >/dev/null \
  || fail "configuring the example against the installed SDK"
grep -q "Hangar_DIR:PATH=$root/usr/lib/cmake/Hangar" "$tmp/hello-build/CMakeCache.txt" || fail "find_package(Hangar) did not find the installed SDK"
cmake --build "$tmp/hello-build" >/dev/null || fail "building the example"
mkdir -p "$tmp/extra" && cp "$tmp/hello-build/hello.so" "$tmp/extra/"

step "building page-archive from the installed hangar-dev alone and installing it into the staged host"
cp -r "$root/usr/share/doc/hangar-dev/examples/page-archive" "$tmp/pa-src"
cmake -S "$tmp/pa-src" -B "$tmp/pa-build" -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_BUILD_TYPE=Release >/dev/null \
  || fail "configuring page-archive against the installed SDK"
cmake --build "$tmp/pa-build" >/dev/null || fail "building page-archive"
cmake --install "$tmp/pa-build" >/dev/null || fail "installing page-archive"
[[ -f "$root/usr/lib/hangar/plugins/page-archive.so" ]] || fail "page-archive.so is not in the installed plugin folder"
grep -qx "enabled = true" "$root/etc/hangar/plugins.d/page-archive.ini" || fail "page-archive.ini is not in etc/plugins.d"

step "serving from the installed layout; the SDK creates a browser; the installed host loads the examples; page-archive archives a page"
cd "$repo/tests/e2e"
HANGAR_BIN="$root/usr/bin/hangar" STAGED_PLUGINS="$tmp/extra" node "$repo/tests/package/serve-check.mjs" || fail "serve check"
step "all checks passed"
