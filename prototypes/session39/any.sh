#!/bin/bash
# Whichever GPU comes: an H100 runs the H100 table's call (`h100.sh`) unless QTIP=1, anything else the
# QTIP-shape call (`qtip_shape.sh`). Carry [".device"].
if [ -z "$QTIP" ] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  exec bash prototypes/session39/h100.sh
fi
exec bash prototypes/session39/qtip_shape.sh
