# Spike (stop 80): 5 fresh starts of the daemon on dm-crypt with the speed estimator's debug log.
# Runs after the e2e script's first 170 lines; see README.md here.
mkdir -p /etc/systemd/system/ioshield.service.d
printf '[Service]\nEnvironment=IOSHIELD_LOG=info,ioshield::detect::bandwidth=debug\n' > /etc/systemd/system/ioshield.service.d/debug.conf
systemctl daemon-reload
systemctl stop ioshield
umount "$DATA"
modprobe dm_crypt
MAPPED_UUID=CRYPT-LUKS2-0e2e0e2e0e2e0e2e0e2e0e2e0e2e0e2e-e2e-mapped
dmsetup create e2e-mapped --uuid "$MAPPED_UUID" --table "0 $(blockdev --getsz "$DATA_DEV") crypt aes-xts-plain64 $(head -c 64 /dev/urandom | od -An -tx1 | tr -d ' \n') 0 $DATA_DEV 0"
mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1,nodiscard /dev/mapper/e2e-mapped
mount -o noinit_itable /dev/mapper/e2e-mapped "$DATA"
MAPPED=/dev/$(basename "$(readlink -f /dev/mapper/e2e-mapped)")
for rep in 1 2 3 4 5; do
  rm -f /var/lib/ioshield/disks.json
  T31=$(date +%s)
  start_ioshield "$T31"
  systemd-run --unit=mapped-fresh$rep --property=Type=exec dd if=/dev/zero of="$DATA/fresh" bs=1M count=3000 status=none
  W0=$(awk '{print $7}' "/sys/block/${DATA_DEV#/dev/}/stat")
  sleep 32
  W1=$(awk '{print $7}' "/sys/block/${DATA_DEV#/dev/}/stat")
  systemctl stop mapped-fresh$rep.service
  systemctl stop ioshield
  log "rep $rep: $(journal_since "$T31" | grep -c 'disk period') periods; measures: $(journal_since "$T31" | grep -o 'the disk now measures [0-9.]* MB/s' | tr '\n' ' '); through ${DATA_DEV#/dev/} $(( (W1 - W0) * 512 / 32000000 )) MB/s over 32 s; refreshed: $(journal_since "$T31" | grep -o 'dirty counts of writers held by memory.high refreshed [^;]*' | head -n 1)"
  journalctl -u ioshield --no-pager --since "@$T31" -o json | perl -ne 'my %f; for my $k (qw(__MONOTONIC_TIMESTAMP MESSAGE IOSHIELD_DISK IOSHIELD_BYTES IOSHIELD_SECONDS IOSHIELD_WRITES_QUEUED IOSHIELD_HOLD IOSHIELD_BACKLOG IOSHIELD_DRAINED)) { $f{$k} = $1 if /"$k":"([^"]*)"/ } next unless ($f{IOSHIELD_DISK} // "") =~ /253|dm/ || $f{MESSAGE} =~ /measures|retune/; print "DBG ", join(" ", map { "$_=" . ($f{$_} // "") } qw(__MONOTONIC_TIMESTAMP IOSHIELD_DISK IOSHIELD_BYTES IOSHIELD_SECONDS IOSHIELD_WRITES_QUEUED IOSHIELD_HOLD IOSHIELD_BACKLOG IOSHIELD_DRAINED)), " ", substr($f{MESSAGE}, 0, 120), "\n"' 
  rm -f "$DATA/fresh"; sync
done
