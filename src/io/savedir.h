// savedir.h — the --save folder belongs to one run at a time (design):
//   .lock      an exclusive lock held for the run's lifetime (a second run is refused)
//   run_id     the run's identity: a new run's is a digest of its model, seed, data order and
//              every training setting (another lr is another run); a resumed run keeps its
//              checkpoint's (trainer_state.json "run_id"). A new run (no --resume) is refused a
//              folder that holds checkpoints, and a resumed run one that holds another run's,
//              unless --overwrite, which removes them.
//   .step_*    temporary and replaced checkpoints an interrupted save left: removed at start
// The folder is also proved writable (a file written, fsynced, removed) before step 1. The --log
// file is locked the same way (a running job's log is never replaced, --overwrite or not).
#pragma once
#include "config/config.h"

// Rank 0, before training: creates/locks/checks the folder. 0, or -1 after one line.
int savedir_open(const Config *c);
// A new run's identity as 16 hex digits.
void savedir_run_id(const Config *c, char out[17]);
// The identity of the run savedir_open admitted ("" before), which its checkpoints record.
const char *savedir_current_id(void);
// Takes an exclusive lock on file (created when missing) for the process's lifetime: 0, or -1
// after one line "WHAT SHOWN: in use by another ted run (pid N holds its lock)".
int savedir_lock(const char *file, const char *what, const char *shown);
// Removes the oldest step_* directories beyond the newest keep (keep 0: none removed).
void savedir_prune(const char *root, int keep);
// fsyncs a directory (its entries: renames and new files survive a crash). 0 or -1.
int savedir_fsync(const char *dir);
// Removes a directory and the files in it (checkpoints hold no subdirectories).
void savedir_rm_tree(const char *dir);
// --log: locked for the run; an existing non-empty log is another run's unless resuming
// (appended) or --overwrite.
int savedir_check_log(const Config *c);
