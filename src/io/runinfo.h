// runinfo.h — a run's resolved settings: every key with its value and where it came from
// (default, the JSON config, a flag, or the checkpoint being resumed: config_origin), printed at
// start-up, written as the log's first record and into every checkpoint as run.json. Also the
// training keys a resumed run changed, and DeepSpeed's train_batch_size check.
#pragma once
#include <stdio.h>
#include "config/config.h"
#include "io/data.h"

// One warning line naming every training key of c that differs from the run.json of the
// checkpoint folder dir (nothing when it has none); the model keys, and keys whose change is
// part of normal use (where to write, how often to report, the layout, --steps), are left out.
void runinfo_warn_changes(const Config *c, const char *dir);
// train_batch_size, when given, must be micro_batch × grad_accum × dp. 0 or -1 after one line.
int runinfo_check_batch(const Config *c, int dp);
// Builds the run record, and prints the resolved config and the data summary (rank 0).
void runinfo_start(const Config *c, int argc, char **argv, const Dataset *ds, int T, int world, int dp, int rank0);
// The MFU peak of the run into the record: "mfu_peak": {"kind", "gflops"} (model/mfu.h's kind,
// the whole run's peak).
void runinfo_peak(const char *kind, double flops);
// The record as one {"run": {...}} line of the metrics log (f may be NULL).
void runinfo_log(FILE *f);
// Writes dir/run.json when there is a record (a training run); 0 or -1 after one line.
int runinfo_write(const char *dir);
// The step of a checkpoint directory (its trainer_state.json), -1 when unknown.
long runinfo_ckpt_step(const char *dir);
