// threads.h — how many OpenMP threads a command runs, and how they wait.
#pragma once
// Passive waiting unless the environment chose: libgomp reads OMP_WAIT_POLICY once, when it
// loads, so a process without it sets PASSIVE and starts itself again (before MPI is up).
// Spinning threads that wait for a core another job holds made a step 3x slower on a shared
// machine (README, Measured). Returns only when nothing was re-executed.
void threads_wait_policy(char **argv);
// n > 0: n threads (OpenMP and OpenBLAS); 0: the cores shared out among the ranks on this node
// (mpirun's OMPI_COMM_WORLD_LOCAL_SIZE), else the OpenMP default.
void threads_set(int n);
