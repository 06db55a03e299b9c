#!/usr/bin/env bash
# glm-air.sh: start llama-server for GLM 4.5 Air (100% MoE) $pecial.gguf with the plan's settings.
# Written by mtpstudio; change the plan and render again rather than editing here.
# Extra arguments go to llama-server, e.g. `glm-air.sh --metrics`.
#
# What the flags mean:
#   -m: The model file (GGUF) to load.
#   --host: Listen on 0.0.0.0: reachable from other machines, so clients need the API key.
#   --port: TCP port of the HTTP API.
#   --api-key-file: Clients must send the key stored in this file (Authorization: Bearer …); the
#       key itself stays out of the command line.
#   -c: Context window of 32768 tokens; the KV cache is sized for it.
#   -ctk: Store the attention K cache as q8_0.
#   -ctv: Store the attention V cache as q8_0.
#   -fa: Flash attention on; a quantized V cache needs it.
#   -b: Logical batch: up to 2048 prompt tokens per decode call.
#   -ub: Physical batch of 512 tokens; larger values grow the compute buffer.
#   --parallel: One server slot: each slot has its own recurrent state (and MTP multiplies it).
#   -t: Use 8 CPU threads for the layers and experts kept in RAM.
#   --fit: Let ik_llama.cpp offload every layer and move experts to RAM, last layer first, until
#       the model fits (it never changes the context).
#   --fit-margin: Leave 1024 MiB of VRAM free on each GPU when fitting.
#   --mlock: Lock the memory-mapped weights in RAM so they are never swapped out.
#   --spec-type: Draft tokens with the model's own MTP (nextn) layer: at most 2 tokens per step,
#       stopping when the draft's probability falls below 0.75.
#
# Warning: ik_llama.cpp's fit does not count the MTP draft context; leave a larger fit margin so
#   drafting has room.
#
# Warning: ik_llama.cpp's MTP context uses the main cache types (q8_0/q8_0); the plan's draft
#   cache types (f16/f16) do not apply.
#
# Warning: Locking the weights in RAM from a user unit is capped by the user manager's
#   memory-lock limit (8 MiB by default); use a system unit, or raise LimitMEMLOCK for
#   user@.service.
set -euo pipefail

# llama-server reads these variables before its command line; drop them so that only the
# flags below count.
for name in $(compgen -e); do
    case "$name" in
        LLAMA_ARG_*|LLAMA_API_KEY) unset "$name" ;;
    esac
done

exec /opt/ik_llama.cpp/bin/llama-server \
    -m '/home/alice/My Models/GLM 4.5 Air (100% MoE) $pecial.gguf' \
    --host 0.0.0.0 \
    --port 8081 \
    --api-key-file /home/alice/.config/mtpstudio/server-api-key \
    -c 32768 \
    -ctk q8_0 \
    -ctv q8_0 \
    -fa on \
    -b 2048 \
    -ub 512 \
    --parallel 1 \
    -t 8 \
    --fit \
    --fit-margin 1024 \
    --mlock \
    --spec-type mtp:n_max=2,p_min=0.75 \
    "$@"
