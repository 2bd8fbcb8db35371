#!/bin/bash
# One call: build (≤ 330 s) then the capacity sweep in what is left of ~565 s. Run from the repo root.
t0=$(date +%s)
BUILD_LIMIT_S=330 bash .device/scripts/build.sh > /tmp/build_out.txt 2>&1; rc=$?
tail -6 /tmp/build_out.txt
[ $rc = 0 ] || exit 1
left=$(( 565 - ($(date +%s) - t0) ))
echo "build done after $(( $(date +%s) - t0 )) s; capacity gets $(( left - 25 )) s"
CAP_LIMIT_S=$(( left - 25 )) bash .device/scripts/run_h200.sh
