#!/bin/busybox sh
# /init of the passthrough test guest: phxfs without phx.ko (daemon path),
# then with it: the daemon killed under an open file and remounted, then
# the passthrough checks; dump the kernel log for the host, power off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /run /tmp /pfs

while read -r m; do
	insmod "/modules/$m" 2>/dev/null || echo "# insmod $m failed"
done </modules/order

i=0
while [ ! -b /dev/nvme0n1 ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
mount -t ext4 -o ro /dev/nvme0n1 /mnt || echo "# cannot mount the ext4 disk"

PHX_SIM_CAPACITY=64M /phxfs /pfs -o kind=sim || echo "# phxfs (sim) failed"
/kmod_fuse daemon /pfs
umount /pfs

insmod /phx.ko || echo "# insmod phx.ko failed"
/phxfs /pfs -o kind=kmod,headroom=16M || echo "# phxfs (kmod) failed"
# The kill first: the memory of the files it loses is cleared when it is
# allocated again, and the host reads the BAR only at the end.
/kmod_fuse kill /pfs "$(pidof phxfs)"
/kmod_fuse passthrough /pfs
umount /pfs
umount /mnt

echo "==== dmesg begin"
dmesg
echo "==== dmesg end"
poweroff -f
