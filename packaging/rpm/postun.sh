# hangar %postun: restart on upgrade ($1 >= 1).
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
    if [ "$1" -ge 1 ]; then systemctl try-restart hangar.service >/dev/null 2>&1 || true; fi
fi
exit 0
