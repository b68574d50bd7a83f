// runinfo.h — a run's resolved settings: every key with its value and where it came from
// (default, the JSON config, a flag, or the checkpoint being resumed), printed at start-up,
// written as the log's first record and into every checkpoint as run.json. Also what
// --resume takes from the checkpoint, and DeepSpeed's train_batch_size check.
#pragma once
#include <stdio.h>
#include "config/config.h"
#include "io/data.h"

// After the JSON and the flags: notes where each key came from; with --resume, resolves the
// checkpoint into ckdir, takes the model (and seq_len unless given) from its config.json,
// refuses a given model key that differs (one line naming every such key), and warns (rank 0)
// about training keys that differ from the checkpoint's run.json. With --init-from, the same
// for the model keys of that folder (ted's or a transformers GPT-2 folder), whose resolved path
// (a run's folder: its newest step_N) replaces c->init_from. 0 or -1 after one line.
int runinfo_resolve(Config *c, int argc, char **argv, char *ckdir, size_t cklen);
// train_batch_size, when given, must be micro_batch × grad_accum × dp. 0 or -1 after one line.
int runinfo_check_batch(const Config *c, int dp);
// Builds the run record, and prints the resolved config and the data summary (rank 0).
void runinfo_start(const Config *c, int argc, char **argv, const Dataset *ds, int T, int world, int dp, int rank0);
// The record as one {"run": {...}} line of the metrics log (f may be NULL).
void runinfo_log(FILE *f);
// Writes dir/run.json when there is a record (a training run); 0 or -1 after one line.
int runinfo_write(const char *dir);
// The step of a checkpoint directory (its trainer_state.json), -1 when unknown.
long runinfo_ckpt_step(const char *dir);
