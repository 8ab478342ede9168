#!/bin/busybox sh
# /init of the test VM (built by xtask/src/vm/initramfs.rs). Prepares the machine the way
# the test bed needs, runs /scenario.sh, saves $RESULTS as a tar on the `results` disk and
# powers off. Lines starting with "ioshield-vm:" are read by the host; keep them stable.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "ioshield-vm: init started"
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /tmp /results
mount -t tmpfs tmp /tmp
echo "+io +memory" > /sys/fs/cgroup/cgroup.subtree_control

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
    DATA_DEV=$(disk_by_serial data) && RESULTS_DEV=$(disk_by_serial results) && break
    sleep 0.1
done
if [ -z "$DATA_DEV" ] || [ -z "$RESULTS_DEV" ]; then
    echo "ioshield-vm: data or results disk missing"
    poweroff -n -f
fi

mkdir -p /mnt/data
# noinit_itable: the host made the file system on a fresh (zero) image, so the background
# inode-table zeroing would only add I/O that competes with the scenario.
mount -t ext4 -o noinit_itable "$DATA_DEV" /mnt/data || echo "ioshield-vm: mounting $DATA_DEV failed"
# A disk with no throttle, for loads that write elsewhere than the slow disk (stall.sh
# INNOCENTS_ON=fast).
FAST_DEV=$(disk_by_serial fast) || FAST_DEV=
if [ -n "$FAST_DEV" ]; then
    # It stands for a desktop's system disk, an SSD, and says so as NVMe and SATA SSDs do
    # (virtio disks say rotational): the daemon counts a backlog not yet written only on a disk
    # that may be slow (removable or rotational), as the throttled data disk is.
    echo 0 > "/sys/block/${FAST_DEV#/dev/}/queue/rotational" ||
        echo "ioshield-vm: $FAST_DEV could not be marked solid-state"
    mkdir -p /mnt/fast
    mount -t ext4 -o noinit_itable "$FAST_DEV" /mnt/fast || echo "ioshield-vm: mounting $FAST_DEV failed"
fi

export DATA=/mnt/data RESULTS=/results DATA_DEV RESULTS_DEV KERNEL="$(uname -r)" HOME=/tmp
if [ -n "$FAST_DEV" ]; then export FAST=/mnt/fast FAST_DEV; fi
[ -f /etc/vm-env ] && . /etc/vm-env
echo "ioshield-vm: kernel $KERNEL data $DATA_DEV scheduler $(cat /sys/block/${DATA_DEV#/dev/}/queue/scheduler)"
echo "$DATA_DEV" > "$RESULTS/data-dev"
echo "$KERNEL" > "$RESULTS/kernel"
echo "ioshield-vm: scenario start"
( cd /tmp && sh /scenario.sh; echo $? > /tmp/status ) 2>&1 | tee "$RESULTS/scenario.log"
status=$(cat /tmp/status)
echo "$status" > "$RESULTS/exit-status"
dmesg > "$RESULTS/dmesg.txt"
# Only the results disk is flushed: a global sync would wait for the offender's backlog.
tar -cf - -C "$RESULTS" . | dd of="$RESULTS_DEV" bs=1M conv=fsync 2>/dev/null
echo "ioshield-vm: scenario done status=$status"
poweroff -n -f
