// run.h — a training run (`ted train`): its inputs checked on every rank before anything is
// allocated, the trainer built, resumed or initialised from a folder, and what follows each step
// (the log and the monitors, the non-finite stop, evaluation, a sample, a checkpoint, a signal's
// stop). The step itself is the trainer's (trainer.h).
#pragma once
#include <stdio.h>
#include "config/config.h"
#include "io/ckpt_meta.h"
#include "io/data.h"
#include "io/monitor.h"
#include "io/progress.h"
#include "model/memplan.h"
#include "parallel/topology.h"
#include "run/guard.h"
#include "run/trainer.h"

typedef struct {
    Config c;
    Dataset ds;
    Topology topo;
    Trainer tr;
    MemPlan plan;   // predicted before allocating
    TrainerState st;
    FILE *log;
    char ckdir[1200];   // the checkpoint resumed from ("" when none)
    long nval;          // validation windows per evaluation
    long saved;         // the step last saved (-1: none)
    long first_step;    // the step this session starts at
    Progress prog;
    Guard guard;   // non-finite losses stop the run
    Monitor mon;   // tensorboard, csv_monitor
    int world;     // the processes the layout is for (a dry run's --ranks, else the world's)
    int peak_raised;   // steps faster than the MFU peak measured at start (run/after_step.c)
    int done;      // nothing to train: a dry run, or a resumed run already at --steps
} Run;

// The run's configuration (config_resolve): defaults(c), the --config JSON and the flags; with ck
// (ted train) also the checkpoint of --resume or --init-from, read into *ck once, the unused keys
// warned about. Then pipeline.layers "auto" resolved. 0, or -1 after one line.
int run_config(Config *c, int argc, char **argv, void (*defaults)(Config *), ConfigCheckpoint *ck);
// Everything that can be wrong with a run's inputs, checked before any allocation of the model:
// identical on every rank except file access, whose result the ranks then agree on. 0, or an
// exit code after one line.
int run_prepare(Run *R, int argc, char **argv);
// The rules a resolved configuration must keep for a world of `world` processes besides
// config_validate's: the layout divides the world (one process: a line saying to start it under
// mpirun), train_batch_size, the all-to-all's chunks. 0, or -1 after one line.
int run_check_layout(const Config *c, int world);
// Everything before the first step: inputs checked, layout, model, optimizer, resume. 0 or -1
// (on every rank, after one line). R->done set: nothing to train (--dry-run, whose report is
// printed, or a resumed run already at --steps).
int run_open(Run *R, int argc, char **argv);
// After step s: the log, the progress line, evaluation, a sample, a checkpoint. 0 to go on, -1
// after an error line, stop_exit_code() when a signal stopped the run (saved with --save).
int run_after_step(Run *R, long s, const StepMetrics *m);
// Saves the current step into --save (host copies of the weights and the optimizer). 0 or -1.
int run_save(Run *R);
// The checkpoint's weights and optimizer state, its trainer state checked against this run.
int run_resume(Run *R);
// --init-from: the folder's weights and masters, a fresh optimizer, step 0.
int run_init_from(Run *R);
// The end of a run: the time summaries, the final save, the summary line; frees everything.
// 0, or 1 when the final save failed.
int run_close(Run *R);
