// checkpoint.h — a directory per step, written to a temporary name and renamed:
//   model.safetensors      full fp32 weights under Hugging Face GPT-2 names
//   optimizer.safetensors  Adam m, v as full tensors ("NAME.exp_avg", "NAME.exp_avg_sq"),
//                          so any layout can resume from any other
//   config.json            the flat model and moe keys (+ seq_len)
//   trainer_state.json     step, Adam step count, seed, steps, data order
#pragma once
#include "model/model.h"
#include "parallel/zero.h"
#include "io/ckpt_meta.h"

// Writes root/step_%08ld atomically. Returns 0 or -1 after one line.
int ckpt_save(const char *root, const Model *M, const Zero *z, const TrainerState *st);
// Makes sure --save's root is (or can be made) a directory, before training starts.
int ckpt_check_root(const char *root);
// Checks that the checkpoint's model shape is the run's, then loads the weights.
int ckpt_load_weights(const char *dir, Model *M);
// With 16-bit storage, the optimizer's fp32 masters from the checkpoint's weights (exact, not
// the rounded 16-bit weights; host view). With fp32 storage nothing: the caller then sets the
// masters from the weights (zero_sync_master, device view).
int ckpt_load_masters(const char *dir, Model *M, Zero *z);
// Loads the optimizer state and the trainer state (for --resume); with fp32 storage the
// caller then sets the masters from the weights (zero_sync_master).
// Checkpoints read and write the host views (reg_host_view, zero_host_view).
int ckpt_load_state(const char *dir, Model *M, Zero *z, TrainerState *st);
