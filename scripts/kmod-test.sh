#!/bin/sh
# Run the phx.ko suite in QEMU (TCG): kmod-test.sh BUILD_DIR [fuse]
#
# With "fuse", the passthrough suite instead: phxfs (static, libfuse 3.17)
# runs in the guest, first without phx.ko, then over it
# (tests/kmod/init-fuse.sh, tests/kmod/kmod_fuse.c).
#
# Builds a busybox initramfs holding the NVMe and ext4 modules of the
# guest kernel, phx.ko and the guest programs; an NVMe disk image with an
# ext4 file system of pattern files; a 64 MiB ivshmem memory file, part of
# it prefilled by the host.  The guest runs the checks and powers off; the
# host then compares the ivshmem file and the disk image with what the
# guest reported and reads QEMU's trace of the NVMe controller's DMA
# addresses.  Prints one "ok N - ..." line per check.
set -eu

BUILD=${1:-build}
SUITE=${2:-kmod}
KVER=6.12.95+deb12-amd64
D=$BUILD/kmod
IMG=$D/image
RUN=$D/run-$SUITE
MIB=1048576
HOSTCHECK=$D/tests/hostcheck

rm -rf "$RUN"
mkdir -p "$RUN/initrd/bin" "$RUN/initrd/modules" "$RUN/files"
for d in proc sys dev mnt; do
	mkdir -p "$RUN/initrd/$d"
done

cp /bin/busybox "$RUN/initrd/bin/busybox"
for m in nvme crc32c_generic ext4; do
	modprobe -d "$IMG" -S "$KVER" --show-depends "$m"
done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' |
	while read -r ko; do
		name=$(basename "$ko" .xz)
		xz -dc "$ko" >"$RUN/initrd/modules/$name"
		echo "$name" >>"$RUN/initrd/modules/order"
	done
cp "$D/phx.ko" "$RUN/initrd/phx.ko"
if [ "$SUITE" = fuse ]; then
	progs="kmod_fuse phxfs phx"
	init=tests/kmod/init-fuse.sh
	verify=verify-fuse
else
	progs="kmod_map kmod_dma kmod_lib kmod_safety kmod_races"
	init=tests/kmod/init.sh
	verify=verify
fi
for t in $progs; do
	cp "$D/tests/$t" "$RUN/initrd/$t"
done
cp $init "$RUN/initrd/init"
chmod +x "$RUN/initrd/init"
(cd "$RUN/initrd" && find . | cpio -o -H newc --quiet | gzip -1) \
	>"$RUN/initrd.gz"

# Seeds and sizes as in tests/kmod/kmod_test.h.
"$HOSTCHECK" gen "$RUN/files/lib.bin" $((12 * MIB)) 12
if [ "$SUITE" = fuse ]; then
	"$HOSTCHECK" gen "$RUN/files/src.bin" $((16 * MIB)) 20
else
	"$HOSTCHECK" gen "$RUN/files/a.bin" $((8 * MIB)) 10
	"$HOSTCHECK" gen "$RUN/files/b.bin" $((8 * MIB)) 11
fi
mkfs.ext4 -q -F -L phx -d "$RUN/files" "$RUN/disk.img" 48M
truncate -s 64M "$RUN/disk.img"

truncate -s 64M "$RUN/bar.mem"
"$HOSTCHECK" fill "$RUN/bar.mem" $((33 * MIB)) $MIB 2

start=$(date +%s)
rc=0
# One host thread runs both guest CPUs: with a thread each, the guest
# kernel's live code patching (int3 breakpoints while another CPU runs the
# same text) was seen to oops at boot on a busy host.
timeout 900 qemu-system-x86_64 -M q35 -cpu max -m 1G -smp 2 \
	-accel tcg,thread=single \
	-display none -monitor none -no-reboot \
	-serial "file:$RUN/console.log" \
	-kernel "$IMG/boot/vmlinuz-$KVER" -initrd "$RUN/initrd.gz" \
	-append "console=ttyS0 quiet panic=-1" \
	-drive "if=none,id=n0,file=$RUN/disk.img,format=raw" \
	-device nvme,drive=n0,serial=phx0 \
	-object "memory-backend-file,id=m0,mem-path=$RUN/bar.mem,size=64M,share=on" \
	-device ivshmem-plain,memdev=m0 \
	-trace pci_nvme_map_addr -D "$RUN/trace.log" || rc=$?
echo "# QEMU ran $(($(date +%s) - start)) s (exit $rc); log in $RUN/console.log"
grep -E '^(# |RESULT)' "$RUN/console.log" || true
exec "$HOSTCHECK" $verify "$RUN/console.log" "$RUN/bar.mem" "$RUN/disk.img" \
	"$RUN/trace.log"
