// checkpoint.h — a directory per step, written to a temporary name and renamed:
//   model.safetensors      full fp32 weights under Hugging Face GPT-2 names
//   optimizer.safetensors  Adam m, v as full tensors ("NAME.exp_avg", "NAME.exp_avg_sq"),
//                          so any layout can resume from any other
//   config.json            the flat model and moe keys (+ seq_len)
//   trainer_state.json     step, Adam step count, seed, steps, data order
#pragma once
#include "model.h"
#include "zero.h"

typedef struct { long step, adam_t, steps; uint64_t seed; int sequential; } TrainerState;

// Writes root/step_%08ld atomically. Returns 0 or -1 after one line.
int ckpt_save(const char *root, const Model *M, const Zero *z, const TrainerState *st);
// Makes sure --save's root is (or can be made) a directory, before training starts.
int ckpt_check_root(const char *root);
// Resolves a checkpoint directory: path itself when it holds model.safetensors, else its
// newest step_* child. Returns 0 or -1 after one line.
int ckpt_resolve(const char *path, char *dir, size_t len);
// Reads dir/config.json into cfg->model / cfg->seq_len (for commands that take the shape
// from the checkpoint). Returns 0 or -1.
int ckpt_read_config(const char *dir, Config *cfg);
// The checkpoint's model (ck, from ckpt_read_config) has the run's shape: 0, or -1 after one line.
int ckpt_check_model(const char *dir, const Config *ck, const ModelConfig *run);
// Checks that the checkpoint's model shape is the run's, then loads the weights.
int ckpt_load_weights(const char *dir, Model *M);
// Loads the optimizer state and the trainer state (for --resume); with fp32 storage the
// caller then sets the masters from the weights (zero_sync_master).
// Checkpoints read and write the host views (reg_host_view, zero_host_view).
int ckpt_load_state(const char *dir, Model *M, Zero *z, TrainerState *st);
// Reads and range-checks a trainer_state.json. Returns 0 or -1 after one line naming the key.
int read_trainer_state(const char *path, TrainerState *st);
