#!/bin/bash
# The forty-second session's last call: the GPU tests with the new backend contract (the
# outputs zeroed at binding on the stream, a bound kernel run on another thread, the
# subnormal sums) under compute-sanitizer's memcheck and synccheck, and the GPU tests
# once more on the final build. Carry [".device"].
. prototypes/device.sh
for tool in memcheck synccheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 97 $D/cuda_launch --ignored --test-threads 1 > "$OUT/cuda_launch-$tool.txt" 2>&1
  echo "cuda_launch $tool rc=$? $(since)"; grep -E "test result|ERROR SUMMARY|panicked" "$OUT/cuda_launch-$tool.txt" | head -4
done
for t in gate_up_parts cuda_threads; do
  timeout 120 $D/$t --ignored --test-threads 1 > "$OUT/$t.txt" 2>&1
  echo "$t rc=$? $(since)"; grep -E "test result|panicked" "$OUT/$t.txt" | head -3
done
