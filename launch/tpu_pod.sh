#!/usr/bin/env bash
# A Cloud TPU VM pod slice: the same command on every worker, each told the coordinator
# (worker 0), the number of workers and its own index, read from the TPU's metadata.
#
#   TPU=my-v4-32 ZONE=us-central2-b launch/tpu_pod.sh configs/big.py gs://my-bucket/runs/big \
#       --config.data.data_dir=gs://my-bucket/tensorflow_datasets \
#       --config.model.dtype=bfloat16
#
# Every worker needs the project installed in REPO_DIR (default: ~/transformer_jax). The
# workdir and the prepared TFDS data are best in a bucket (gs://...), which every worker
# reads and writes directly with the TPU VM's own credentials: no mount is needed. A path
# all workers mount (a Filestore share) works too. Re-running the same command resumes.
set -euo pipefail
: "${TPU:?set TPU to the TPU VM name}" "${ZONE:?set ZONE to its zone}"
config=${1:?usage: $0 CONFIG WORKDIR [overrides...]}
workdir=${2:?usage: $0 CONFIG WORKDIR [overrides...]}
shift 2
repo_dir=${REPO_DIR:-transformer_jax}
# The workers' internal addresses, worker 0 first.
IFS=';' read -r -a hosts <<< "$(gcloud compute tpus tpu-vm describe "$TPU" --zone="$ZONE" \
  --format='value(networkEndpoints[].ipAddress)')"
args=$(printf ' %q' --config="$config" --workdir="$workdir" "$@")
if (( ${#hosts[@]} > 1 )); then
  worker='$(curl -s -H Metadata-Flavor:Google http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number)'
  args+=" --coordinator_address=${hosts[0]}:${PORT:-8476} --num_processes=${#hosts[@]}"
  args+=" --process_id=$worker"
fi
gcloud compute tpus tpu-vm ssh "$TPU" --zone="$ZONE" --worker=all --command \
  "cd $repo_dir && ${PYTHON:-python3} -m transformer_jax.main$args"
