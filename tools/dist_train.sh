#!/usr/bin/env bash
# Data-parallel training with torchrun: tools/dist_train.sh CONFIG GPUS [train.py args]
# Multi-node: set NNODES, NODE_RANK, MASTER_ADDR (and PORT) on every node.
# Without GPUs the ranks run on the CPU over gloo (see mmhvit/utils/launch.py).
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
PYTHON=${PYTHON:-python}

PYTHONPATH="$(dirname "$0")/..":$PYTHONPATH \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$(dirname "$0")/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
