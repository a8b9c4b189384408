# hangar %pre: the service user.
getent group hangar >/dev/null || groupadd -r hangar
getent passwd hangar >/dev/null || useradd -r -g hangar -d /var/lib/hangar -s /sbin/nologin -c "Hangar" hangar
exit 0
