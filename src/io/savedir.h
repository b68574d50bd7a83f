// savedir.h — the --save folder belongs to one run at a time (design):
//   .lock      an exclusive lock held for the run's lifetime (a second run is refused)
//   run_id     the run's identity (a digest of its model, seed and data order): a folder of
//              another run is refused unless --overwrite, which removes that run's checkpoints
//   .step_*    temporary and replaced checkpoints an interrupted save left: removed at start
// The folder is also proved writable (a file written, fsynced, removed) before step 1.
#pragma once
#include "config/config.h"

// Rank 0, before training: creates/locks/checks the folder. 0, or -1 after one line.
int savedir_open(const Config *c);
// The run's identity as 16 hex digits.
void savedir_run_id(const Config *c, char out[17]);
// Removes the oldest step_* directories beyond the newest keep (keep 0: none removed).
void savedir_prune(const char *root, int keep);
// fsyncs a directory (its entries: renames and new files survive a crash). 0 or -1.
int savedir_fsync(const char *dir);
// Removes a directory and the files in it (checkpoints hold no subdirectories).
void savedir_rm_tree(const char *dir);
// --log: an existing non-empty log is another run's unless resuming (appended) or --overwrite.
int savedir_check_log(const Config *c);
