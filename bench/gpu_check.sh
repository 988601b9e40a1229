#!/usr/bin/env bash
# The GPU check moved to bench/gpu_check/ (gpu_check.sh, check.py, carry.py); this name keeps older commands working.
exec bash "$(dirname "$0")/gpu_check/gpu_check.sh" "$@"
