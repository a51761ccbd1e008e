#!/bin/bash
# Fifty-seventh session, late calls. Carry [".device", ".vectors"]. On an H200 only: the
# full bench of both presets (`call4.sh`, the shipped report's run); on anything else,
# nothing (a cheap look for an H200).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash prototypes/session57/call4.sh
fi
nvidia-smi --query-gpu=name --format=csv,noheader; echo "not an H200: nothing run"
