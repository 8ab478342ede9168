#!/bin/bash
# The "held apart" table of docs/bench/newcomer.md: two ioshield binaries (BASE_BIN and
# LINGER_BIN, e.g. built at 97b2677 and after 33f05aa; each must be named `ioshield`), both
# kernels, two interleaved repeats per case. Summarise with summary.py OUT table.
cd "$(dirname "$0")/../../.."
OUT=${OUT:-target/linger56long}
mkdir -p $OUT
for rep in 1 2; do
  for case in mh256 off; do
    if [ $case = mh256 ]; then
      args=(-e DURATION=40 -e OFFENDER_STOP=10 -e NEXT_OFFENDER=10-16 -e 'IOSHIELD_DEVICE=memory_high = "256MiB"')
    else
      args=(-e DURATION=44 -e OFFENDER_STOP=10 -e NEXT_OFFENDER=14-20 -e 'IOSHIELD_DEVICE=memory_high = "off"')
    fi
    for v in base linger; do
      if [ $v = base ]; then bin=$BASE_BIN; else bin=$LINGER_BIN; fi
      cargo xtask vm run --kernel 6.12,6.1 --script tests/vm/stall.sh --out $OUT/$case-$v-$rep -q \
        --ioshield "$bin" -e SCENARIO=ioshield -e BANDWIDTH=30MB/s "${args[@]}" > $OUT/$case-$v-$rep.log 2>&1
      echo "$case $v $rep done $(date +%T)"
    done
  done
done
