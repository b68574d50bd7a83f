// stop.h — SIGINT and SIGTERM end a run cleanly: the signal only raises a flag; the step in
// progress finishes, the ranks agree at the step's end that one of them was asked to stop,
// the last complete step is saved (with --save), and the process exits 128 + the signal.
#pragma once

// Installs the handlers (before training).
void stop_install(void);
// Collective over the world at a step's end: the signal number any rank received, or 0.
int stop_requested(void);
