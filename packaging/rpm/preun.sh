# hangar %preun: stop the service on erase ($1 = 0), not on upgrade. State stays: RPM has no purge,
# so /var/lib/hangar is left for the operator to remove.
if [ "$1" = 0 ] && [ -d /run/systemd/system ]; then
    # A plain stop keeps sessions for the next start; an erase has none: SIGINT ends them first.
    systemctl kill --kill-who=main --signal=SIGINT hangar.service >/dev/null 2>&1 || true
    systemctl stop hangar.service >/dev/null 2>&1 || true
    systemctl disable hangar.service >/dev/null 2>&1 || true
fi
exit 0
