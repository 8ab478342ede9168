#!/bin/busybox sh
# /init of the initramfs of `cargo xtask vm e2e` (xtask/src/vm/sysboot.rs): loads the virtio disk
# driver (a module in Debian's cloud kernels), mounts the Debian root image, hands the test files
# to it and switches to systemd, which runs ioshield-e2e.target. Lines starting with
# "ioshield-vm:" are read by the host.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "ioshield-vm: init started"
while read -r m; do
    insmod "/lib/modules/$m" || echo "ioshield-vm: insmod $m failed"
done < /etc/vm-modules

# Disks are named by their virtio serial, not by probe order.
disk_by_serial() {
    for s in /sys/block/vd*/serial; do
        [ -e "$s" ] && [ "$(cat "$s")" = "$1" ] && { d=${s%/serial}; echo "/dev/${d##*/}"; return 0; }
    done
    return 1
}
for _ in $(seq 100); do
    ROOT_DEV=$(disk_by_serial root) && DATA_DEV=$(disk_by_serial data) &&
        RESULTS_DEV=$(disk_by_serial results) && break
    sleep 0.1
done
if [ -z "$ROOT_DEV" ] || [ -z "$DATA_DEV" ] || [ -z "$RESULTS_DEV" ]; then
    echo "ioshield-vm: a disk is missing (root '$ROOT_DEV' data '$DATA_DEV' results '$RESULTS_DEV')"
    poweroff -n -f
fi
mkdir -p /newroot
if ! mount -t ext4 "$ROOT_DEV" /newroot; then
    echo "ioshield-vm: mounting the root $ROOT_DEV failed"
    poweroff -n -f
fi
# The root is a qemu snapshot: whatever is written here is gone after the run.
rm -rf /newroot/e2e
cp -a /e2e /newroot/e2e
printf 'DATA_DEV=%s\nRESULTS_DEV=%s\n' "$DATA_DEV" "$RESULTS_DEV" > /newroot/e2e/disks
cp /e2e/ioshield-e2e.service /e2e/ioshield-e2e.target /newroot/etc/systemd/system/
for d in dev proc sys; do mount -o move "/$d" "/newroot/$d"; done
exec switch_root /newroot /sbin/init
