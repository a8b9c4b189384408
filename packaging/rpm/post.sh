# hangar %post: state folder and Chromium's policy folder; the unit is known to systemd.
mkdir -p /var/lib/hangar /etc/chromium/policies/managed
chown hangar:hangar /var/lib/hangar
chmod 0750 /var/lib/hangar
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null 2>&1 || true; fi
exit 0
