# Spike (stop 80): which part of a restriction slows a dm-crypt writer, without the daemon.
# Runs after the e2e script's first 170 lines; see README.md here.
systemctl stop ioshield
umount "$DATA" || log "umount failed"
modprobe dm_crypt || log "modprobe dm_crypt failed"
CKEY=$(head -c 64 /dev/urandom | od -An -tx1 | tr -d ' \n')
mkcrypt() { # mkcrypt EXTRA_OPTS
  dmsetup create e2e-crypt --uuid CRYPT-LUKS2-0e2e0e2e0e2e0e2e0e2e0e2e0e2e0e2e-e2e-crypt --table "0 $(blockdev --getsz "$DATA_DEV") crypt aes-xts-plain64 $CKEY 0 $DATA_DEV 0 $1" || log "dmsetup crypt failed"
  mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1,nodiscard /dev/mapper/e2e-crypt
  mount -o noinit_itable /dev/mapper/e2e-crypt "$DATA"
  CM=$(basename "$(readlink -f /dev/mapper/e2e-crypt)")
  log "table: $(dmsetup table e2e-crypt | sed 's/ [0-9a-f]\{64,\} / KEY /')"
}
rmcrypt() { umount "$DATA"; dmsetup remove e2e-crypt; }
wsec() { awk '{print $7}' /sys/block/$1/stat; }
sample() {
  local a0 a1 n=$2
  for i in $(seq 1 $n); do
    a0=$(wsec vdb); sleep 3; a1=$(wsec vdb)
    log "$1 3s: vdb $(( (a1-a0)*512/3000000 )) MB/s inflight dm $(awk '{print $9}' /sys/block/$CM/stat) vdb $(awk '{print $9}' /sys/block/vdb/stat) $(grep -E '^(Dirty|Writeback):' /proc/meminfo | tr -s ' ' | tr '\n' ' ') throttled $(grep -o 'wbytes=[0-9]*' /sys/fs/cgroup/system.slice/cw.service/io.stat | tr '\n' ' ')"
  done
}
run() { # run LABEL PROPS...
  local label=$1; shift
  systemd-run --unit=cw --property=Type=exec "$@" dd if=/dev/zero of="$DATA/crypt" bs=1M count=3000 status=none
  sleep 3
  log "$label io.max: $(tr '\n' ' ' < /sys/fs/cgroup/system.slice/cw.service/io.max) memory.high $(cat /sys/fs/cgroup/system.slice/cw.service/memory.high)"
  sample "$label" 4
  cat /proc/$(systemctl show cw -p MainPID --value)/stack 2>/dev/null | head -8 | tr '\n' '|'; echo
  systemctl stop cw; rm -f "$DATA/crypt"; sync; sleep 1
}
mkcrypt ""
run limit-only --property=IOWriteBandwidthMax="/dev/$CM 18750000"
run memhigh-only --property=MemoryHigh=32M
run both --property=IOWriteBandwidthMax="/dev/$CM 18750000" --property=MemoryHigh=32M
run both-again --property=IOWriteBandwidthMax="/dev/$CM 18750000" --property=MemoryHigh=32M
rmcrypt
mkcrypt "1 no_write_workqueue"
run nowq-both --property=IOWriteBandwidthMax="/dev/$CM 18750000" --property=MemoryHigh=32M
rmcrypt
dmsetup create e2e-lin --table "0 $(blockdev --getsz "$DATA_DEV") linear $DATA_DEV 0"
mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1,nodiscard /dev/mapper/e2e-lin
mount -o noinit_itable /dev/mapper/e2e-lin "$DATA"; CM=$(basename "$(readlink -f /dev/mapper/e2e-lin)")
run linear-both --property=IOWriteBandwidthMax="/dev/$CM 18750000" --property=MemoryHigh=32M
umount "$DATA"; dmsetup remove e2e-lin
