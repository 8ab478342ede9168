# Spike (stop 81): what memory.high alone lets a buffered writer do on dm-crypt, against a linear
# mapping of the same disk, without the daemon. Runs after the e2e script's first 170 lines;
# see README.md here.
systemctl stop ioshield
umount "$DATA" || log "umount failed"
modprobe dm_crypt || log "modprobe dm_crypt failed"
CKEY=$(head -c 64 /dev/urandom | od -An -tx1 | tr -d ' \n')
mkmap() { # mkmap TABLE
  dmsetup create e2e-map --table "0 $(blockdev --getsz "$DATA_DEV") $1" || log "dmsetup failed"
  mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1,nodiscard /dev/mapper/e2e-map
  mount -o noinit_itable /dev/mapper/e2e-map "$DATA"
  CM=$(basename "$(readlink -f /dev/mapper/e2e-map)")
  log "table: $(dmsetup table e2e-map | sed 's/ [0-9a-f]\{64,\} / KEY /')"
}
rmmap() { umount "$DATA"; dmsetup remove e2e-map; }
wsec() { awk '{print $7}' /sys/block/$1/stat; }
stat_of() { awk -v k="$1" '$1 == k { printf "%.1f", $2 / 1048576 }' "$CG/memory.stat"; }
# REFRESH=1: the writer's memory.stat read every 20 ms meanwhile, as the daemon's
# refresh_dirty_counts does (a read brings the cgroup's dirty counts up to date on 6.8+).
refresher() {
  while [ -e "$CG/memory.stat" ]; do
    while read -r _; do :; done < "$CG/memory.stat" 2> /dev/null
    read -r -t 0.02 _ <> <(:) || :
  done
}
run() { # run LABEL PROPS...
  local label=$1 a0 a1 t0 t1 i pid rpid=; shift
  CG=/sys/fs/cgroup/system.slice/cw.service
  systemd-run --unit=cw --property=Type=exec "$@" dd if=/dev/zero of="$DATA/big" bs=1M count=3000 status=none
  if [ "${REFRESH:-0}" = 1 ]; then sleep 0.2; refresher & rpid=$!; label="$label-refreshed"; fi
  sleep 3
  pid=$(systemctl show cw -p MainPID --value)
  for i in 1 2 3 4 5 6; do
    a0=$(wsec vdb); t0=$(now); sleep 1.5; a1=$(wsec vdb); t1=$(now)
    log "$label: vdb $(awk -v a="$a0" -v b="$a1" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.1f", (b - a) * 512 / (e - s) / 1e6 }') MB/s, memory.high $(cat $CG/memory.high) current $(( $(cat $CG/memory.current) / 1048576 ))M file_dirty $(stat_of file_dirty)M file_writeback $(stat_of file_writeback)M, in flight dm $(awk '{print $9}' /sys/block/$CM/stat) vdb $(awk '{print $9}' /sys/block/vdb/stat), dd waits in $(cat /proc/$pid/wchan 2>/dev/null)"
  done
  systemctl stop cw; [ -n "$rpid" ] && kill "$rpid" 2> /dev/null; rm -f "$DATA/big"; sync; sleep 1
}
log "vm.dirty_ratio $(cat /proc/sys/vm/dirty_ratio) background $(cat /proc/sys/vm/dirty_background_ratio)"
mkmap "crypt aes-xts-plain64 $CKEY 0 $DATA_DEV 0"
run crypt-none
run crypt-32M --property=MemoryHigh=32M
REFRESH=1 run crypt-32M --property=MemoryHigh=32M
run crypt-64M --property=MemoryHigh=64M
run crypt-128M --property=MemoryHigh=128M
run crypt-limit21-32M --property=MemoryHigh=32M --property=IOWriteBandwidthMax="/dev/$CM 21000000"
REFRESH=1 run crypt-limit21-32M --property=MemoryHigh=32M --property=IOWriteBandwidthMax="/dev/$CM 21000000"
rmmap
mkmap "crypt aes-xts-plain64 $CKEY 0 $DATA_DEV 0 1 no_write_workqueue"
run crypt-nowq-32M --property=MemoryHigh=32M
rmmap
mkmap "linear $DATA_DEV 0"
run linear-none
run linear-32M --property=MemoryHigh=32M
REFRESH=1 run linear-32M --property=MemoryHigh=32M
rmmap
