#!/usr/bin/env bash
# What Hangar's browser sandbox needs, measured on this machine: bubblewrap with the namespaces
# and mounts host/src/runtime.cpp uses, and pasta through /dev/net/tun, run with no capability
# and no_new_privs, then under each restriction a pod adds by default. packaging/helm/hangar/
# README.md ("Security context") has the results and what the chart does about each.
# Run as root (it drops to USER for the sandbox): packaging/helm/sandbox-probe/probe.sh [USER]
set -u
user=${1:-hangar}
uid=$(id -u "$user") && gid=$(id -g "$user") || { echo "no user $user" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "run as root: it drops to $user itself" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'reap_pasta; rm -rf "$work"' EXIT
chmod 755 "$work"

# The sandbox's shape (runtime.cpp sandbox_argv), without the server's own files.
cat >"$work/sandbox" <<'SH'
#!/bin/sh
exec bwrap --new-session --unshare-pid --unshare-ipc --unshare-uts --hostname hangar --unshare-user \
  --cap-drop ALL --unshare-net --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
  --symlink usr/bin /bin --symlink usr/sbin /sbin --proc /proc --dev /dev --tmpfs /tmp --remount-ro / \
  -- /bin/sh -c 'grep -q "^CapEff:.0000000000000000" /proc/self/status'
SH
chmod 755 "$work/sandbox"
as_user=(setpriv --reuid "$uid" --regid "$gid" --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs)
# pasta may stay behind its command under load: its pid file lets the probe end it (below).
mkdir "$work/run" && chown "$uid:$gid" "$work/run"
pasta_cmd=(timeout 20 pasta --foreground --quiet --ipv4-only --config-net --pid "$work/run/pasta.pid" -- true)
reap_pasta() {
    local pid
    for pid in $(pgrep -f -- "--pid $work/run/pasta.pid"); do kill "$pid" 2>/dev/null; done
}

deny_ns=""
if cc -o "$work/deny_ns" "$here/deny_ns.c" -lseccomp 2>/dev/null; then deny_ns="$work/deny_ns"; fi

pass=0 fail=0
# expect NAME works|fails COMMAND...: runs it, prints what happened and whether that was expected.
expect() {
    local name=$1 want=$2
    shift 2
    local out rc got
    # To a file, not a pipe: a process left behind must not hold the probe up.
    "$@" >"$work/out" 2>&1 </dev/null
    rc=$?
    reap_pasta
    out=$(cat "$work/out")
    got=$([ $rc -eq 0 ] && echo works || echo fails)
    if [ "$got" = "$want" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
    printf '%-4s %-62s %s%s\n' "$([ "$got" = "$want" ] && echo ok || echo FAIL)" "$name" "$got" \
        "$([ $rc -ne 0 ] && echo ": $(echo "$out" | grep -v -e syslog -e dmesg | tail -1)")"
}

expect "sandbox as $user, no capabilities, no_new_privs" works "${as_user[@]}" "$work/sandbox"
expect "sandbox as root with every capability dropped" fails \
    setpriv --inh-caps=-all --bounding-set=-all --no-new-privs "$work/sandbox"
expect "sandbox with /proc/sys read-only (runc readonlyPaths)" fails \
    unshare -m --propagation private sh -c 'mount -o bind,ro /proc/sys /proc/sys && exec "$@"' _ \
    "${as_user[@]}" "$work/sandbox"
expect "sandbox with /dev/null over /proc/timer_list (maskedPaths)" fails \
    unshare -m --propagation private sh -c 'mount --bind /dev/null /proc/timer_list && exec "$@"' _ \
    "${as_user[@]}" "$work/sandbox"
if [ -n "$deny_ns" ]; then
    expect "sandbox under the default profile's namespace/mount rules" fails \
        "${as_user[@]}" "$deny_ns" "$work/sandbox"
    expect "pasta under the same rules" fails "${as_user[@]}" "$deny_ns" "${pasta_cmd[@]}"
else
    echo "skip seccomp cases: no cc or libseccomp-dev"
fi
expect "pasta as $user, no capabilities" works "${as_user[@]}" "${pasta_cmd[@]}"
expect "pasta without /dev/net/tun" fails \
    unshare -m --propagation private sh -c 'mount -t tmpfs tmpfs /dev/net && exec "$@"' _ \
    "${as_user[@]}" "${pasta_cmd[@]}"
truncate -s 8M "$work/disk.img" && mkfs.ext4 -q -F "$work/disk.img" && mkdir "$work/mnt"
expect "loop mount (disk quota) as $user" fails "${as_user[@]}" mount -o loop,nosuid,nodev "$work/disk.img" "$work/mnt"
expect "loop mount as root without CAP_SYS_ADMIN" fails \
    setpriv --bounding-set=-sys_admin --inh-caps=-all mount -o loop,nosuid,nodev "$work/disk.img" "$work/mnt"
expect "loop mount as root with CAP_SYS_ADMIN" works sh -c "mount -o loop,nosuid,nodev '$work/disk.img' '$work/mnt' && umount '$work/mnt'"
expect "a cgroup folder made as $user" fails "${as_user[@]}" mkdir "$(awk '$3 ~ /cgroup/ {print $2; exit}' /proc/self/mounts)/hangar-probe-$$"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
