#!/usr/bin/env bash
# One host, all its GPUs: one process drives every local device (a mesh, or pmap).
#
#   launch/local_gpus.sh configs/base.py runs/base [--config.FIELD=VALUE ...]
#   CUDA_VISIBLE_DEVICES=0,1,2,3 launch/local_gpus.sh configs/table3.py:A_h16 runs/A_h16
#
# Mixed precision is the usual choice on GPUs: add --config.model.dtype=bfloat16.
set -euo pipefail
config=${1:?usage: $0 CONFIG WORKDIR [overrides...]}
workdir=${2:?usage: $0 CONFIG WORKDIR [overrides...]}
shift 2
exec "${PYTHON:-python}" -m transformer_jax.main --config="$config" --workdir="$workdir" "$@"
