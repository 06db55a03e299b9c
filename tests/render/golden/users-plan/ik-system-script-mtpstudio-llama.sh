#!/usr/bin/env bash
# mtpstudio-llama.sh: start llama-server for Qwen3.6-35B-A3B-IQ4_XS.gguf with the plan's settings.
# Written by mtpstudio; change the plan and render again rather than editing here.
# Extra arguments go to llama-server, e.g. `mtpstudio-llama.sh --metrics`.
#
# What the flags mean:
#   -m: The model file (GGUF) to load.
#   --host: Listen on 127.0.0.1 only: reachable from this computer, not the network.
#   --port: TCP port of the HTTP API.
#   -c: Context window of 131072 tokens; the KV cache is sized for it.
#   -ctk: Store the attention K cache as q8_0.
#   -ctv: Store the attention V cache as q8_0.
#   -fa: Flash attention on; a quantized V cache needs it.
#   -b: Logical batch: up to 2048 prompt tokens per decode call.
#   -ub: Physical batch of 512 tokens; larger values grow the compute buffer.
#   --parallel: One server slot: each slot has its own recurrent state (and MTP multiplies it).
#   -t: Use 8 CPU threads for the layers and experts kept in RAM.
#   --fit: Let ik_llama.cpp offload every layer and move experts to RAM, last layer first, until
#       the model fits (it never changes the context).
#   --fit-margin: Leave 1664 MiB of VRAM free on each GPU when fitting.
#   --spec-type: Draft tokens with the model's own MTP (nextn) layer: at most 3 tokens per step,
#       stopping when the draft's probability falls below 0.75.
#
# Warning: ik_llama.cpp's fit does not count the MTP draft context; leave a larger fit margin so
#   drafting has room.
set -euo pipefail

# llama-server reads these variables before its command line; drop them so that only the
# flags below count.
for name in $(compgen -e); do
    case "$name" in
        LLAMA_ARG_*|LLAMA_API_KEY) unset "$name" ;;
    esac
done

exec /opt/ik_llama.cpp/bin/llama-server \
    -m /home/alice/models/Qwen3.6-35B-A3B-IQ4_XS.gguf \
    --host 127.0.0.1 \
    --port 8080 \
    -c 131072 \
    -ctk q8_0 \
    -ctv q8_0 \
    -fa on \
    -b 2048 \
    -ub 512 \
    --parallel 1 \
    -t 8 \
    --fit \
    --fit-margin 1664 \
    --spec-type mtp:n_max=3,p_min=0.75 \
    "$@"
