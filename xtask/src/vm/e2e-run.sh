#!/bin/bash
# ExecStart of ioshield-e2e.service in the systemd guest of `cargo xtask vm e2e`: runs the test
# script with the variables it documents, saves /results as a tar on the `results` disk and
# powers off at once. Lines starting with "ioshield-vm:" are read by the host.
. /e2e/disks
# The options of `cargo xtask vm e2e` (E2E_MEASURE).
. /e2e/env
echo "ioshield-vm: scenario start"
mkdir -p /mnt/data /results
# noinit_itable: the host made the file system on a fresh (zero) image.
mount -t ext4 -o noinit_itable "$DATA_DEV" /mnt/data || echo "ioshield-vm: mounting $DATA_DEV failed"
export DATA=/mnt/data RESULTS=/results DATA_DEV DEB=/e2e/ioshield.deb KERNEL="$(uname -r)" \
    E2E_MEASURE=${E2E_MEASURE:-0}
uname -r > /results/kernel
systemctl --no-pager list-units --state=failed > /results/failed-units.txt 2>&1
bash /e2e/e2e-systemd.sh 2>&1 | tee /results/scenario.log
status=${PIPESTATUS[0]}
echo "$status" > /results/exit-status
journalctl -b -o short-monotonic --no-pager > /results/journal.txt 2>&1
dmesg > /results/dmesg.txt
# Only the results disk is flushed: a global sync would wait for the writer's backlog.
tar -cf - -C /results . | dd of="$RESULTS_DEV" bs=1M conv=fsync 2>/dev/null
echo "ioshield-vm: scenario done status=$status"
systemctl poweroff -ff
