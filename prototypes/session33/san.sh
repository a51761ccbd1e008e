# Sourced by the sanitizer calls (`sanitize.sh`, `../session36/sanitize_tests.sh`): finds
# compute-sanitizer and defines `san TOOL TIMEOUT NAME COMMAND...`, which runs COMMAND
# under TOOL with its log in /tmp/cs/NAME.san and prints the tool's summary and the
# command's last verdict line (a verify's count or a test binary's result).
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "compute-sanitizer: $CS"; $CS --version | tail -1
mkdir -p /tmp/cs
san() {
  local tool=$1 t=$2 name=$3; shift 3
  local S=$SECONDS
  timeout $t $CS --tool $tool --error-exitcode 97 --print-limit 20 --log-file /tmp/cs/$name.san "$@" > /tmp/cs/$name.out 2>&1
  echo "$name ($tool): rc=$? ($((SECONDS - S)) s): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/cs/$name.san | tail -2 | tr '\n' ' ')"
  grep -E "matched|passed|failed|test result" /tmp/cs/$name.out | tail -1
}
