// loaded.h — a one-process model with a checkpoint's weights, for the commands that read a
// checkpoint without training it (ted eval, ted generate).
#pragma once
#include "config/config.h"
#include "model/model.h"
#include "parallel/topology.h"

// Resolves `load` into dir (1200 bytes), reads its config into c and builds M on a one-process
// topology for micro-batches of B sequences of T tokens (T_override, else the checkpoint's
// seq_len), once the model fits this node; then loads the weights. 0 or -1 after one line.
int loaded_model(Model *M, Topology *topo, Config *c, const char *load, int B, int T_override, char *dir);
// Once all is well: which checkpoint, at which step (stderr).
void loaded_say(const char *dir, const Config *c);
