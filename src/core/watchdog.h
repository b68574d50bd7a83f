// watchdog.h — a hang becomes a diagnosis (--watchdog SECONDS, default 600; 0 turns it off).
// Every collective in parallel/comm.c says when it starts and ends; the training loop and the model
// say where the rank is (step, micro-batch, block and pass). A thread checks once a second:
// when a collective has not completed in time, the rank prints one line naming it (operation,
// group, bytes, step, micro-batch, block) and exits, which ends the job under mpirun. When a
// SIGINT/SIGTERM arrives while a collective has waited 2 s or more (mpirun ending a job whose node
// it lost), the rank names that collective the same way at once, before mpirun's SIGKILL.
#pragma once

// Starts the watchdog thread (once; seconds <= 0: none). grace > 0: after its line the rank waits
// that long before exiting, so that mpirun, whose connections stay idle meanwhile, can notice a lost
// node by its keepalive (once a rank exits, mpirun tells every node and waits for a dead one's TCP
// retransmissions: minutes).
void watchdog_start(int seconds, int grace);
// A collective op on a group of gsize ranks, sending bytes, starts / ends.
void watchdog_enter(const char *op, const char *group, int gsize, long long bytes);
void watchdog_leave(void);
// Where the rank is: a training step and micro-batch (micro < 0: the optimizer), which
// resets the block; a block (moe: an MoE block) and its pass ("forward", "backward", ...).
// From a signal handler (async-signal-safe): SIGINT/SIGTERM received.
void watchdog_signal(int sig);
void watchdog_step(long step, int micro);
void watchdog_block(int block, int moe, const char *pass);
