#!/bin/busybox sh
# /init of the phx.ko test guest: load the drivers, run the checks in an
# order where no check's device memory is reused by a later one, dump the
# kernel log for the host, power off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

while read -r m; do
	insmod "/modules/$m" 2>/dev/null || echo "# insmod $m failed"
done </modules/order
insmod /phx.ko || echo "# insmod phx.ko failed"

i=0
while [ ! -b /dev/nvme0n1 ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done

/kmod_map
/kmod_safety
/kmod_dma raw
mount -t ext4 -o ro /dev/nvme0n1 /mnt || echo "# cannot mount the ext4 disk"
/kmod_dma file
/kmod_lib
umount /mnt
/kmod_races alloc-unbind
/kmod_races copy-truncate
/kmod_races rmmod-race
/kmod_races unbind-pin

echo "==== dmesg begin"
dmesg
echo "==== dmesg end"
poweroff -f
