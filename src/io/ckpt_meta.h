// ckpt_meta.h — a checkpoint folder as its small files describe it, read without loading any
// tensor: which folder a --resume or --load path means, the model shape in its config.json,
// and its trainer_state.json. What --resume, the ranks' agreement and the run record need of a
// checkpoint; saving and loading the tensors is checkpoint.h.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config/config.h"

// tokens: the tokens trained on since step 0, over every layout the run has had; gbatch: the
// global batch (sequences per step) of the run that saved it. Both -1 when a checkpoint written
// before them lacks them.
typedef struct {
    long step, adam_t, steps; uint64_t seed; int sequential; double tokens; long gbatch;
    int onebit_layout[3];   // world, tp, ep that saved 1-bit Adam's per-rank errors (0s: none recorded)
    char run_id[17];        // the run that saved it (io/savedir.h; "" in checkpoints from before run ids)
} TrainerState;

// Resolves a checkpoint directory: path itself when it holds model.safetensors, else its
// newest step_* child. Returns 0 or -1 after one line.
int ckpt_resolve(const char *path, char *dir, size_t len);
// Reads dir/config.json into cfg->model / cfg->seq_len (for commands that take the shape
// from the checkpoint); a folder transformers wrote is read by hf_import. Returns 0 or -1.
int ckpt_read_config(const char *dir, Config *cfg);
// The checkpoint's model (ck, from ckpt_read_config) has the run's shape: 0, or -1 after one line.
int ckpt_check_model(const char *dir, const Config *ck, const ModelConfig *run);
// Reads and range-checks a trainer_state.json. Returns 0 or -1 after one line naming the key.
int read_trainer_state(const char *path, TrainerState *st);
