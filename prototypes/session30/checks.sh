#!/bin/bash
# The thirtieth session's device call (AF): the checks a reader re-runs, on the build of the
# shipped table. The script is the thirty-first session's (the same steps, its seed from
# SEED); this is AF's seed. Carry [".device", ".vectors"].
SEED=${SEED:-20261530} exec bash "$(dirname "$0")/../session31/checks.sh"
