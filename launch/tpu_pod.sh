#!/usr/bin/env bash
# A Cloud TPU VM pod slice: the same command on every worker. jax.distributed.initialize()
# finds the other workers from the TPU environment.
#
#   TPU=my-v4-32 ZONE=us-central2-b launch/tpu_pod.sh configs/big.py gs://bucket/runs/big \
#       --config.model.dtype=bfloat16 --config.train.parallel=sharded
#
# Every worker needs the project installed (pip install -e . in REPO_DIR) and the prepared
# TFDS data where --config.data.data_dir points (a GCS bucket works). Re-running resumes.
set -euo pipefail
: "${TPU:?set TPU to the TPU VM name}" "${ZONE:?set ZONE to its zone}"
config=${1:?usage: $0 CONFIG WORKDIR [overrides...]}
workdir=${2:?usage: $0 CONFIG WORKDIR [overrides...]}
shift 2
repo_dir=${REPO_DIR:-transformer_jax}
args=$(printf ' %q' --config="$config" --workdir="$workdir" "$@")
gcloud compute tpus tpu-vm ssh "$TPU" --zone="$ZONE" --worker=all --command \
  "cd $repo_dir && ${PYTHON:-python3} -m transformer_jax.main$args"
