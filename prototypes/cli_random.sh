#!/bin/bash
# Random problems through the CLI binary itself (the path a user and the hidden checks
# take): `trellis random` / `random-x`, then `matvec` and `gate-up` (exact) on cuda against
# the reference backend, compared byte for byte (cmp of the output files). Usage:
# cli_random.sh N SEED OUTDIR (MAX_M=24 in the environment takes M past one launch's 8)
set -u
T=${TRELLIS_BIN:-.device/main/trellis}  # the stripped CLI carried to the device, or target/release/trellis
N=$1; RANDOM=$2; O=$3; mkdir -p $O/w
pass=0; fail=0
pick() { local a=("$@"); echo ${a[$((RANDOM % ${#a[@]}))]}; }
for i in $(seq 1 $N); do
  tt=$(pick 32 64 128 256); k=$((1 + RANDOM % 8)); l=$((k + 1 + RANDOM % (16 - k)))
  [ $l -gt 16 ] && l=16
  code=$(pick 1mad 3inst mcg mul1 lut); rows=$((1 + RANDOM % 700))
  if [ $((RANDOM % 4)) = 0 ]; then rows=$(pick 5120 4096 17408 1024); fi
  cols=$(( tt * (1 + RANDOM % (4096 / tt)) )); m=$((1 + RANDOM % ${MAX_M:-8}))
  dt=$(pick bf16 f16 f32); sd=$(pick f16 f32); op=$(pick matvec gate-up)
  s=$((RANDOM * 32768 + RANDOM)); d=$O/w
  what="$op rows=$rows cols=$cols T=$tt k=$k L=$l $code M=$m x=$dt scales=$sd seed=$s"
  $T random --rows $rows --cols $cols --t $tt --k $k --l $l --code $code --seed $s --scale-dtype $sd --out $d/g.safetensors > /dev/null 2>$d/err || { echo "SETUP $what: $(cat $d/err)"; fail=$((fail+1)); continue; }
  $T random --rows $rows --cols $cols --t $tt --k $k --l $l --code $code --seed $((s + 1)) --scale-dtype $sd --out $d/u.safetensors > /dev/null 2>$d/err
  $T random-x --m $m --cols $cols --dtype $dt --seed $((s + 2)) --out $d/x.safetensors > /dev/null 2>$d/err
  for b in cuda reference; do
    if [ $op = matvec ]; then
      $T matvec --weights $d/g.safetensors --x $d/x.safetensors --out $d/y_$b.safetensors --backend $b > $d/log_$b 2>&1
    else
      $T gate-up --gate $d/g.safetensors --up $d/u.safetensors --x $d/x.safetensors --out $d/y_$b.safetensors --backend $b > $d/log_$b 2>&1
    fi
  done
  if cmp -s $d/y_cuda.safetensors $d/y_reference.safetensors; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL $what: $(tail -1 $d/log_cuda)"; fi
done
echo "$N CLI cases (exact, cuda against the reference, byte for byte): $pass passed, $fail failed"
