#!/bin/sh
# Does starting the writeback of one page every MiB (act::backlog_split) scatter a file on ext4?
# On a loop ext4 (delalloc, 4 KiB blocks) in a scratch directory, as root: 25 MiB written with
# dd, then sync, with and without the cut before the sync; then 50 MiB with a cut after each
# half. Prints filefrag's extent count of each file.
set -eu
dir=$(mktemp -d)
trap 'umount "$dir/mnt" 2> /dev/null; [ -n "${dev:-}" ] && losetup -d "$dev"; rm -rf "$dir"' EXIT
truncate -s 2G "$dir/img"
mkfs.ext4 -q "$dir/img"
dev=$(losetup -f --show "$dir/img")
mkdir "$dir/mnt"
mount "$dev" "$dir/mnt"
# The cut's calls: sync_file_range(fd, every MiB but 0, 4096, SYNC_FILE_RANGE_WRITE).
cut() {
    python3 - "$1" << 'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
fd = os.open(sys.argv[1], os.O_RDONLY)
for at in range(1 << 20, os.fstat(fd).st_size, 1 << 20):
    assert libc.sync_file_range(fd, at, 4096, 2) == 0
PY
}
for case in plain cut plain2 cut2; do
    f="$dir/mnt/$case"
    dd if=/dev/urandom of="$f" bs=1M count=25 status=none
    case $case in cut*) cut "$f" ;; esac
    case $case in *2)
        dd if=/dev/urandom of="$f" bs=1M count=25 seek=25 conv=notrunc status=none
        [ "$case" = cut2 ] && cut "$f" ;;
    esac
    sync
    echo "$case: $(filefrag "$f" | sed 's/.*: //')"
done
