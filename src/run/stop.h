// stop.h — a signal ends a run cleanly: the handler only raises a flag; the step in progress
// finishes, the ranks agree at the step's end that one of them was asked to stop, the step is
// saved (with --save), rank 0 prints one line, and every rank exits with stop_exit_code().
// The stops: SIGINT, SIGTERM, SIGUSR1 and SIGUSR2 (mpirun forwards the last two to every rank)
// and, under Open MPI, a SIGCONT from mpirun or orted that does not continue a stopped rank:
// the first signal of the sequence (SIGCONT, SIGTERM, SIGKILL) that mpirun sends its ranks
// when it is given SIGINT, SIGTERM or SIGHUP (docs/trust.md).
#pragma once
#include <signal.h>

// Installs the handlers (before training).
void stop_install(void);
// Collective over the world at a step's end: the stop any rank was asked for (a signal number,
// SIGCONT for mpirun's sequence), or 0.
int stop_requested(void);
// What asked for it, for the line: "SIGUSR1", "mpirun ending the job (...)".
const char *stop_cause(int stop);
// The exit status of a stopped run: 128 + the signal (143 for mpirun's sequence, as for SIGTERM).
int stop_exit_code(int stop);
